"""Kafka's idempotent producers in one partition (Kafka's ``ProducerStateManager``).

Each producer id has an epoch and the sequence ranges and offsets of its last five batches (a
producer has at most five in flight), kept in the partition's metadata::

    "kafka_producers": {"<producer id>": {"epoch": e, "ts": ms, "batches": [[first_seq, last_seq, base_offset, span], ...]}}

so they change in the same CAS as the append they describe and hold after a restart. A batch is
checked as Kafka checks it: an older epoch is fenced; a batch equal to one of the five is a retry,
answered with the original's offsets and not written again; otherwise its first sequence must
follow the last one (0 after an epoch bump); a producer this partition knows nothing of (never
seen, or forgotten after ``producer.id.expiration.ms``) may start anywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ..record import RecordBatch

BATCHES_RETAINED = 5
NO_PRODUCER_ID = -1
_SEQUENCE_MOD = 1 << 31  # sequences are non-negative int32 and wrap to 0


class ProducerBatch(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    span: int


class ProducerEntry(NamedTuple):
    epoch: int
    batches: tuple[ProducerBatch, ...]
    ts: int

    @property
    def end_offset(self) -> int:
        last = self.batches[-1]
        return last.base_offset + last.span

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ProducerEntry:
        return cls(value["epoch"], tuple(ProducerBatch(*b) for b in value["batches"]), value["ts"])

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "ts": self.ts, "batches": [list(b) for b in self.batches]}


def _sequences(batch: RecordBatch) -> tuple[int, int]:
    return batch.base_sequence, (batch.base_sequence + batch.last_offset_delta) % _SEQUENCE_MOD


def check_producers(
    producers: dict[int, ProducerEntry], batches: Sequence[bytes], where: str, base_offset: int, now: int
) -> int | None:
    """Check an append's idempotent batches, to be written from ``base_offset``, against
    ``producers``. A retry of batches already written returns their original base offset (and
    changes nothing); otherwise the batches are recorded in ``producers`` and None is returned.
    Raises ``InvalidProducerEpochError`` or ``OutOfOrderSequenceError``, changing nothing."""
    views = [RecordBatch(b) for b in batches]
    if all(v.producer_id == NO_PRODUCER_ID for v in views):
        return None
    duplicates = [_duplicate(producers.get(v.producer_id), v, where) for v in views]
    if all(d is not None for d in duplicates):
        return duplicates[0]
    if any(d is not None for d in duplicates):
        raise OutOfOrderSequenceError(f"{where}: a request mixes retried batches with new ones")
    updated: dict[int, ProducerEntry] = {}
    offset = base_offset
    for v in views:
        if v.producer_id != NO_PRODUCER_ID:
            entry = updated.get(v.producer_id, producers.get(v.producer_id))
            updated[v.producer_id] = _follow(entry, v, where, offset, now)
        offset += v.offset_span
    producers.update(updated)
    return None


def _duplicate(entry: ProducerEntry | None, batch: RecordBatch, where: str) -> int | None:
    if batch.producer_id == NO_PRODUCER_ID or entry is None:
        return None
    if batch.producer_epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"{where}: producer {batch.producer_id} has epoch {batch.producer_epoch}, older than its current "
            f"epoch {entry.epoch}: it was fenced by a newer instance"
        )
    if batch.producer_epoch != entry.epoch:
        return None
    first, last = _sequences(batch)
    return next((b.base_offset for b in entry.batches if (b.first_seq, b.last_seq) == (first, last)), None)


def _follow(entry: ProducerEntry | None, batch: RecordBatch, where: str, offset: int, now: int) -> ProducerEntry:
    first, last = _sequences(batch)
    if entry is not None:
        expected = 0 if batch.producer_epoch != entry.epoch else (entry.batches[-1].last_seq + 1) % _SEQUENCE_MOD
        if first != expected:
            raise OutOfOrderSequenceError(
                f"{where}: producer {batch.producer_id} (epoch {batch.producer_epoch}) sent sequence {first}, "
                f"expected {expected}"
            )
    kept = entry.batches if entry is not None and entry.epoch == batch.producer_epoch else ()
    new = ProducerBatch(first, last, offset, batch.offset_span)
    return ProducerEntry(batch.producer_epoch, (*kept, new)[-BATCHES_RETAINED:], now)
