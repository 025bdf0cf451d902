"""ZigZag variable-length integers, as Kafka's record format v2 uses them (protobuf's encoding)."""

from __future__ import annotations

from ..errors import CorruptRecordError
from .codec import Buffer


def write_varint(value: int, out: bytearray) -> None:
    """Append the ZigZag varint encoding of a signed 64-bit ``value`` to ``out``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode the ZigZag varint at ``buf[pos]``; return ``(value, position after it)``."""
    result = shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result >> 1) ^ -(result & 1), pos
            shift += 7
            if shift > 63:
                raise CorruptRecordError("varint is longer than 10 bytes")
    except IndexError:
        raise CorruptRecordError("varint runs past the end of the record") from None


def size_of_varint(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n
