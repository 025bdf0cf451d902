"""``format("kop")``: the Python data source, its batch reader and its micro-batch stream reader.

Everything here runs on the driver except ``read()``, which Spark calls on executors with an
input partition planned here (see ``partition_reader``). Streaming offsets are Spark's Kafka
source offsets, ``{"topic": {"partition": next_offset}}``, in sorted key order, because Spark
compares offsets as JSON strings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import ConfigError
from ..storage.managed_ledger import Snapshot
from ._compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from .offset_range import OffsetRange, rate_limit, split_ranges
from .offset_reader import KopOffsetReader, tp_name
from .options import PartitionOffsets, SourceOptions, TopicPartition, bool_option
from .partition_reader import KopInputPartition, read_partition
from .sink import KopBatchWriter, KopStreamWriter, prepare


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema; ``headers`` only with ``includeHeaders=true``."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def offsets_to_json(offsets: PartitionOffsets) -> dict:
    """``{"topic": {"partition": offset}}`` with keys in sorted (JSON-canonical) order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, p), off in offsets.items():
        nested.setdefault(topic, {})[str(p)] = off
    return json.loads(json.dumps(nested, sort_keys=True))


def offsets_from_json(value: dict) -> PartitionOffsets:
    return {(topic, int(p)): int(off) for topic, parts in value.items() for p, off in parts.items()}


class KopDataSource(DataSource):
    """``format("kop")``: batch and streaming reads and writes of kop topics."""

    @classmethod
    def name(cls) -> str:
        return "kop"

    def schema(self) -> StructType:
        options = {k.lower(): str(v) for k, v in self.options.items()}
        return source_schema(bool_option(options, "includeHeaders", False))

    def _check_schema(self, schema: StructType, options: SourceOptions) -> None:
        if schema != source_schema(options.include_headers):
            raise ConfigError("The kop source has a fixed schema and cannot be set with a custom one")

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, streaming=False)
        self._check_schema(schema, options)
        return KopBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options, streaming=True)
        self._check_schema(schema, options)
        return KopStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("kop topics are append-only: save mode Overwrite is not supported; use mode('append')")
        return KopBatchWriter(prepare(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KopStreamWriter(prepare(self.options, schema))


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, KopInputPartition):
        return iter(())  # Spark's stand-in partition when there is nothing to read
    return read_partition(partition)


class KopBatchReader(DataSourceReader):
    """A batch read of ``[startingOffsets, endingOffsets)`` of every subscribed partition."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        reader = KopOffsetReader(o)
        try:
            snapshots = reader.starting()
            start = reader.resolve(o.starting, snapshots, "startingOffsets")
            end = reader.resolve(o.ending, snapshots, "endingOffsets")
            ranges = []
            for tp in sorted(snapshots):
                if start[tp] > end[tp]:
                    raise ConfigError(
                        f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for topic {tp[0]} "
                        f"partition {tp[1]}. You either provided an invalid fromOffset, or the topic has been damaged"
                    )
                ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
            ranges = split_ranges(ranges, o.min_partitions, o.max_records_per_partition)
            return reader.plan(ranges, snapshots)
        finally:
            reader.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class KopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscribed partitions, with Kafka's admission control and, given a
    ``group.id``, the group's offsets committed as batches complete."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._offset_reader: KopOffsetReader | None = None
        self._initial: dict | None = None
        self._available_now: PartitionOffsets | None = None
        self._last_trigger_ms = 0
        self._committed: PartitionOffsets | None = None
        self._last_end: dict | None = None
        self._latest: PartitionOffsets | None = None  # as of the last latestOffset(), for progress

    @property
    def _reader(self) -> KopOffsetReader:
        if self._offset_reader is None:
            self._offset_reader = KopOffsetReader(self.options)
        return self._offset_reader

    def __getstate__(self) -> dict:
        # Spark pickles the reader to ship ``read`` to executors, which need no broker.
        return {**self.__dict__, "_offset_reader": None}

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        snapshots = self._reader.starting()
        self._initial = offsets_to_json(self._reader.resolve(self.options.starting, snapshots, "startingOffsets"))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # The run ends at what is there now, whatever producers write meanwhile.
        self._available_now = self._reader.latest()

    def reportLatestOffset(self) -> dict | None:
        # Spark asks right after latestOffset(); the offsets it saw are the ones to report.
        return offsets_to_json(self._latest if self._latest is not None else self._reader.latest())

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:  # PySpark < 4.2 passes neither and cannot limit batches: read all there is
            start, limit = self._last_end or {}, ReadAllAvailable()
        self._last_end = self._latest_offset(start, limit)
        return self._last_end

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        # Spark asks for the next batch only once the batch ending at ``start`` is complete, so this
        # is when the group learns of it; ``commit(end)`` alone would come one batch late (or never,
        # for the last batch of a run).
        begin = offsets_from_json(start)
        snapshots = self._reader.current()  # one metadata read per partition and trigger
        if self._initial is None or start != self._initial:
            self._commit_group(begin, snapshots)
        if self._available_now is not None:
            latest = {tp: off for tp, off in self._available_now.items() if tp in snapshots}
        else:
            latest = {tp: s.next_offset for tp, s in snapshots.items()}
        self._latest = latest
        # Partitions that appeared since ``start`` are read from their earliest offset; partitions
        # that are gone drop out of the offsets (partitions() reports the loss).
        begin = {tp: begin[tp] if tp in begin else snapshots[tp].log_start_offset for tp in latest}
        return offsets_to_json(self._admit(begin, latest, limit, snapshots))

    def _admit(
        self,
        begin: PartitionOffsets,
        latest: PartitionOffsets,
        limit: ReadLimit,
        snapshots: dict[TopicPartition, Snapshot],
    ) -> PartitionOffsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        o = self.options
        if o.min_offsets_per_trigger is not None and self._available_now is None:
            backlog = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
            now = int(time.time() * 1000)
            if backlog < o.min_offsets_per_trigger and now - self._last_trigger_ms < o.max_trigger_delay_ms:
                return {tp: begin[tp] for tp in latest}
            self._last_trigger_ms = now
        end = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
        if max_rows is not None:
            end = rate_limit(max_rows, begin, end)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else o.max_bytes_per_trigger
        if max_bytes is not None:
            end = self._byte_limit(max_bytes, begin, end, snapshots)
        return end

    def _byte_limit(
        self, max_bytes: int, begin: PartitionOffsets, end: PartitionOffsets, snapshots: dict[TopicPartition, Snapshot]
    ) -> PartitionOffsets:
        """Shrink ``end`` so the batch holds about ``max_bytes``, shared in proportion to each
        partition's bytes; a soft limit, like the file sources' (at least one record per partition)."""
        sizes = {tp: self._reader.estimated_bytes(snapshots[tp], begin[tp], end[tp]) for tp in end}
        total = sum(sizes.values())
        if total <= max_bytes:
            return end
        out = dict(end)
        for tp in sizes:
            records = end[tp] - begin[tp]
            if records > 0:
                out[tp] = begin[tp] + max(1, records * max_bytes // total)
        return out

    def commit(self, end: dict) -> None:
        self._commit_group(offsets_from_json(end))

    def _commit_group(self, offsets: PartitionOffsets, live: dict[TopicPartition, Snapshot] | None = None) -> None:
        group = self.options.group_id
        if group is None or not offsets or offsets == self._committed:
            return
        self._reader.commit(group, offsets, live)
        self._committed = offsets

    # -- planning and reading ----------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        snapshots = self._reader.snapshots(list(until))
        gone = sorted((set(begin) - set(until)) | (set(until) - set(snapshots)))
        if gone:
            self._reader.report_data_loss(
                f"{', '.join(tp_name(tp) for tp in gone)} are gone. Some data may have been missed"
            )
        ranges = []
        for tp in sorted(snapshots):
            snap = snapshots[tp]
            if tp in begin:
                lo = begin[tp]
            else:
                lo = snap.log_start_offset
                if lo != 0:
                    self._reader.report_data_loss(
                        f"Added partition {tp_name(tp)} starts from {lo} instead of 0. Some data may have been missed"
                    )
            hi = until[tp]
            if hi < lo:
                self._reader.report_data_loss(
                    f"Partition {tp_name(tp)}'s offset was changed from {lo} to {hi}, some data may have been missed"
                )
                continue
            if lo < snap.log_start_offset:
                trimmed_to = min(snap.log_start_offset, hi)
                self._reader.report_data_loss(
                    f"Cannot fetch offsets {lo} to {trimmed_to - 1} of {tp_name(tp)}: the earliest available "
                    f"offset is now {snap.log_start_offset}"
                )
                lo = trimmed_to
            ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
        ranges = split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)
        return self._reader.plan(ranges, snapshots)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def stop(self) -> None:
        if self._offset_reader is not None:
            self._offset_reader.close()


def register(spark) -> None:
    """Make ``format("kop")`` available in ``spark`` (Spark also finds it by itself through the
    ``pyspark_kop`` package when kop-spark is installed)."""
    spark.dataSource.register(KopDataSource)


__all__: list[str] = ["KopDataSource", "register", "source_schema"]
