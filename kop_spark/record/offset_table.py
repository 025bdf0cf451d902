"""Kafka's ``SkimpyOffsetMap``: each key's latest offset, kept by a 16-byte digest of the key
(MurmurHash3, x64 128-bit) rather than the key, in a buffer of fixed size, so that a log cleaner's
map holds as many keys whatever their length: 24 bytes a slot, a digest and a value.

A value is ``offset + 1`` for a record kept, ``-(offset + 1)`` for a tombstone past the horizon, 0
for a key not in the table. Two keys of the same digest would share a slot, as in Kafka; at 2^-128
a pair, no log meets one. The codec's twins fill and read the slots (``offset_table_*``)."""

from __future__ import annotations

import pyarrow as pa

from . import _speedups
from .arrow import _binary_parts, _fixed_values
from .codec import RecordsCodec

SLOT_BYTES = 24


class OffsetTable:
    """A table of ``slots`` slots, ``entries`` of them filled."""

    def __init__(self, slots: int, *, codec: RecordsCodec = _speedups.codec):
        if slots < 1:
            raise ValueError(f"an offset table needs a slot at least, not {slots}")
        self.slots = slots
        self.entries = 0
        self._table = bytearray(slots * SLOT_BYTES)
        self._codec = codec

    @property
    def nbytes(self) -> int:
        return len(self._table)

    def put(self, keys: pa.Array, offsets: pa.Array, expired: pa.Array) -> None:
        """Record each row's key with its offset (int64), a tombstone past the horizon where
        ``expired`` (bool) is true; a later row of a key replaces an earlier one, null keys are
        skipped. ValueError if the table fills."""
        offsets_in, flags = _fixed_values(offsets, pa.int64(), "offsets"), _fixed_values(expired, pa.uint8(), "flags")
        self.entries += self._codec.offset_table_put(self._table, _binary_parts(keys), len(keys), offsets_in, flags)

    def get(self, keys: pa.Array) -> pa.Array:
        """Each key's value (int64; see the module's doc), 0 where it is null or not in the table."""
        values = self._codec.offset_table_get(self._table, _binary_parts(keys), len(keys))
        return pa.Array.from_buffers(pa.int64(), len(keys), [None, pa.py_buffer(values)])

    def live(self) -> memoryview:
        """The offsets of the records kept (tombstones past the horizon left out), in order, as int64s."""
        return memoryview(self._codec.offset_table_live(self._table)).cast("q")
