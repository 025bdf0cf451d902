"""``df.write.format("kop")`` and ``writeStream.format("kop")``: Spark's Kafka sink, exactly-once.

Each task attempt stages one ledger per partition it writes to, under ``_staging/`` where no reader
looks, and beats its heart there while it runs, so maintenance leaves a live job's output alone.
The driver's commit records the whole batch in one CAS and then appends it partition by partition
(``kop_spark.broker.sink_commits``): a batch Spark runs again after a crash completes what was recorded,
and its own output is dropped, whatever its routing. Records land in partitions as a Kafka
producer puts them (the partition column, else murmur2 of the key, else round robin from the
task's partition id).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..broker import SINK_HEARTBEAT_MS, Broker, StagedLedger, StagedPartition, StagingTopic
from ..errors import (
    InvalidRecordError,
    PartitionNotFoundError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    WriteAbortedError,
)
from ..record.arrow import encode_arrow_by_partition, key_partitions
from ._compat import ARROW_STREAM_WRITER, StreamWriterBase
from .options import SinkOptions
from .record_accumulator import RecordAccumulator, Rows
from .rows import rows_to_arrow
from .schema import check_sink_schema
from .task_heartbeats import TaskHeartbeats

_COLUMNS = ("key", "value", "topic", "partition", "timestamp", "headers")


@dataclass(frozen=True)
class KopCommitMessage(WriterCommitMessage):
    """What a task staged: ``(topic, partition, ledger)`` per ledger, in each partition's order."""

    writer: str
    batch_id: int
    task: int
    staged: tuple[tuple[str, int, StagedLedger], ...]


_INT64 = pa.int64()
_HEARTBEATS = TaskHeartbeats(SINK_HEARTBEAT_MS / 1000)

# A sink is no latency-bound producer: its default batches are larger than a producer's 16 KiB,
# which spends a quarter of a task's time on per-batch work. Half the topic's max.message.bytes at
# most, so that the record that closes a batch still fits.
DEFAULT_BATCH_BYTES = 256 << 10


def _int(value: int, type_: pa.DataType = _INT64) -> pa.Scalar:
    # A typed scalar: pyarrow converts a bare Python int by first trying to import numpy, which
    # costs more than the kernel it feeds.
    return pa.scalar(value, type_)


class _TaskOutput:
    """One task attempt's records, encoded column-wise and staged per target partition."""

    def __init__(self, options: SinkOptions, writer: str, batch_id: int, *, batch_job: bool):
        ctx = TaskContext.get()
        self.task = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        self.options = options
        self.writer = writer
        self.batch_id = batch_id
        self.batch_job = batch_job  # whose abort its tasks look for (see ``finish``)
        self._broker = Broker(options.root, options.conf)
        self._sinks = self._broker.sink_commits
        self._dir = self._sinks.task_dir(writer, batch_id, f"{self.task}-{attempt}-{uuid.uuid4().hex[:8]}")
        self._heartbeat = _HEARTBEATS.start(partial(self._sinks.heartbeat, self._dir))
        self._topics: dict[str, StagingTopic] = {}
        self._staged: dict[tuple[str, int], StagedPartition] = {}
        # Each topic's partitions' encoded batches, reused by every Arrow batch: they are copied
        # into the staged ledgers before the next is encoded.
        self._encoded: dict[str, list[bytearray]] = {}
        self._accumulator = RecordAccumulator(options.buffer_memory)
        self._round_robin = self.task

    def _topic(self, topic: str) -> StagingTopic:
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = _ensure_topic(self._broker, topic, self.options)
        return found

    def partitions_of(self, topic: str) -> int:
        return self._topic(topic).partitions

    def batch_bytes(self, topic: str) -> int:
        if self.options.batch_size is not None:
            return self.options.batch_size
        return min(DEFAULT_BATCH_BYTES, self._topic(topic).config["max.message.bytes"] // 2)

    def add_arrow(self, rb: pa.RecordBatch) -> None:
        if rb.num_rows == 0:
            return
        names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
        columns = {name: rb.column(names[name]) for name in _COLUMNS if name in names}
        if self.options.topic is not None:
            self._add_topic(self.options.topic, columns)
            return
        topics = columns.pop("topic")
        if topics.null_count:
            raise InvalidRecordError("null topic present in the data. Use the topic option for setting a topic.")
        for topic in pc.unique(topics).to_pylist():
            mask = pc.equal(topics, topic)
            self._add_topic(topic, {name: col.filter(mask) for name, col in columns.items()})

    def _add_topic(self, topic: str, columns: dict[str, pa.Array]) -> None:
        count = self.partitions_of(topic)
        n = len(columns["value"])
        partition, key = columns.get("partition"), columns.get("key")
        # Kafka's producer: the partition column, else murmur2 of the key, else round robin (which
        # starts at the task's id, so a re-run task sends its keyless records where the first did).
        chosen = key_partitions(key, count) if key is not None else pa.nulls(n, pa.int32())
        if partition is not None:
            bad = pc.or_(pc.less(partition, _int(0, pa.int32())), pc.greater_equal(partition, _int(count, pa.int32())))
            if pc.any(bad).as_py():
                p = partition.filter(bad)[0].as_py()
                raise PartitionNotFoundError(
                    f"topic {topic!r} has no partition {p}: it has partitions 0 to {count - 1}"
                )
            chosen = pc.coalesce(partition, chosen)
        if chosen.null_count:
            keyless = chosen.is_null()
            nth = pc.subtract(pc.cumulative_sum(keyless.cast(pa.int64())), _int(1))
            spread = pc.remainder(pc.add(nth, _int(self._round_robin)), _int(count))
            chosen = pc.coalesce(chosen, spread.cast(pa.int32()))
            self._round_robin += keyless.true_count
        columns["partition"] = chosen
        # held until each partition has a quarter of a batch on average (see RecordAccumulator)
        for held_topic, rows in self._accumulator.append(topic, columns, count * self.batch_bytes(topic) // 4):
            self._encode(held_topic, rows)

    def _encode(self, topic: str, rows: Rows) -> None:
        count = self.partitions_of(topic)
        encoded = encode_arrow_by_partition(
            rows["value"],
            rows.get("key"),
            rows.get("timestamp"),
            rows.get("headers"),
            partitions=rows["partition"],
            num_partitions=count,
            compression=self.options.compression,
            batch_bytes=self.batch_bytes(topic),
            into=self._encoded_for(topic, count),
        )
        for p, batches in enumerate(encoded):
            if batches:
                self._stage(topic, p, batches)

    def _encoded_for(self, topic: str, partitions: int) -> list[bytearray]:
        into = self._encoded.get(topic)
        if into is None:
            into = self._encoded[topic] = [bytearray() for _ in range(partitions)]
        return into

    def _stage(self, topic: str, partition: int, batches: list[bytes | memoryview]) -> None:
        staged = self._staged.get((topic, partition))
        if staged is None:
            staged = self._staged[(topic, partition)] = self._sinks.stage(self._topic(topic), partition, self._dir)
        staged.append(batches)

    def finish(self) -> KopCommitMessage:
        for topic, rows in self._accumulator.drain():
            self._encode(topic, rows)
        targets = sorted(self._staged)
        sealed = self._sinks.finish_each([self._staged[tp] for tp in targets])
        staged = tuple((t, p, ledger) for (t, p), ledgers in zip(targets, sealed, strict=True) for ledger in ledgers)
        _HEARTBEATS.stop(self._heartbeat)
        # Looked at once all is written: an abort after the look finds, and deletes, all of it.
        if self.batch_job and self._sinks.aborted(self.writer):
            raise WriteAbortedError(
                f"sink job {self.writer}: Spark aborted the write while task {self.task} was writing "
                f"(another task failed first); this task's output is discarded"
            )
        self._broker.close()
        return KopCommitMessage(self.writer, self.batch_id, self.task, staged)

    def discard(self, *, aborted: bool = False) -> None:
        _HEARTBEATS.stop(self._heartbeat)
        for s in self._staged.values():
            s.discard()
        self._sinks.discard_task(self._dir, job_aborted=aborted)
        self._broker.close()


def _ensure_topic(broker: Broker, topic: str, options: SinkOptions) -> StagingTopic:
    try:
        return broker.sink_commits.staging_topic(topic)
    except TopicNotFoundError:
        if not options.auto_create:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist: create it first (kop topics create {topic}) "
                f"or set option auto.create.topics.enable=true"
            ) from None
    try:
        broker.create_topic(topic, options.num_partitions)
    except TopicAlreadyExistsError:
        pass  # another task got there first
    return broker.sink_commits.staging_topic(topic)


def _write(
    options: SinkOptions, writer: str, batch_id: int, batches: Iterator[pa.RecordBatch], *, batch_job: bool
) -> KopCommitMessage:
    out = _TaskOutput(options, writer, batch_id, batch_job=batch_job)
    try:
        for rb in batches:
            out.add_arrow(rb)
        return out.finish()
    except BaseException as e:
        out.discard(aborted=isinstance(e, WriteAbortedError))  # a failed attempt leaves nothing behind
        raise


def _commit(
    options: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int, *, streaming: bool
) -> None:
    """Record the whole batch in one CAS, then append it (``SinkCommits``); a rerun of a recorded
    batch completes the record and its own output goes."""
    ours = sorted((m for m in messages if isinstance(m, KopCommitMessage)), key=lambda m: m.task)
    if not ours:
        return
    writer = ours[0].writer
    by_partition: dict[tuple[str, int], list[StagedLedger]] = defaultdict(list)
    for m in ours:
        for topic, p, ledger in m.staged:
            by_partition[(topic, p)].append(ledger)
    with Broker(options.root, options.conf) as broker:
        broker.sink_commits.commit(writer, batch_id, by_partition, streaming=streaming)
        broker.sink_commits.remove_staged(writer, batch_id)


def _abort(
    options: SinkOptions, messages: Sequence[WriterCommitMessage | None], job: str | None, batch_id: int
) -> None:
    """A batch job names itself; a streaming query's abort knows its writer only from the
    messages of the tasks that ended (Spark does not tell its id to the driver's writer)."""
    writers = {job} if job else {m.writer for m in messages if isinstance(m, KopCommitMessage)}
    with Broker(options.root, options.conf) as broker:
        for w in writers:
            broker.sink_commits.abort(w, batch_id, batch_job=job is not None)


class KopBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kop").mode("append")``: one job, appended when all its tasks succeed."""

    def __init__(self, options: SinkOptions):
        self.options = options
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self.options, self.job, 0, iterator, batch_job=True)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.options, messages, 0, streaming=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.options, messages, self.job, 0)


class KopStreamWriter(StreamWriterBase):
    """``writeStream.format("kop")``: each micro-batch appended exactly once, keyed by the query id
    (stable across restarts) and the batch id. Spark hands it Arrow batches (PySpark 4.1+) or rows."""

    def __init__(self, options: SinkOptions, schema: StructType):
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch] | Iterator[Row]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        if not query or batch is None:
            raise RuntimeError("kop stream writer: the task carries no streaming query id or batch id")
        batches = iterator if ARROW_STREAM_WRITER else rows_to_arrow(iterator, self.schema)  # rows before 4.1
        return _write(self.options, query, int(batch), batches, batch_job=False)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.options, messages, batchId, streaming=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.options, messages, None, batchId)


def prepare(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Parse the options and check the DataFrame on the driver; create the ``topic`` option's topic
    when auto-creation is on, or refuse a missing one before any task runs."""
    sink = SinkOptions.parse(options)
    check_sink_schema(schema, sink.topic)
    if sink.topic is not None:
        with Broker(sink.root, sink.conf) as broker:
            _ensure_topic(broker, sink.topic, sink)
    return sink


__all__ = ["KopBatchWriter", "KopStreamWriter", "prepare"]
