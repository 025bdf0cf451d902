"""The pure-Python twin of the compiled codec's offset table (``_crecords.offset_table_*``): the log
cleaner's map of each key to its latest offset, as Kafka's ``SkimpyOffsetMap`` keeps it, in a buffer
of fixed size: a key's 16-byte digest and a value per 24-byte slot. Both twins fill the same slots
with the same bytes, so a table built by one is read by the other.

A value is 0 for an empty slot, ``offset + 1`` for a record kept, ``-(offset + 1)`` for a tombstone
past the horizon. The first slot probed is the digest's first half scaled to the table, then the
next ones (wrapping)."""

from __future__ import annotations

import struct

from ._pybinary import BinaryRows
from .codec import BinaryColumn, Buffer

SLOT = struct.Struct("<QQq")  # digest (two halves), value
_MASK = (1 << 64) - 1
_C1, _C2 = 0x87C37B91114253D5, 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_128(key: bytes) -> tuple[int, int]:
    """MurmurHash3's x64 128-bit variant, seed 0: the key's digest in the table."""
    h1 = h2 = 0
    blocks = len(key) // 16
    for i in range(blocks):
        k1, k2 = struct.unpack_from("<QQ", key, 16 * i)
        h1 ^= (_rotl((k1 * _C1) & _MASK, 31) * _C2) & _MASK
        h1 = ((_rotl(h1, 27) + h2) * 5 + 0x52DCE729) & _MASK
        h2 ^= (_rotl((k2 * _C2) & _MASK, 33) * _C1) & _MASK
        h2 = ((_rotl(h2, 31) + h1) * 5 + 0x38495AB5) & _MASK
    tail = key[16 * blocks :]
    if len(tail) > 8:
        h2 ^= (_rotl((int.from_bytes(tail[8:], "little") * _C2) & _MASK, 33) * _C1) & _MASK
    if tail:
        h1 ^= (_rotl((int.from_bytes(tail[:8], "little") * _C1) & _MASK, 31) * _C2) & _MASK
    h1 ^= len(key)
    h2 ^= len(key)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    return h1, (h2 + h1) & _MASK


def _slots(table: Buffer) -> int:
    n, rest = divmod(len(memoryview(table)), SLOT.size)
    if n < 1 or rest:
        raise ValueError("table: expected a non-empty, aligned buffer of 24-byte slots")
    return n


def _slot(table: memoryview, n: int, digest: tuple[int, int]) -> int | None:
    """Where ``digest`` is, or the empty slot where it goes; None when the table is full without it."""
    at = (digest[0] * n) >> 64
    for _ in range(n):
        h1, h2, value = SLOT.unpack_from(table, at * SLOT.size)
        if value == 0 or (h1, h2) == digest:
            return at
        at = at + 1 if at + 1 < n else 0
    return None


def offset_table_put(table: Buffer, keys: BinaryColumn | None, count: int, offsets: Buffer, expired: Buffer) -> int:
    view, n = memoryview(table), _slots(table)
    offs, flags = memoryview(offsets).cast("B"), memoryview(expired).cast("B")
    if count < 0 or len(offs) < count * 8 or len(flags) < count:
        raise ValueError(f"{count} rows, {len(offs) // 8} offsets and {len(flags)} flags")
    col, filled = BinaryRows(keys), 0
    for i in range(count):
        key = col.get(i)
        if key is None:
            continue
        digest = murmur3_128(bytes(key))
        at = _slot(view, n, digest)
        if at is None:
            raise ValueError(f"the offset table's {n} slots are full")
        (offset,) = struct.unpack_from("<q", offs, 8 * i)
        filled += SLOT.unpack_from(view, at * SLOT.size)[2] == 0
        SLOT.pack_into(view, at * SLOT.size, *digest, -(offset + 1) if flags[i] else offset + 1)
    return filled


def offset_table_get(table: Buffer, keys: BinaryColumn | None, count: int) -> bytes:
    if count < 0:
        raise ValueError("count must not be negative")
    view, n = memoryview(table), _slots(table)
    col, out = BinaryRows(keys), bytearray()
    for i in range(count):
        key = col.get(i)
        at = None if key is None else _slot(view, n, murmur3_128(bytes(key)))
        out += struct.pack("<q", 0 if at is None else SLOT.unpack_from(view, at * SLOT.size)[2])
    return bytes(out)


def offset_table_live(table: Buffer) -> bytes:
    view = memoryview(table)
    values = (SLOT.unpack_from(view, at * SLOT.size)[2] for at in range(_slots(table)))
    return b"".join(struct.pack("<q", v - 1) for v in sorted(v for v in values if v > 0))
