"""FETCH and LIST_OFFSETS: reading a partition by offset or by timestamp.

Reads are planned from one metadata read and re-planned when a planned file has gone meanwhile
(merged, compacted, or dropped by retention once its grace has passed): the offset is then found
in its new ledger, or is out of range.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import FileMissingError, OffsetOutOfRangeError
from ..record import ConsumerRecord
from ..record.arrow import first_at_or_after
from ..storage.at_once import each_at_once
from ..storage.fileio import FileIO
from ..storage.ledger import IOStats
from ..storage.metadata_store import MetadataStore
from ..storage.read_plan import PartitionView, ReadEntry
from .admin import TopicAdmin
from .partition_views import PartitionViews

EARLIEST_TIMESTAMP = -2  # ListOffsets' special timestamps
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
OffsetSpec = str | int
OffsetLookup = tuple[str, int, OffsetSpec]  # topic, partition, and what to find
_READ_ATTEMPTS = 5
_LOG_BOUNDS = ("earliest", EARLIEST_TIMESTAMP, "latest", LATEST_TIMESTAMP)


class FetchedBatches(NamedTuple):
    """A partition's answer to a FETCH: raw batches with absolute base offsets, and the log's
    bounds when they were read."""

    batches: list[bytes]
    log_start_offset: int
    high_watermark: int


class PartitionFetch(NamedTuple):
    """A partition of a FETCH: where to read from, and at most how many bytes."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


def _has_records(w: PartitionFetch, view: PartitionView | Exception) -> bool:
    return isinstance(view, PartitionView) and view.log_start_offset <= w.offset < view.log_end_offset


def _log_bound(view: PartitionView, spec: OffsetSpec) -> int:
    """The log start offset for ``"earliest"``, else (``"latest"``) the log end offset."""
    return view.log_start_offset if spec in ("earliest", EARLIEST_TIMESTAMP) else view.log_end_offset


def _wave(limits: Sequence[int], first: int, budget: int) -> int:
    """How many partitions from ``first`` on can be read at once: at least one, then more while
    their limits together stay within ``budget`` (all of them once it is spent: bounds alone)."""
    if budget <= 0:
        return len(limits) - first
    n, total = 1, min(limits[first], budget)
    while first + n < len(limits) and total + min(limits[first + n], budget) <= budget:
        total += min(limits[first + n], budget)
        n += 1
    return n


def _within(batches: list[bytes], budget: int) -> list[bytes]:
    """The batches a read limited to ``budget`` would have given: the first whatever its size,
    then more while the total stays within it; none once the budget is spent."""
    if budget <= 0:
        return []
    total, n = len(batches[0]) if batches else 0, min(len(batches), 1)
    while n < len(batches) and total + len(batches[n]) <= budget:
        total += len(batches[n])
        n += 1
    return batches[:n]


def _in_range(view: PartitionView, offset: int) -> bool:
    return isinstance(offset, int) and view.log_start_offset <= offset <= view.log_end_offset


class Fetcher:
    def __init__(self, admin: TopicAdmin, store: MetadataStore, fileio: FileIO, stats: IOStats):
        self._admin = admin
        self._views = PartitionViews(admin, store)
        self._fileio = fileio
        self._stats = stats

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_records: int | None = None,
        view: PartitionView | None = None,
        bounds_only: bool = False,
    ) -> tuple[PartitionView, list[ReadEntry]]:
        """Entries from ``offset`` on, planned from ``view`` (else the metadata now); none with
        ``bounds_only``, once the offset is found in range. An offset out of a ``view`` given is
        looked for in the metadata now before it is refused: the view may be one probed a while
        ago, and a consumer refused an offset the log has resets its position."""
        for attempt in range(_READ_ATTEMPTS):
            if view is None or not _in_range(view, offset):
                view = self._admin.view(topic, partition)[1]
            if not _in_range(view, offset):
                raise OffsetOutOfRangeError(topic, partition, offset, view.log_start_offset, view.log_end_offset)
            if offset == view.log_end_offset or bounds_only:
                return view, []
            try:
                return view, view.read(self._fileio, offset, max(max_bytes, 1), max_records, self._stats)
            except FileMissingError:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                view = None
        raise AssertionError("unreachable")

    def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        return [r.batch_bytes() for r in self.read(topic, partition, offset, max_bytes)[1]]

    def fetch_partitions(
        self, wanted: Sequence[PartitionFetch], max_bytes: int, probes_within_s: float = 0.0
    ) -> list[FetchedBatches | Exception]:
        """Each partition's batches from its offset on, and the log's bounds then, or why not; at
        most ``max_bytes`` in all, but the first partition's first batch whatever its size (KIP-74):
        a partition past that answers its bounds alone. The partitions' metadata is probed first,
        in one request where the store can, and read again only where it changed.

        Where the store serves many reads at once, partitions are read together, in waves whose
        partitions' limits fit in what is left of ``max_bytes``: each then answers what it would
        have read in turn, and no wave reads past the budget. ``probes_within_s``: probes taken
        here that recently may stand in (``MetadataStore.probe_many``), as for a parked fetch
        looking again for other processes' appends."""
        views = self._views.each([(w.topic, w.partition) for w in wanted], probes_within_s)
        if self._fileio.read_parallelism > 1:
            return self._in_waves(wanted, views, max_bytes)
        out: list[FetchedBatches | Exception] = []
        budget = max_bytes
        for w, found in zip(wanted, views, strict=True):
            try:
                got = self._fetch_one(w, found, budget)
            except Exception as e:  # that partition's answer; the others go on
                out.append(e)
                continue
            budget -= sum(map(len, got.batches))
            out.append(got)
        return out

    def _in_waves(
        self, wanted: Sequence[PartitionFetch], views: Sequence[PartitionView | Exception], max_bytes: int
    ) -> list[FetchedBatches | Exception]:
        # what each partition may read: nothing where its view has nothing past its offset
        limits = [w.max_bytes if _has_records(w, v) else 0 for w, v in zip(wanted, views, strict=True)]
        out: list[FetchedBatches | Exception] = []
        budget = max_bytes
        while len(out) < len(wanted):
            i = len(out)
            n = _wave(limits, i, budget)
            reads = [functools.partial(self._fetch_one, wanted[k], views[k], budget) for k in range(i, i + n)]
            reading = sum(1 for limit in limits[i : i + n] if limit)
            for got in each_at_once(reads, self._fileio.read_parallelism if reading > 1 else 1):
                if isinstance(got, FetchedBatches):
                    got = got._replace(batches=_within(got.batches, budget))
                    budget -= sum(map(len, got.batches))
                out.append(got)
        return out

    def _fetch_one(self, w: PartitionFetch, found: PartitionView | Exception, budget: int) -> FetchedBatches:
        if isinstance(found, Exception):
            raise found
        if budget <= 0:  # the response is full: the partition's bounds alone, once its offset is checked
            view, reads = self.read(w.topic, w.partition, w.offset, 0, view=found, bounds_only=True)
        else:
            view, reads = self.read(w.topic, w.partition, w.offset, min(w.max_bytes, budget), view=found)
        return FetchedBatches([r.batch_bytes() for r in reads], view.log_start_offset, view.log_end_offset)

    def fetch(self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> list[ConsumerRecord]:
        kafka_topic = self._admin.listed_name(topic)
        out: list[ConsumerRecord] = []
        position = offset
        budget = max_bytes
        view: PartitionView | None = None
        end = None
        while len(out) < max_records and (end is None or position < end) and budget > 0:
            view, reads = self.read(topic, partition, position, min(budget, 1 << 20), max_records - len(out), view)
            end = view.log_end_offset if end is None else end
            if not reads:
                break
            for read in reads:
                budget -= read.entry.size
                batch = read.record_batch()
                position = batch.last_offset + 1
                if batch.is_control:
                    continue
                ts_type = batch.timestamp_type
                for r in batch.records():
                    if r.offset >= offset and len(out) < max_records:
                        out.append(
                            ConsumerRecord(
                                kafka_topic, partition, r.offset, r.timestamp_ms, ts_type, r.key, r.value, r.headers
                            )
                        )
                if len(out) >= max_records:
                    break
        return out

    def offsets_and_timestamps(self, wanted: Sequence[OffsetLookup]) -> list[tuple[int, int] | Exception]:
        """Each partition's offset for its spec, with the found record's timestamp, or why not. The
        partitions' metadata is probed first, in one request where the store can, and lookups that
        read records run at once where the store serves many reads at once."""
        views = self._views.each([(topic, partition) for topic, partition, _ in wanted])
        lookups = [functools.partial(self._offset_and_timestamp, *w, v) for w, v in zip(wanted, views, strict=True)]
        reading = sum(1 for _, _, spec in wanted if spec not in _LOG_BOUNDS)
        return each_at_once(lookups, self._fileio.read_parallelism if reading > 1 else 1)

    def _offset_and_timestamp(
        self, topic: str, partition: int, spec: OffsetSpec, view: PartitionView | Exception
    ) -> tuple[int, int]:
        if isinstance(view, Exception):
            raise view
        if spec in ("max-timestamp", MAX_TIMESTAMP):
            return self._max_timestamp(topic, partition, view)
        if spec in _LOG_BOUNDS:
            return _log_bound(view, spec), -1
        return self._offset_for_time(topic, partition, spec, view)

    def _max_timestamp(self, topic: str, partition: int, view: PartitionView) -> tuple[int, int]:
        """Kafka's MAX_TIMESTAMP lookup: the ledger holding the largest timestamp, then the first of
        its records with it (compaction may have dropped that record: then the next best ledger)."""
        ledgers = [l for l in view.ledgers if l.max_timestamp >= 0 and l.end_offset > view.log_start_offset]
        for ledger in sorted(ledgers, key=lambda l: (-l.max_timestamp, l.base_offset)):
            position = max(ledger.base_offset, view.log_start_offset)
            while position < ledger.end_offset:
                records = self.fetch(topic, partition, position, 10_000, 16 << 20)
                found = next((r for r in records if r.timestamp_ms == ledger.max_timestamp), None)
                if found is not None:
                    return found.offset, found.timestamp_ms
                if not records:
                    break
                position = records[-1].offset + 1
        return -1, -1

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        view = self._admin.view(topic, partition)[1]
        if spec in _LOG_BOUNDS:
            return _log_bound(view, spec)
        return self._offset_for_time(topic, partition, spec, view)[0]

    def _offset_for_time(
        self, topic: str, partition: int, spec: OffsetSpec, view: PartitionView | None = None
    ) -> tuple[int, int]:
        """The first record at or after the time ``spec``: its offset and timestamp, or (-1, -1)."""
        if not isinstance(spec, int) or isinstance(spec, bool) or spec < 0:
            raise ValueError(
                f"list_offsets for {topic}-{partition}: expected 'earliest', 'latest' or a timestamp in ms, got {spec!r}"
            )
        if view is None:
            view = self._admin.view(topic, partition)[1]
        found = view.entry_for_timestamp(self._fileio, spec, self._stats)
        if found is None:
            return -1, -1
        # Batches stored by earlier versions may claim a max timestamp no record has: then the
        # answer lies further on. Batches stored now carry their records' true maximum.
        entries = [found]
        while entries:
            for entry in entries:
                batch = entry.record_batch()
                # records before the log start (DeleteRecords) are not there for anyone
                hit = None if batch.is_control else first_at_or_after(batch, spec, start=view.log_start_offset)
                if hit is not None:
                    return hit
                position = max(batch.last_offset + 1, view.log_start_offset)
            if position >= view.log_end_offset:
                break
            view, entries = self.read(topic, partition, position, 1 << 20, view=view)
        return -1, -1
