"""The log cleaner's offset map (Kafka's ``OffsetMap``): each key's latest offset in the dirty part
of a run of batches, within a memory budget (``log.cleaner.dedupe.buffer.size``).

The compiled codec decodes the batches into Arrow columns and Arrow groups them by key, so no
Python object is made per record. Decoded records are cut to their keys every 32 MiB (less for a
small budget); the keys are folded into the map once there are as many as it holds, or as many as
its budget allows. A map whose keys take three quarters of that after a fold is full: a compaction
then covers the batches added so far, and its next pass goes on from there, as Kafka's cleaner
does when its map fills. Where Kafka's map holds a 16-byte hash of each key, this one holds the
keys, so a pass covers fewer keys the longer they are.

The map answers which records a compaction keeps: those of the batches it was built from (the
latest of each key, less tombstones past ``delete.retention.ms``), and those of the batches before
them, already compacted, which only the map's keys can have superseded.
"""

from __future__ import annotations

import bisect

import pyarrow as pa
import pyarrow.compute as pc

from ..record import RecordBatch
from ..record.arrow import ArrowRecordBuilder

_SMALLEST_FOLD = 1 << 16  # keys
_DECODED_BYTES = 32 << 20
DEDUPE_BUFFER_BYTES = 128 << 20  # Kafka's log.cleaner.dedupe.buffer.size


class KeptOffsets:
    """Offsets a compaction keeps, sorted, as an int64 buffer that ``bisect`` searches with no
    Python object per offset."""

    def __init__(self, offsets: pa.Array | pa.ChunkedArray):
        data = pa.concat_arrays([pa.array([], pa.int64()), *_chunks(offsets)])  # one buffer, from its start
        self._offsets = memoryview(data.buffers()[1] or b"").cast("q")[: len(data)]

    def __len__(self) -> int:
        return len(self._offsets)

    def between(self, first: int, last: int) -> memoryview:
        """The offsets in ``[first, last]`` kept, in order (int64s)."""
        lo = bisect.bisect_left(self._offsets, first)
        return self._offsets[lo : bisect.bisect_right(self._offsets, last, lo)]


class _KeyColumns:
    """Batches decoded to each record's key, offset and whether it is a tombstone stamped before
    the horizon, cut to those once a cut would take about ``cut_bytes``."""

    def __init__(self, horizon_ms: int, cut_bytes: int):
        self._horizon_us = horizon_ms * 1000
        self._cut_bytes = cut_bytes
        self._builder = ArrowRecordBuilder("", 0, include_headers=False)
        self.cuts: list[pa.Table] = []  # in offset order
        self.rows = self.nbytes = 0

    def add(self, batch: RecordBatch, base_offset: int) -> bool:
        """Add a batch's records (its first at ``base_offset``); True when that made a cut."""
        self._builder.add(batch, base_offset)
        # Over what the cut takes: its keys are among the decoded bytes, its offsets and flags 13 a record.
        if self._builder.size_in_bytes + 16 * len(self._builder) < self._cut_bytes:
            return False
        self._cut()
        return True

    def _cut(self) -> None:
        rows = self._builder.build()
        value, timestamp = rows.column("value"), rows.column("timestamp")
        expired = pc.and_(pc.is_null(value), pc.less(timestamp.view(pa.int64()), self._horizon_us))
        keys = pa.table({"key": rows.column("key"), "offset": rows.column("offset"), "expired": expired})
        keys = keys.filter(pc.is_valid(keys.column("key")))  # a keyless record has nothing to keep it by
        self.cuts.append(keys)
        self.rows += keys.num_rows
        self.nbytes += keys.nbytes

    def take(self) -> pa.Table | None:
        """All added since the last ``take``, in offset order; None when nothing was."""
        if len(self._builder):
            self._cut()
        cuts = self.cuts
        self.cuts, self.rows, self.nbytes = [], 0, 0
        return pa.concat_tables(cuts) if cuts else None


class OffsetMap:
    """Built by ``add`` over the dirty batches of a run in offset order until it is full, then
    sealed and asked which records to keep: ``kept`` for the batches it was built from, ``ask`` and
    ``answer`` for those before them, a group at a time."""

    def __init__(self, horizon_ms: int, budget_bytes: int = DEDUPE_BUFFER_BYTES, decoded_bytes: int = _DECODED_BYTES):
        """``horizon_ms``: tombstones (null values) stamped before it go; younger ones stay.
        ``budget_bytes``: about the most memory the map takes, its working included. The keys it
        holds, and those asked about at a time, are kept to a quarter of it each: Arrow's hashing
        of them (a fold's group-by, an answer's lookup) takes about as much again. Measured, a
        compaction's Arrow memory peaks at 1.2 to 1.5 times the budget, 16 MiB and up.
        ``decoded_bytes``: how much decoded data is cut to its keys at a time."""
        self._keys_budget = budget_bytes // 4
        cut_bytes = min(decoded_bytes, budget_bytes // 8)
        self._pending = _KeyColumns(horizon_ms, cut_bytes)
        self._asked = _KeyColumns(horizon_ms, cut_bytes)  # records looked up in the map
        self._latest: pa.Table | None = None  # key, offset, expired: each key's latest record
        self._kept = KeptOffsets(pa.array([], pa.int64()))
        self.end = -1  # the offset after the last batch added

    def _nbytes(self) -> int:
        """The memory the map's keys take now (those folded and those not yet)."""
        return (self._latest.nbytes if self._latest is not None else 0) + self._pending.nbytes

    def add(self, batch: RecordBatch, base_offset: int) -> bool:
        """Add a batch's records (its first at ``base_offset``), each batch after those before it.
        False once the map is full: the batches added so far are those a compaction can cover."""
        self.end = base_offset + batch.last_offset_delta + 1
        if not self._pending.add(batch, base_offset):
            return True
        held = self._latest.num_rows if self._latest is not None else 0
        if self._pending.rows >= max(_SMALLEST_FOLD, held) or self._nbytes() >= self._keys_budget:
            self._fold()
            return self._nbytes() < self._keys_budget * 3 // 4
        return True

    def _fold(self) -> None:
        pending = self._pending.take()
        tables = [t for t in (self._latest, pending) if t is not None]
        if not tables:
            return  # nothing added yet
        both = pa.concat_tables(tables)
        # In input order (no threads), so "last" is the latest: the map's rows come before the new ones.
        latest = both.group_by("key", use_threads=False).aggregate([("offset", "last"), ("expired", "last")])
        self._latest = latest.rename_columns(["key", "offset", "expired"])

    def seal(self) -> int:
        """Done adding: returns how many of the added records are kept."""
        self._fold()
        if self._latest is not None:
            live = self._latest.filter(pc.invert(self._latest.column("expired"))).column("offset")
            self._kept = KeptOffsets(pc.take(live, pc.sort_indices(live)))
        return len(self._kept)

    def kept(self, first: int, last: int) -> memoryview:
        """The offsets in ``[first, last]`` kept, in order, of a batch the map was built from."""
        return self._kept.between(first, last)

    def ask(self, batch: RecordBatch, base_offset: int) -> bool:
        """Ask which records of a batch before the map's end are kept (its first at ``base_offset``,
        each batch after those before it). True once the batches asked about take as much memory as
        the budget allows the map's keys: ``answer`` then."""
        self._asked.add(batch, base_offset)
        return self._asked.nbytes >= self._keys_budget

    def answer(self) -> KeptOffsets:
        """The offsets kept of the batches asked about since the last answer: a record is kept
        unless a later one of its key is in the map, or it is a tombstone past the horizon.
        Records past the map's end are not asked about: they are all kept, as the map cannot know
        what supersedes them."""
        asked = self._asked.take()
        if asked is None:
            return KeptOffsets(pa.array([], pa.int64()))
        keep = pc.invert(asked.column("expired"))
        if self._latest is not None:
            at = pc.index_in(asked.column("key"), value_set=self._latest.column("key").combine_chunks())
            latest = pc.take(self._latest.column("offset"), at)
            keep = pc.and_(keep, pc.or_kleene(pc.is_null(at), pc.greater_equal(asked.column("offset"), latest)))
        return KeptOffsets(asked.column("offset").filter(keep))


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return values.chunks if isinstance(values, pa.ChunkedArray) else [values]
