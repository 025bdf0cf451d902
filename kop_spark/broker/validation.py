"""What a Kafka broker checks of produced record batches (Kafka's LogValidator), and the batches
as they are stored: timestamp type from the topic, the records' true max timestamp, LogAppendTime
stamped by the broker. Spark's staged output passes the same checks (``StagedPartition``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..clock import Clock
from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
    StorageError,
)
from ..record import RecordBatch, TimestampType, split_batches
from ..record.arrow import RecordsSummary, summarize
from ..record.default_record_batch import with_log_append_time, with_timestamps
from ..storage.at_once import each_at_once
from ..storage.staging import LedgerStager, StagedLedger
from ..topic_name import TopicPartition
from ..topic_settings import LONG_MAX
from .admin import PRODUCED_TOPIC_AGE_S

if TYPE_CHECKING:
    from ..storage.managed_ledger import ManagedLedger
    from .admin import TopicMeta
    from .broker import Broker

TopicConfig = Mapping[str, Any]
PartitionBatches = tuple[str, int, Sequence[bytes]]  # (topic, partition, batches) of a PRODUCE


def check_size(where: str, batch: bytes | memoryview, topic_config: TopicConfig) -> None:
    max_bytes = topic_config["max.message.bytes"]
    if len(batch) > max_bytes:
        raise RecordTooLargeError(f"{where}: batch of {len(batch)} bytes is larger than max.message.bytes={max_bytes}")


_KEYLESS = "Compacted topic cannot accept message without key"  # Kafka's words, for a batch and a record


def check_keys(where: str, records: RecordsSummary, topic_config: TopicConfig) -> None:
    if records.keyless and is_compacted(topic_config):
        raise InvalidRecordError(f"{where}: {_KEYLESS}")


def _timestamp_bounds(topic_config: TopicConfig, now: int) -> tuple[int, int]:
    """The earliest and latest times a CreateTime topic takes (Kafka's KIP-937)."""
    return now - topic_config["message.timestamp.before.max.ms"], now + topic_config["message.timestamp.after.max.ms"]


def _out_of_bounds(stamp: int, bounds: tuple[int, int]) -> bool:
    return stamp != -1 and not bounds[0] <= stamp <= bounds[1]  # -1: "no timestamp", which passes


def check_timestamps(where: str, lowest: int, highest: int, topic_config: TopicConfig, now: int) -> None:
    """Refuse records stamped further from ``now`` than the topic allows (Kafka's KIP-937), as a
    Kafka broker does on a CreateTime topic; -1 is "no timestamp", which passes."""
    bounds = _timestamp_bounds(topic_config, now)
    for stamp in (lowest, highest):
        if _out_of_bounds(stamp, bounds):
            before, after = (
                topic_config["message.timestamp.before.max.ms"],
                topic_config["message.timestamp.after.max.ms"],
            )
            raise InvalidTimestampError(
                f"{where}: timestamp {stamp} is out of range. The timestamp should be within [{bounds[0]}, "
                f"{bounds[1]}] (message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after})"
            )


def refused_records(batch: RecordBatch, topic_config: TopicConfig, now: int) -> tuple[RecordError, ...]:
    """Each record of a refused batch that Kafka's LogValidator refuses, with Kafka's message for it
    (KIP-467): a client fails those records with their own error, and the batch's others as refused
    with them (librdkafka's INVALID_DIFFERENT_RECORD). Walked in Python: only a refused batch pays."""
    compacted, stamped = is_compacted(topic_config), uses_log_append_time(topic_config)
    bounds = _timestamp_bounds(topic_config, now)
    errors = []
    for i, record in enumerate(batch.records()):
        if compacted and record.key is None:
            errors.append(RecordError(i, _KEYLESS))
        elif not stamped and _out_of_bounds(record.timestamp_ms, bounds):
            errors.append(
                RecordError(
                    i,
                    f"Timestamp {record.timestamp_ms} of message with offset {record.offset} is out of range. "
                    f"The timestamp should be within [{bounds[0]}, {bounds[1]}]",
                )
            )
    return tuple(errors)


def is_compacted(topic_config: TopicConfig) -> bool:
    return "compact" in topic_config["cleanup.policy"]


def uses_log_append_time(topic_config: TopicConfig) -> bool:
    return topic_config["message.timestamp.type"] == "LogAppendTime"


def validate_produced(where: str, b: bytes | memoryview, topic_config: TopicConfig, now: int) -> bytes:
    """Check one produced v2 batch; return it as it is to be stored (the same bytes when the
    producer's header already says what the records do)."""
    batch = RecordBatch(b)
    check_size(where, b, topic_config)
    if not batch.is_valid():
        raise CorruptRecordError(f"{where}: record batch fails its CRC-32C")
    if batch.is_control:
        raise InvalidRecordError(f"{where}: clients may not produce control batches")
    if batch.record_count < 1 or batch.last_offset_delta != batch.record_count - 1:
        raise InvalidRecordError(f"{where}: {batch.record_count} records but lastOffsetDelta {batch.last_offset_delta}")
    records = summarize(batch)
    if not records.offsets_in_order:
        raise InvalidRecordError(f"{where}: record offset deltas are not 0 to {batch.last_offset_delta} in order")
    stamped = uses_log_append_time(topic_config)
    try:
        check_keys(where, records, topic_config)
        if not stamped:
            check_timestamps(where, records.min_timestamp, records.max_timestamp, topic_config, now)
    except InvalidRecordError as e:
        e.record_errors = refused_records(batch, topic_config, now)
        raise
    if stamped:
        return with_log_append_time(b, now)
    # The records' own times, whatever flag and maximum the header claims.
    if batch.timestamp_type == TimestampType.CREATE_TIME and batch.max_timestamp == records.max_timestamp:
        return bytes(b)
    return with_timestamps(b, TimestampType.CREATE_TIME, records.max_timestamp)


class CheckedProduce(NamedTuple):
    log: ManagedLedger
    batches: list[bytes]  # as they are to be stored
    now: int  # the broker time they are stamped with
    log_append_time: int  # ``now`` on a LogAppendTime topic, else -1 (as a produce response says)


class Produced(NamedTuple):
    """What a produce response tells of a partition's append."""

    base_offset: int
    log_start_offset: int
    log_append_time: int


def checked_batches(
    broker: Broker,
    topic: str,
    partition: int,
    batches: Sequence[bytes],
    meta: dict[str, Any] | None,
    internal_topics_allowed: bool = False,
) -> CheckedProduce:
    """A produce's batches as they are to be stored, each checked (``validate_produced``), with
    the partition's log and the time they are stamped with; refused whole if any fails. An internal
    topic takes only the group coordinator's (``internal_topics_allowed``), as in Kafka."""
    if not internal_topics_allowed:
        broker.admin.refuse_internal(topic, "produce to")
    if meta is None:
        meta = broker.admin.metadata(topic, within_s=PRODUCED_TOPIC_AGE_S, partition=partition)[1]
    broker.admin.check_partition(topic, partition, meta)
    cfg = broker.config.topic_config(meta.get("config"))
    flat = [b for item in batches for b in split_batches(item)]
    if not flat:
        raise InvalidRecordError(f"produce to {topic}-{partition}: no record batches given")
    now = broker.clock.now_ms()
    where = f"produce to {topic}-{partition}, batch"
    checked = [validate_produced(f"{where} {i}", b, cfg, now) for i, b in enumerate(flat)]
    stamped = now if uses_log_append_time(cfg) else -1
    return CheckedProduce(broker.admin.log(topic, partition, meta), checked, now, stamped)


def queued_produces(
    broker: Broker, wanted: Sequence[PartitionBatches], on_log: Callable[[str, Callable[[], Produced]], Produced]
) -> list[Callable[[], Produced] | Exception]:
    """``checked_batches`` then ``queued_produce`` for each of a PRODUCE's partitions, each wait run
    through ``on_log(topic, wait)``; or why it was refused. Each topic's metadata is read once: on
    an object store that read is a round trip, which a request of a hundred partitions of a topic
    made a hundred times, in turn."""
    metas = topic_metadata(broker, [(topic, partition) for topic, partition, _ in wanted])
    out: list[Callable[[], Produced] | Exception] = []
    for topic, partition, batches in wanted:
        try:
            meta = metas[topic]
            if isinstance(meta, Exception):
                raise meta
            wait = queued_produce(checked_batches(broker, topic, partition, batches, meta))
            out.append(functools.partial(on_log, topic, wait))
        except Exception as e:  # that partition's answer; the others go on
            out.append(e)
    return out


def topic_metadata(broker: Broker, partitions: Iterable[TopicPartition]) -> dict[str, TopicMeta | Exception]:
    """The metadata of each topic of ``partitions``, read once (at once) unless read lately
    (``PRODUCED_TOPIC_AGE_S``), or why it cannot be had: every partition of a request to it
    answers with that."""
    highest: dict[str, int] = {}
    for topic, partition in partitions:
        highest[topic] = max(partition, highest.get(topic, partition))
    read = each_at_once(
        [
            functools.partial(broker.admin.metadata, t, within_s=PRODUCED_TOPIC_AGE_S, partition=p)
            for t, p in highest.items()
        ],
        broker.store.read_parallelism,
    )
    return {t: r if isinstance(r, Exception) else r[1] for t, r in zip(highest, read, strict=True)}


def queued_produce(checked: CheckedProduce) -> Callable[[], Produced]:
    """Queue checked batches for their log's next write; the call returned waits for it."""
    ml = checked.log
    wait = ml.queue_append(checked.batches, broker_timestamp=checked.now)

    def written() -> Produced:
        base, known = wait().base_offset, ml.last_known
        return Produced(base, (known or ml.view()).log_start_offset, checked.log_append_time)

    return written


class StagedPartition:
    """A partition's share of a task's output, written to staged ledgers (see ``Broker.stage``),
    checked as produced batches are: size, keys on compacted topics, timestamps, LogAppendTime stamping. A
    ledger that reaches ``roll_bytes`` is sealed and the next append starts another, so a large
    output never has to be held whole where ledgers are built in memory. ``durable``: each append
    is durable when it returns (a transaction's produce, which a restarted server takes up again):
    synced, or sealed where ledgers are written whole. ``sealed``: ledgers staged before."""

    def __init__(
        self,
        topic: str,
        partition: int,
        new_stager: Callable[[], LedgerStager],
        roll_bytes: int,
        topic_config: TopicConfig,
        clock: Clock,
        delete: Callable[[str], None],
        *,
        durable: bool = False,
        sealed: Sequence[StagedLedger] = (),
    ):
        self.topic = topic
        self.partition = partition
        self._new_stager = new_stager
        self._roll_bytes = roll_bytes
        self._stager: LedgerStager | None = None
        self._sealed = list(sealed)
        self._config = topic_config
        self._clock = clock
        self._delete = delete
        self._durable = durable
        self._failed: str | None = None  # why the staging can no longer go on

    def append(self, batches: Sequence[bytes | memoryview]) -> None:
        """Stage batches as the ledger's next entries (copied: the caller may reuse their memory)."""
        now, cfg = self._clock.now_ms(), self._config
        where = f"{self.topic}-{self.partition}"
        stamped = uses_log_append_time(cfg)
        # Built by kop's encoder, so the header's max timestamp is the records': the records are
        # walked only for what the header does not say.
        walk = is_compacted(cfg) or (not stamped and cfg["message.timestamp.before.max.ms"] < LONG_MAX)
        for batch in batches:
            check_size(where, batch, cfg)
            header = RecordBatch(batch)
            records = summarize(header) if walk else None
            if records is not None:
                check_keys(where, records, cfg)
            if not stamped:
                check_timestamps(where, records.min_timestamp if records else -1, header.max_timestamp, cfg, now)
        if stamped:
            batches = [with_log_append_time(b, now) for b in batches]
        self.append_checked(batches, now)

    def append_checked(self, batches: Sequence[bytes | memoryview], now: int) -> None:
        """Stage batches a produce's checks passed already (``checked_batches``), stamped at ``now``.
        One that fails part way leaves the staging unknown: it refuses all but ``discard`` after."""
        if self._failed is not None:
            raise StorageError(self._failed)
        try:
            self._append(batches, now)
        except BaseException as e:
            self._failed = (
                f"staging of {self.topic}-{self.partition} failed part way ({type(e).__name__}: {e}): what it staged "
                f"can only be discarded"
            )
            raise

    def _append(self, batches: Sequence[bytes | memoryview], now: int) -> None:
        while batches:
            fresh = self._stager is None
            if self._stager is None:
                self._stager = self._new_stager()
            room, fit = self._roll_bytes - self._stager.length, 0
            while fit < len(batches) and len(batches[fit]) <= room:
                room -= len(batches[fit])
                fit += 1
            fit = fit or int(fresh)  # a batch larger than a whole ledger gets one of its own
            if fit:
                self._stager.append(batches[:fit], now)
                batches = batches[fit:]
            if batches or self._stager.length >= self._roll_bytes:
                self._seal()
        if self._durable and self._stager is not None:
            if self._stager.appendable:
                self._stager.sync()
            else:
                self._seal()

    def _seal(self) -> None:
        if self._stager is not None:
            self._sealed.append(self._stager.finish())
            self._stager = None

    @property
    def sealed(self) -> tuple[StagedLedger, ...]:
        """The ledgers sealed so far, in order."""
        return tuple(self._sealed)

    def finish(self) -> tuple[StagedLedger, ...]:
        """The staged ledgers, sealed, in order."""
        if self._failed is not None:
            raise StorageError(self._failed)
        self._seal()
        return tuple(self._sealed)

    def abandon(self) -> None:
        """Give up the staged ledgers, left as they are to the server that took them up."""
        if self._stager is not None:
            self._stager.abandon()
        self._sealed, self._stager = [], None

    def discard(self) -> None:
        """Remove whatever was staged (a failed task attempt leaves nothing behind)."""
        if self._stager is not None:
            self._stager.discard()
        for ledger in self._sealed:
            self._delete(ledger.file)
        self._sealed, self._stager = [], None
