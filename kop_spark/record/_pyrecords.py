"""The pure-Python reference of the codec's hot loops; ``_crecords.c`` is its compiled twin.

Both take and give the same things: Arrow columns as ``(validity, offsets, data, offset)`` tuples
of buffers, results appended to bytearray columns. The tests check they agree on every input,
so a change to one is a change to both.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator

from ..errors import CorruptRecordError, InvalidRecordError
from ..partitioner import murmur2
from ._pybinary import BinaryRows
from ._pyoffset_table import offset_table_get, offset_table_live, offset_table_put  # a module of its own
from .codec import BinaryColumn, Buffer, EncodedChunk, HeaderColumn, TimestampColumn
from .default_record_batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    encode_record,
    seal_record_batch,
)
from .varint import read_varint

_I32 = struct.Struct("<i").pack
_I64 = struct.Struct("<q").pack


def _put(data: bytearray, ends: bytearray, valid: bytearray, buf: Buffer, start: int, length: int) -> None:
    if length < 0:
        valid.append(0)
    else:
        data += buf[start : start + length]
        valid.append(1)
    ends += _I32(len(data))


def decode_records(
    payload: Buffer,
    count: int,
    base_offset: int,
    base_ts: int,
    log_append_ts: int | None,
    start: int,
    end: int,
    include_headers: bool,
    columns: tuple[bytearray, ...],
) -> None:
    """Append the records of an uncompressed records section whose offsets lie in ``[start, end)``
    to the builder's 16 bytearray columns (see ``ArrowRecordBuilder``)."""
    offsets, timestamps, ts_types, kdata, kends, kvalid, vdata, vends, vvalid, header_ends = columns[:10]
    buf = memoryview(payload)
    size = len(buf)
    header_total = (
        struct.unpack_from("<i", header_ends, len(header_ends) - 4)[0] if include_headers and header_ends else 0
    )
    ts_type = _I32(0 if log_append_ts is None else 1)
    pos = 0
    try:
        for _ in range(count):
            fields = [0, 0, 0, 0]  # length, timestampDelta, offsetDelta, keyLength
            for i in range(4):
                if i == 1:
                    pos += 1  # the record's attributes byte sits after its length
                # The varint reader is inlined: this loop runs once per record read by Spark.
                result = shift = 0
                while True:
                    b = buf[pos]
                    pos += 1
                    result |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise CorruptRecordError(f"varint longer than 10 bytes in the batch at offset {base_offset}")
                fields[i] = (result >> 1) ^ -(result & 1)
                if i == 0:
                    record_end = pos + fields[0]
                    if fields[0] < 0 or record_end > size:
                        raise CorruptRecordError(
                            f"record of {fields[0]} bytes overruns its batch at offset {base_offset}"
                        )
            offset = base_offset + fields[2]
            if pos > record_end:  # even in a record outside [start, end): its fields overrun it
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            if offset < start or offset >= end:
                pos = record_end
                continue
            key_length = fields[3]
            key_at = pos
            pos += max(key_length, 0)
            if pos > record_end:
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            value_length, pos = read_varint(buf[:record_end], pos)
            value_at = pos
            pos += max(value_length, 0)
            if pos > record_end:
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            _put(kdata, kends, kvalid, buf, key_at, key_length)
            _put(vdata, vends, vvalid, buf, value_at, value_length)
            offsets += _I64(offset)
            timestamps += _I64((base_ts + fields[1] if log_append_ts is None else log_append_ts) * 1000)
            ts_types += ts_type
            if include_headers:
                header_total += _decode_headers(buf[:record_end], pos, offset, columns[10:])
                header_ends += _I32(header_total)
            pos = record_end
    except IndexError:
        raise CorruptRecordError(f"record batch at offset {base_offset} ends inside a record") from None


def decode_batches(
    data: Buffer,
    spans: Buffer,
    first: int,
    offset_base: int,
    start: int,
    end: int,
    include_headers: bool,
    max_rows: int,
    max_bytes: int,
    columns: tuple[bytearray, ...],
) -> int:
    """``decode_records`` for a run of framed batches: those at ``spans[first:]`` (int64 pairs:
    position in ``data``, size), whose offsets are ``offset_base`` plus each batch's ``baseOffset``,
    until the columns hold ``max_rows`` records or ``max_bytes`` of keys, values and header values.
    Control batches and batches outside ``[start, end)`` add nothing; a compressed one stops the run,
    for the caller to decompress. Returns the index of the first span not taken."""
    pairs = memoryview(spans).cast("B").cast("q")
    view = memoryview(data)
    i = max(first, 0)
    while i < len(pairs) // 2:
        if len(columns[0]) // 8 >= max_rows or len(columns[3]) + len(columns[6]) + len(columns[13]) >= max_bytes:
            break
        at, size = pairs[2 * i], pairs[2 * i + 1]
        if at < 0 or size < HEADER_SIZE or at + size > len(view):
            raise CorruptRecordError(f"batch {i} of {size} bytes at {at} lies outside the {len(view)} bytes read")
        (base, length, _, magic, _, attributes, last_delta, base_ts, max_ts, _, _, _, count) = HEADER.unpack_from(
            view, at
        )
        base_offset = offset_base + base
        if magic != MAGIC or length + LOG_OVERHEAD != size:
            raise CorruptRecordError(f"batch at offset {base_offset} is not one framed magic-2 batch of {size} bytes")
        if not (attributes & CONTROL_MASK or base_offset + last_delta < start or base_offset >= end):
            if attributes & COMPRESSION_MASK:
                break  # compressed: the caller decompresses it
            log_append_ts = max_ts if attributes & TIMESTAMP_TYPE_MASK else None
            payload = view[at + HEADER_SIZE : at + size]
            decode_records(payload, count, base_offset, base_ts, log_append_ts, start, end, include_headers, columns)
        i += 1
    return i


def check_records(payload: Buffer, count: int, base_offset: int, base_ts: int) -> tuple[bool, int, int, int]:
    """Walk every record of an uncompressed records section, checked as a broker checks a produce
    (framing, keys, values, headers and UTF-8 header keys, no bytes left over), copying nothing: ``(offset deltas are
    0..count-1 in order, the records' min timestamp (of those that have one) or -1, their max timestamp or -1,
    records without a key)``."""
    buf = memoryview(payload)
    pos, in_order, keyless, max_delta, min_delta = 0, True, 0, None, None
    try:
        for i in range(count):
            record_end, ts_delta, offset_delta, pos = _record_head(buf, pos, base_offset)
            record = buf[:record_end]
            offset = base_offset + offset_delta
            key_length, pos = read_varint(record, pos)
            pos += max(key_length, 0)
            if pos > record_end:
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            value_length, pos = read_varint(record, pos)
            if pos + max(value_length, 0) > record_end:
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            _skip_headers(record, pos + max(value_length, 0), offset)
            in_order &= offset_delta == i
            keyless += key_length < 0
            max_delta = ts_delta if max_delta is None else max(max_delta, ts_delta)
            if base_ts + ts_delta != -1:  # Kafka's "no timestamp", passed over by the broker's timestamp checks
                min_delta = ts_delta if min_delta is None else min(min_delta, ts_delta)
            pos = record_end
    except IndexError:
        raise CorruptRecordError(f"record batch at offset {base_offset} ends inside a record") from None
    if pos != len(buf):
        raise CorruptRecordError(
            f"record batch at offset {base_offset} has {len(buf) - pos} bytes after its {count} records"
        )
    bottom = -1 if min_delta is None else base_ts + min_delta
    return in_order, bottom, -1 if max_delta is None else base_ts + max_delta, keyless


def keep_records(payload: Buffer, count: int, base_offset: int, base_ts: int, kept: Buffer) -> tuple[bytes, int, int]:
    """The records of an uncompressed records section whose offsets are in ``kept`` (sorted int64s),
    their bytes as they are: ``(their records section, how many, their max timestamp or -1)``. Each
    record's length, timestamp and offset deltas are checked to lie inside the section and the record."""
    buf, wanted = memoryview(payload), memoryview(kept).cast("B").cast("q")
    out, n, max_ts, pos = bytearray(), 0, -1, 0
    try:
        for _ in range(count):
            record_end, ts_delta, offset_delta, _ = _record_head(buf, pos, base_offset)
            at = bisect.bisect_left(wanted, base_offset + offset_delta)
            if at < len(wanted) and wanted[at] == base_offset + offset_delta:
                out += buf[pos:record_end]
                n += 1
                max_ts = max(max_ts, base_ts + ts_delta)
            pos = record_end
    except IndexError:
        raise CorruptRecordError(f"record batch at offset {base_offset} ends inside a record") from None
    if pos != len(buf):
        raise CorruptRecordError(
            f"record batch at offset {base_offset} has {len(buf) - pos} bytes after its {count} records"
        )
    return bytes(out), n, max_ts


def _record_head(buf: memoryview, pos: int, base_offset: int) -> tuple[int, int, int, int]:
    """The record at ``pos``: where it ends, its timestamp and offset deltas, and where its key is."""
    length, pos = read_varint(buf, pos)
    record_end = pos + length
    if length < 0 or record_end > len(buf):
        raise CorruptRecordError(f"record of {length} bytes overruns its batch at offset {base_offset}")
    record = buf[:record_end]
    ts_delta, pos = read_varint(record, pos + 1)  # after the attributes byte
    offset_delta, pos = read_varint(record, pos)
    return record_end, ts_delta, offset_delta, pos


def _headers(record: memoryview, pos: int, offset: int) -> Iterator[tuple[int, int, int, int]]:
    """The headers of the record ending at ``len(record)``, from ``pos``: ``(key at, key length,
    value at, value length)`` each, every length checked against the record's (-1: a null value)."""
    n, pos = read_varint(record, pos)
    if n < 0:
        raise CorruptRecordError(f"record at offset {offset} has a negative header count")
    for _ in range(n):
        hk, pos = read_varint(record, pos)
        if hk < 0:
            raise CorruptRecordError(f"record at offset {offset} has a header with a null key")
        if pos + hk > len(record):
            raise CorruptRecordError(f"record at offset {offset} overruns its length")
        key_at = pos
        hv, pos = read_varint(record, pos + hk)
        if pos + max(hv, 0) > len(record):
            raise CorruptRecordError(f"record at offset {offset} overruns its length")
        yield key_at, hk, pos, hv
        pos += max(hv, 0)
    if pos != len(record):
        raise CorruptRecordError(f"record at offset {offset} does not match its length")


def _skip_headers(record: memoryview, pos: int, offset: int) -> None:
    for key_at, key_length, _, _ in _headers(record, pos, offset):
        try:  # header keys are strings to Kafka and to our Arrow readers
            str(record[key_at : key_at + key_length], "utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError(f"record at offset {offset} has a header key that is not UTF-8") from None


def _decode_headers(record: memoryview, pos: int, offset: int, columns: tuple[bytearray, ...]) -> int:
    """Append the headers of the record ending at ``len(record)`` whose headers start at ``pos``
    to the header key and value columns; return how many there were."""
    hkdata, hkends, hkvalid, hvdata, hvends, hvvalid = columns
    n = 0
    for key_at, key_length, value_at, value_length in _headers(record, pos, offset):
        _put(hkdata, hkends, hkvalid, record, key_at, key_length)
        _put(hvdata, hvends, hvvalid, record, value_at, value_length)
        n += 1
    return n


def encode_records(
    keys: BinaryColumn | None,
    values: BinaryColumn | None,
    timestamps: TimestampColumn | None,
    headers: HeaderColumn | None,
    rows: Buffer | None,
    partitions: Buffer | None,
    num_partitions: int,
    count: int,
    max_bytes: int,
    now_ms: int,
    seal: bool,
    into: list[bytearray],
) -> list[list[EncodedChunk]]:
    """Encode ``count`` rows as the records sections of batches, each partition's closed after the
    record that brings it to ``max_bytes``: ``[(start, end, records, first timestamp, max
    timestamp)]`` per partition, the section being ``into[partition][start:end]`` (``into`` holds a
    bytearray per partition, emptied first). ``partitions`` is None (``num_partitions`` 1) or an
    int32 partition per row.

    ``timestamps`` is ``(validity, int64 values, offset, units per millisecond)`` (values are
    floor-divided to milliseconds, as Spark's Kafka sink does) and ``headers`` is ``(validity, int32
    list offsets, offset, key column, value column)``, or None; a null timestamp means ``now_ms``.
    ``rows`` is None for rows ``0..count-1``, else a buffer of uint64 row numbers to encode in order.
    With ``seal``, each records section comes framed as a whole uncompressed batch, as
    ``seal_record_batch`` frames it by default.
    """
    if count < 0:
        raise ValueError("negative row count")
    row_numbers = memoryview(rows).cast("B").cast("Q") if rows is not None else range(count)
    if len(row_numbers) < count:
        raise ValueError(f"rows: {len(row_numbers)} row numbers given for {count} rows")
    if num_partitions <= 0 or (partitions is None and num_partitions != 1):
        raise ValueError(f"{count} rows into {num_partitions} partitions")
    if not isinstance(into, list) or len(into) != num_partitions:
        raise TypeError(f"into: expected a list of {num_partitions} bytearrays")
    for out in into:
        out.clear()  # BufferError while a view of it is held, as the compiled twin refuses it
    groups: list[list[int]] = [[] for _ in range(num_partitions)]
    partition_of = memoryview(partitions).cast("B").cast("i") if partitions is not None else None
    for row in row_numbers[:count]:
        k = partition_of[row] if partition_of is not None else 0
        if not 0 <= k < num_partitions:
            raise ValueError(f"row {row} goes to partition {k}, not one of 0 to {num_partitions - 1}")
        groups[k].append(row)
    columns = _Columns(keys, values, timestamps, headers, now_ms)
    return [_encode_rows(columns, g, max_bytes, seal, out) for g, out in zip(groups, into, strict=True)]


class _Columns:
    """What a record is made of, by row: the encoders' view of the Arrow columns."""

    def __init__(
        self,
        keys: BinaryColumn | None,
        values: BinaryColumn | None,
        timestamps: TimestampColumn | None,
        headers: HeaderColumn | None,
        now_ms: int,
    ):
        self.keys, self.values, self._now_ms = BinaryRows(keys), BinaryRows(values), now_ms
        self._ts = None
        if timestamps is not None:
            validity, data, offset, per_ms = timestamps
            if per_ms <= 0:
                raise ValueError("timestamps: units per ms must be positive")
            bits = memoryview(validity).cast("B") if validity is not None else None
            self._ts = (bits, memoryview(data).cast("B").cast("q"), offset, per_ms)
        self._headers = None
        if headers is not None:
            h_validity, h_offsets, h_offset, hk_col, hv_col = headers
            bits = memoryview(h_validity).cast("B") if h_validity is not None else None
            ends = memoryview(h_offsets).cast("B").cast("i")
            self._headers = (bits, ends, h_offset, BinaryRows(hk_col), BinaryRows(hv_col))

    def timestamp(self, row: int) -> int:
        """Milliseconds, floored as Spark's Kafka sink floors them; ``now_ms`` for a null."""
        if self._ts is None:
            return self._now_ms
        bits, stamps, offset, per_ms = self._ts
        j = offset + row
        return stamps[j] // per_ms if bits is None or bits[j >> 3] >> (j & 7) & 1 else self._now_ms

    def headers(self, row: int) -> list[tuple[bytes, bytes | None]]:
        if self._headers is None:
            return []
        bits, ends, offset, hkeys, hvalues = self._headers
        j = offset + row
        pairs: list[tuple[bytes, bytes | None]] = []
        if bits is None or bits[j >> 3] >> (j & 7) & 1:
            for h in range(ends[j], ends[j + 1]):
                hk = hkeys.get(h)
                if hk is None:
                    raise InvalidRecordError(f"row {row} has a header with a null key")
                pairs.append((hk, hvalues.get(h)))
        return pairs


def _encode_rows(
    columns: _Columns, row_numbers: list[int], max_bytes: int, seal: bool, into: bytearray
) -> list[EncodedChunk]:
    chunks = []
    out = bytearray()
    first_ts = max_ts = start = 0
    for i, row in enumerate(row_numbers):
        delta = i - start
        ts = columns.timestamp(row)
        if delta == 0:
            first_ts = max_ts = ts
        elif ts > max_ts:
            max_ts = ts
        pairs = columns.headers(row)
        encode_record(out, delta, ts - first_ts, columns.keys.get(row), columns.values.get(row), pairs)
        if len(out) >= max_bytes or i == len(row_numbers) - 1:
            n = i + 1 - start
            at = len(into)
            into += seal_record_batch(out, n, first_ts, max_ts) if seal else out
            chunks.append((at, len(into), n, first_ts, max_ts))
            out = bytearray()
            start = i + 1
    return chunks


def key_partitions(n: int, keys: BinaryColumn | None, num_partitions: int) -> bytes:
    """Kafka's default partition of each of ``n`` keys, as int32s; -1 for a null key."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    col = BinaryRows(keys)
    out = bytearray()
    for i in range(n):
        key = col.get(i)
        out += _I32(-1 if key is None else (murmur2(key) & 0x7FFFFFFF) % num_partitions)
    return bytes(out)


def reserve_columns(columns: tuple[bytearray, ...], sizes: tuple[int, ...]) -> None:
    """Room for what a builder expects to hold: nothing to do here, as Python's bytearrays offer no way
    to hold room while empty; appending to them grows them geometrically."""
    if len(columns) != len(sizes):
        raise ValueError("a size for each column")


__all__ = [
    "check_records",
    "decode_batches",
    "decode_records",
    "encode_records",
    "keep_records",
    "key_partitions",
    "offset_table_get",
    "offset_table_live",
    "offset_table_put",
    "reserve_columns",
]
