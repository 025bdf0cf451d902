"""The log cleaner's offset map (Kafka's ``OffsetMap``): which records of a run of batches a
compaction keeps, the latest of each key, less tombstones past ``delete.retention.ms``.

The compiled codec decodes the batches into Arrow columns and Arrow groups them by key, so no
Python object is made per record. Decoded records are cut to their keys every 32 MiB; the keys are
folded into the map once there are as many as the map holds, so memory holds about twice the
distinct keys (never values), and each key is grouped a couple of times at most.
"""

from __future__ import annotations

import bisect

import pyarrow as pa
import pyarrow.compute as pc

from ..record import RecordBatch
from ..record.arrow import ArrowRecordBuilder

_SMALLEST_FOLD = 1 << 16  # keys
_DECODED_BYTES = 32 << 20


class OffsetMap:
    """Built by ``add`` over a run's batches in offset order, then asked ``kept`` per batch."""

    def __init__(self, horizon_ms: int, decoded_bytes: int = _DECODED_BYTES):
        """``horizon_ms``: tombstones (null values) stamped before it go; younger ones stay.
        ``decoded_bytes``: how much decoded data is cut to its keys at a time."""
        self._decoded_bytes = decoded_bytes
        self._horizon_us = horizon_ms * 1000
        self._builder = ArrowRecordBuilder("", 0, include_headers=False)
        self._latest: pa.Table | None = None  # key, offset, expired: each key's latest record
        self._pending: list[pa.Table] = []  # keys not yet folded in, in offset order
        self._pending_rows = 0
        self._kept = memoryview(b"").cast("q")

    def add(self, batch: RecordBatch, base_offset: int) -> None:
        """Add a batch's records (its first at ``base_offset``); each batch after those before it."""
        self._builder.add(batch, base_offset)
        if self._builder.size_in_bytes >= self._decoded_bytes:
            self._cut()
        if self._pending_rows >= max(_SMALLEST_FOLD, self._latest.num_rows if self._latest else 0):
            self._fold()

    def _cut(self) -> None:
        """The decoded records to their keys, offsets and whether each is a tombstone past the horizon."""
        rows = self._builder.build()
        key, value, timestamp = rows.column("key"), rows.column("value"), rows.column("timestamp")
        keys = pa.table(
            {
                "key": key,
                "offset": rows.column("offset"),
                "expired": pc.and_(pc.is_null(value), pc.less(timestamp.view(pa.int64()), self._horizon_us)),
            }
        ).filter(pc.is_valid(key))  # a keyless record has nothing to keep it by
        self._pending.append(keys)
        self._pending_rows += keys.num_rows

    def _fold(self) -> None:
        if len(self._builder):
            self._cut()
        tables = ([self._latest] if self._latest is not None else []) + self._pending
        if not tables:
            return  # nothing added yet
        both = pa.concat_tables(tables)
        # In input order (no threads), so "last" is the latest: the map's rows come before the new ones.
        latest = both.group_by("key", use_threads=False).aggregate([("offset", "last"), ("expired", "last")])
        self._latest = latest.rename_columns(["key", "offset", "expired"])
        self._pending, self._pending_rows = [], 0

    def seal(self) -> int:
        """Done adding: returns how many records are kept."""
        self._fold()
        if self._latest is None:
            return 0  # no record to keep
        kept = self._latest.filter(pc.invert(self._latest.column("expired"))).column("offset")
        self._latest = None
        if len(kept):  # sorted, as an int64 buffer that bisect searches with no Python object per offset
            data = pc.take(kept, pc.sort_indices(kept)).combine_chunks().buffers()[1]
            self._kept = memoryview(data).cast("q")[: len(kept)]
        return len(self._kept)

    def kept(self, first: int, last: int) -> memoryview:
        """The offsets in ``[first, last]`` kept, in order (int64s)."""
        lo = bisect.bisect_left(self._kept, first)
        return self._kept[lo : bisect.bisect_right(self._kept, last, lo)]
