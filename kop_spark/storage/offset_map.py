"""The log cleaner's offset map (Kafka's ``OffsetMap``): each key's latest offset in the dirty part
of a run of batches, within a memory budget (``log.cleaner.dedupe.buffer.size``).

The compiled codec decodes the batches into Arrow columns, cut to their keys every 32 MiB (less for
a small budget), and the keys go into an offset table (``OffsetTable``, Kafka's
``SkimpyOffsetMap``): a 16-byte digest of each key and its latest offset, 24 bytes a key whatever
the key's length, in three quarters of the budget (the rest holds the offsets the map keeps and a
cut). The table is filled to 90% at most (Kafka's ``log.cleaner.io.buffer.load.factor``): about
3.8 million keys a pass at the default budget. A batch that could take it past that is left to the
next pass, as Kafka's cleaner leaves a segment when its map fills: a compaction covers the batches
added so far, and its next pass goes on from there. A map for fewer records takes only the room
they need.

The map answers which records a compaction keeps: those of the batches it was built from (the
latest of each key, less tombstones past ``delete.retention.ms``), and those of the batches before
them, already compacted, which only the map's keys can have superseded.
"""

from __future__ import annotations

import bisect
import math

import pyarrow as pa
import pyarrow.compute as pc

from ..record import RecordBatch
from ..record.arrow import ArrowRecordBuilder
from ..record.offset_table import SLOT_BYTES, OffsetTable

_DECODED_BYTES = 32 << 20
DEDUPE_BUFFER_BYTES = 128 << 20  # Kafka's log.cleaner.dedupe.buffer.size
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor


class KeptOffsets:
    """Offsets a compaction keeps, sorted, as an int64 buffer that ``bisect`` searches with no
    Python object per offset."""

    def __init__(self, offsets: memoryview):
        self._offsets = offsets

    @classmethod
    def of(cls, offsets: pa.Array | pa.ChunkedArray) -> KeptOffsets:
        data = pa.concat_arrays([pa.array([], pa.int64()), *_chunks(offsets)])  # one buffer, from its start
        return cls(memoryview(data.buffers()[1] or b"").cast("q")[: len(data)])

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
        self.nbytes = 0

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
        self.nbytes += keys.nbytes

    def take(self) -> dict[str, pa.Array] | None:
        """The columns of all added since the last ``take``, in offset order; None when nothing was."""
        if len(self._builder):
            self._cut()
        cuts = self.cuts
        self.cuts, self.nbytes = [], 0
        if not cuts:
            return None
        taken = pa.concat_tables(cuts)
        return {name: taken.column(name).combine_chunks() for name in taken.column_names}


class OffsetMap:
    """Built by ``add`` over the dirty batches of a run in offset order until it is full, then
    sealed and asked which records to keep: ``kept`` for the batches it was built from, ``ask`` and
    ``answer`` for those before them, a group at a time."""

    def __init__(
        self,
        horizon_ms: int,
        budget_bytes: int = DEDUPE_BUFFER_BYTES,
        decoded_bytes: int = _DECODED_BYTES,
        *,
        records: int | None = None,
    ):
        """``horizon_ms``: tombstones (null values) stamped before it go; younger ones stay.
        ``budget_bytes``: about the most memory the map takes, its working included.
        ``decoded_bytes``: how much decoded data is cut to its keys at a time. ``records``: at most
        how many records will be added, when known: the table then takes no more room than they need."""
        slots = budget_bytes * 3 // 4 // SLOT_BYTES
        if records is not None:
            slots = min(slots, math.ceil(records / LOAD_FACTOR) + 1)
        self._slots = max(slots, 1)
        self._table: OffsetTable | None = None  # made by the first batch, which it holds however large
        self._bound = 0  # the most keys the table holds once what is added is folded in
        self._cut_bytes = min(decoded_bytes, budget_bytes // 8)
        self._pending = _KeyColumns(horizon_ms, self._cut_bytes)
        self._asked = _KeyColumns(horizon_ms, self._cut_bytes)  # records looked up in the map
        self._kept = KeptOffsets(memoryview(b"").cast("q"))
        self.end = -1  # the offset after the last batch added

    def add(self, batch: RecordBatch, base_offset: int) -> bool:
        """Add a batch's records (its first at ``base_offset``), each batch after those before it.
        False, and the batch left out, when it could take the map past what it holds: the
        batches added so far are those a compaction can cover. The first batch always goes in."""
        if self._table is None:
            slots = max(self._slots, math.ceil(batch.record_count / LOAD_FACTOR) + 1)
            self._table = OffsetTable(slots)
        elif self._bound + batch.record_count > self._table.slots * LOAD_FACTOR:
            return False
        self.end = base_offset + batch.last_offset_delta + 1
        self._bound += batch.record_count
        if self._pending.add(batch, base_offset):
            self._fold()
        return True

    def _fold(self) -> None:
        pending = self._pending.take()
        if pending is not None and self._table is not None:
            self._table.put(pending["key"], pending["offset"], pending["expired"])
            self._bound = self._table.entries

    def seal(self) -> int:
        """Done adding: returns how many of the added records are kept."""
        self._fold()
        if self._table is not None:
            self._kept = KeptOffsets(self._table.live())
        return len(self._kept)

    def kept(self, first: int, last: int) -> memoryview:
        """The offsets in ``[first, last]`` kept, in order, of a batch the map was built from."""
        return self._kept.between(first, last)

    def ask(self, batch: RecordBatch, base_offset: int) -> bool:
        """Ask which records of a batch before the map's end are kept (its first at ``base_offset``,
        each batch after those before it). True once the batches asked about take as much memory as
        a cut: ``answer`` then."""
        self._asked.add(batch, base_offset)
        return self._asked.nbytes >= self._cut_bytes

    def answer(self) -> KeptOffsets:
        """The offsets kept of the batches asked about since the last answer: a record is kept
        unless a later one of its key is in the map, or it is a tombstone past the horizon.
        Records past the map's end are not asked about: they are all kept, as the map cannot know
        what supersedes them."""
        asked = self._asked.take()
        if asked is None:
            return KeptOffsets.of(pa.array([], pa.int64()))
        keep = pc.invert(asked["expired"])
        if self._table is not None:
            latest = self._table.get(asked["key"])
            # 0: not in the map; else the map's record of the key is at abs(latest) - 1
            superseded = pc.less(asked["offset"], pc.subtract(pc.abs(latest), pa.scalar(1, pa.int64())))
            keep = pc.and_(keep, pc.or_(pc.equal(latest, pa.scalar(0, pa.int64())), pc.invert(superseded)))
        return KeptOffsets.of(asked["offset"].filter(keep))


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return values.chunks if isinstance(values, pa.ChunkedArray) else [values]
