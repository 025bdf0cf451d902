"""Retention, as functions over a managed ledger's metadata: folded into every CAS of the log, so
whichever writer changes it next applies them (Kafka's log retention, producer expiry and the
delayed deletion of ``file.delete.delay.ms``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .fileio import FileIO
from .ledger_metadata import OPEN, LogMetadata

# A writer idle this long may be forgotten early (see ``longest_idle``): a client retries a batch
# within its delivery.timeout.ms (2 min by default), and a transaction lasts at most
# transaction.max.timeout.ms (15 min), so no retry of its batches can come after it.
FORGETTABLE_AFTER_MS = 15 * 60_000

K = TypeVar("K")


@dataclass(frozen=True)
class RetentionPolicy:
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    delete_policy: bool = True  # cleanup.policy has "delete": retention applies
    file_delete_delay_ms: int = 60_000
    producer_expiration_ms: int = 86_400_000
    max_producers: int = 1000  # kafkaMaxProducersPerPartition: idle ones past it are forgotten early
    sink_expiration_ms: int = 604_800_000  # forget an exactly-once writer's last batch this long after it


def apply_retention(meta: LogMetadata, policy: RetentionPolicy, now: int) -> None:
    """Drop the oldest closed ledgers past ``retention.ms`` or beyond ``retention.bytes``."""
    if not policy.delete_policy:
        return
    size = sum(l.length for l in meta.ledgers)
    dropped = 0
    for l in meta.ledgers:
        if l.state == OPEN:
            break
        too_old = policy.retention_ms >= 0 and l.retention_time < now - policy.retention_ms
        # Kafka drops a segment only while the log stays at or above retention.bytes without it.
        too_big = policy.retention_bytes >= 0 and size - l.length >= policy.retention_bytes
        if not (too_old or too_big):
            break
        size -= l.length
        dropped += 1
    if dropped:
        meta.drop_head(dropped, now + policy.file_delete_delay_ms)


def tail_expired(meta: LogMetadata, policy: RetentionPolicy, now: int) -> bool:
    """Whether the open ledger's records are all past ``retention.ms``: then it is closed, and
    dropped in the same CAS, as Kafka rolls such an active segment (or a log nobody writes to
    would keep it for ever)."""
    tail = meta.tail
    if tail is None or tail.state != OPEN or not policy.delete_policy:
        return False
    return policy.retention_ms >= 0 and tail.retention_time < now - policy.retention_ms


def expire_writers(meta: LogMetadata, policy: RetentionPolicy, now: int) -> None:
    """Forget idempotent producers and exactly-once writers by time (as Kafka's
    producer.id.expiration.ms and transactional.id.expiration.ms), and Kafka producers idle for
    long past ``max_producers`` too."""
    for table, expiration in ((meta.producers, policy.producer_expiration_ms), (meta.sinks, policy.sink_expiration_ms)):
        for writer in [w for w, r in table.items() if r.ts < now - expiration]:
            del table[writer]
    for producer in [p for p, e in meta.kafka_producers.items() if e.ts < now - policy.producer_expiration_ms]:
        del meta.kafka_producers[producer]
    for producer in longest_idle(meta.kafka_producers, policy.max_producers, now):
        del meta.kafka_producers[producer]


class _Written(Protocol):
    @property
    def ts(self) -> int: ...  # when the writer last wrote


def longest_idle(
    writers: Mapping[K, _Written], most: int, now: int, may_go: Callable[[K], bool] = lambda _: True
) -> list[K]:
    """The writers past ``most`` to forget, longest idle first, of those idle ``FORGETTABLE_AFTER_MS``
    that ``may_go`` (asked only until there are enough). Every append rewrites a partition's
    writers (they change in its CAS), so a partition that short-lived writers wrote to kept each
    until it expired and appended ever slower: a Java client is idempotent by default, each
    instance a new producer id, and 5,000 of them made each append 12 times as slow, rewriting
    360 KB. Those active lately are all kept."""
    excess = len(writers) - most
    if excess <= 0:
        return []
    idle = sorted((w.ts, key) for key, w in writers.items() if w.ts <= now - FORGETTABLE_AFTER_MS)
    return list(itertools.islice((key for _, key in idle if may_go(key)), excess))


def purge_trash(fileio: FileIO, committed: LogMetadata, meta: LogMetadata, now: int) -> None:
    """Delete trashed files whose grace has passed. Only entries of the ``committed`` version's
    trash qualify: a file is deleted only once a CAS that stopped referring to it has gone
    through, never on the strength of the CAS being prepared. A crash after the delete leaves
    a trash record of a missing file (harmless), never an unrecorded file."""
    due = {t["file"] for t in committed.trash if t["delete_after_ms"] <= now}
    if not due:
        return
    for f in due:
        fileio.delete(f)
    meta.trash = [t for t in meta.trash if t["file"] not in due]
