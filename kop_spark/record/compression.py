"""Kafka's compression codecs, framed exactly as the Java client frames them.

- gzip: a plain gzip stream.
- snappy: xerial's block framing (what ``SnappyOutputStream`` writes); raw snappy is also read,
  as some non-Java clients send it.
- lz4: an LZ4 frame with independent 64 KiB blocks and no content size, as KIP-57 fixed it.
- zstd: a plain zstd frame.

The codecs themselves come from pyarrow (gzip, snappy, zstd) and python-lz4 (pyarrow cannot be
told to write independent blocks, which Kafka's reader requires).
"""

from __future__ import annotations

import enum
import struct

import lz4.frame
import pyarrow as pa

from ..errors import CorruptRecordError


class CompressionType(enum.IntEnum):
    """The compression bits (0-2) of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Parse Kafka's ``compression.type`` names (none, gzip, snappy, lz4, zstd)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression type {name!r}: expected one of none, gzip, snappy, lz4, zstd"
            ) from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size

_gzip = pa.Codec("gzip")
_snappy = pa.Codec("snappy")
_zstd = pa.Codec("zstd")


def compress(codec: CompressionType, data: bytes) -> bytes:
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip.compress(data, asbytes=True)
    if codec == CompressionType.SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = _snappy.compress(view[start : start + _XERIAL_BLOCK], asbytes=True)
            out += struct.pack(">i", len(block))
            out += block
        return bytes(out)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == CompressionType.ZSTD:
        return _zstd.compress(data, asbytes=True)
    raise CorruptRecordError(f"unknown compression codec id {int(codec)}")


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == CompressionType.GZIP or codec == CompressionType.ZSTD:
            name = "gzip" if codec == CompressionType.GZIP else "zstd"
            return pa.CompressedInputStream(pa.BufferReader(data), name).read()
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec == CompressionType.LZ4:
            return lz4.frame.decompress(data)
    except CorruptRecordError:
        raise
    except Exception as e:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {CompressionType(codec).name} records: {e}") from e
    raise CorruptRecordError(f"unknown compression codec id {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data)
    view = memoryview(data)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CorruptRecordError(f"xerial snappy block of {n} bytes overruns the payload")
        out += _snappy_block(view[pos : pos + n])
        pos += n
    return bytes(out)


def _snappy_block(block: bytes | memoryview) -> bytes:
    # A raw snappy block starts with its uncompressed length as a varint; pyarrow needs it up front.
    size = shift = 0
    for i in range(5):
        b = block[i]
        size |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    return _snappy.decompress(block, decompressed_size=size, asbytes=True)
