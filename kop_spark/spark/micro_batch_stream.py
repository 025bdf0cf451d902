"""``spark.readStream.format("kop")``: micro-batches over the subscribed partitions (Spark's
``KafkaMicroBatchStream``), with Kafka's admission control and, given a ``group.id``, the group's
offsets committed as batches complete. Offsets are ``source_offset``'s JSON."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ..clock import SYSTEM_CLOCK, Clock
from . import source_offset
from ._compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from .offset_range import rate_limit
from .offset_reader import KopOffsetReader, Views
from .options import PartitionOffsets, SourceOptions
from .partition_reader import read_input_partition

Offset = dict[str, dict[str, int]]


class _Look(NamedTuple):
    """A look at the store for the latest offsets: when, for a batch starting where, what it saw."""

    at_ms: int
    start: Offset
    views: Views


class KopMicroBatchStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, clock: Clock = SYSTEM_CLOCK):
        self.options = options
        self._clock = clock
        self._offset_reader: KopOffsetReader | None = None
        self._initial: Offset | None = None
        self._available_now: PartitionOffsets | None = None
        self._last_trigger_ms = 0
        self._committed: PartitionOffsets | None = None
        self._last_end: Offset | None = None  # where the next batch starts, as far as this reader knows
        self._latest: PartitionOffsets | None = None  # as of the last latestOffset(), for progress
        self._last_look: _Look | None = None

    @property
    def _reader(self) -> KopOffsetReader:
        if self._offset_reader is None:
            self._offset_reader = KopOffsetReader(self.options)
        return self._offset_reader

    def __getstate__(self) -> dict[str, object]:
        # Spark pickles the reader to ship ``read`` to executors, which need no broker, nor views.
        return {**self.__dict__, "_offset_reader": None, "_last_look": None}

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> Offset:
        views = self._reader.starting()
        self._initial = source_offset.to_json(self._reader.resolve(self.options.starting, views, "startingOffsets"))
        if self._last_end is None:
            self._last_end = self._initial
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

    def reportLatestOffset(self) -> Offset | None:
        # Spark asks right after latestOffset(); the offsets it saw are the ones to report.
        return source_offset.to_json(self._latest if self._latest is not None else self._reader.latest())

    def latestOffset(self, start: Offset | None = None, limit: ReadLimit | None = None) -> Offset:
        if start is None or limit is None:
            start, limit = self._own_start_and_limit()
        self._last_end = self._latest_offset(start, limit)
        return self._last_end

    def _own_start_and_limit(self) -> tuple[Offset, ReadLimit]:
        """Before PySpark 4.2 Spark passes neither the batch's start nor a read limit: the reader
        bounds the batch itself, from where it has learnt the query stands (the end of the last
        batch planned, the initial offset). Spark asks for a run's first batch before saying where
        the run starts; that batch takes all there is, which can never end before the start."""
        if self._last_end is None:
            return {}, ReadAllAvailable()
        return self._last_end, self.getDefaultReadLimit()

    def _latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        # Spark asks for the next batch only once the batch ending at ``start`` is complete, so this
        # is when the group learns of it; ``commit(end)`` alone would come one batch late (or never,
        # for the last batch of a run).
        begin = source_offset.from_json(start)
        views = self._current(start)
        if self._initial is None or start != self._initial:
            self._commit_group(begin, views)
        if self._available_now is not None:
            latest = {tp: off for tp, off in self._available_now.items() if tp in views}
        else:
            latest = {tp: v.log_end_offset for tp, v in views.items()}
        self._latest = latest
        # Partitions that appeared since ``start`` are read from their earliest offset; partitions
        # that are gone drop out of the offsets (partitions() reports the loss).
        begin = {tp: begin[tp] if tp in begin else views[tp].log_start_offset for tp in latest}
        return source_offset.to_json(self._admit(begin, latest, limit, views))

    def _current(self, start: Offset) -> Views:
        """The subscribed partitions' views: the last look's, while the stream waits at the same
        ``start`` and it is less than ``minFetchPeriod`` old; else a look at the store."""
        now, last = self._clock.now_ms(), self._last_look
        if last is not None and last.start == start and now - last.at_ms < self._reader.min_fetch_period_ms:
            return last.views
        views = self._reader.current()
        self._last_look = _Look(now, start, views)
        return views

    def _admit(
        self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit, views: Views
    ) -> PartitionOffsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        o = self.options
        if o.min_offsets_per_trigger is not None and self._available_now is None:
            backlog = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
            now = self._clock.now_ms()
            if backlog < o.min_offsets_per_trigger and now - self._last_trigger_ms < o.max_trigger_delay_ms:
                return {tp: begin[tp] for tp in latest}
            self._last_trigger_ms = now
        end = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
        if max_rows is not None:
            end = rate_limit(max_rows, begin, end)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else o.max_bytes_per_trigger
        if max_bytes is not None:
            end = _byte_limit(max_bytes, begin, end, views)
        return end

    def commit(self, end: Offset) -> None:
        # One batch late: where the query stands only if nothing newer has been learnt.
        if self._last_end is None:
            self._last_end = end
        self._commit_group(source_offset.from_json(end))

    def _commit_group(self, offsets: PartitionOffsets, live: Views | None = None) -> None:
        group = self.options.group_id
        if group is None or not offsets or offsets == self._committed:
            return
        self._reader.commit(group, offsets, live)
        self._committed = offsets

    # -- planning and reading ----------------------------------------------------------------

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        self._last_end = end  # batches run in order: a batch re-run after a restart ends here too
        begin, until = source_offset.from_json(start), source_offset.from_json(end)
        views = self._reader.views(list(until))
        return self._reader.plan(self._reader.stream_ranges(begin, until, views), views)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input_partition(partition)

    def stop(self) -> None:
        if self._offset_reader is not None:
            self._offset_reader.close()


def _byte_limit(max_bytes: int, begin: PartitionOffsets, end: PartitionOffsets, views: Views) -> PartitionOffsets:
    """Shrink ``end`` so the batch holds about ``max_bytes``, shared in proportion to each
    partition's bytes; a soft limit, like the file sources' (at least one record per partition)."""
    sizes = {tp: views[tp].estimated_bytes(begin[tp], end[tp]) for tp in end}
    total = sum(sizes.values())
    if total <= max_bytes:
        return end
    out = dict(end)
    for tp in sizes:
        records = end[tp] - begin[tp]
        if records > 0:
            out[tp] = begin[tp] + max(1, records * max_bytes // total)
    return out
