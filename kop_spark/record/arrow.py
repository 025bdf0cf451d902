"""Kafka v2 record batches to and from Arrow columns, in the layout of Spark's Kafka source and sink.

Decoding parses records in place and appends their bytes to growing column buffers, which become
the Arrow arrays in one step; encoding reads the Arrow buffers directly. Either way no Python object
is made per record, key, value or header. The loops are the codec's (``_speedups``): compiled when
built, else the pure-Python reference. The column types are those Spark's Arrow bridge expects for
the Kafka source schema: binary, string, int32, int64 and ``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ..clock import now_ms as wall_clock_ms
from ..errors import CorruptRecordError
from . import _speedups
from .codec import BinaryColumn, Buffer, HeaderColumn, RecordsCodec, TimestampColumn
from .compression import CompressionType, decompress
from .default_record_batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, RecordBatch, seal_record_batch

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def kafka_source_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema, as Arrow types."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def _binary_column(data: bytearray, ends: bytearray, valid: bytearray, type_: pa.DataType) -> pa.Array:
    """An Arrow array over a builder's column: data, int32 end offsets, a 0/1 byte per row."""
    n = len(valid)
    if len(data) >= 1 << 31:
        raise OverflowError("an Arrow batch column exceeds 2 GiB; flush more often")
    nulls = n - valid.count(1)
    validity = None
    if nulls:
        # The bitmap of a boolean array is exactly an Arrow validity buffer.
        flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)])
        validity = flags.cast(pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(ends), pa.py_buffer(data)], nulls)


_ZERO = bytes(4)  # the first end offset of a variable-length column


def _empty_columns() -> tuple[bytearray, ...]:
    return tuple(bytearray(_ZERO if i in (4, 7, 9, 11, 14) else b"") for i in range(16))


def _decode(
    decode_records: Callable[..., None],
    batch: RecordBatch,
    base_offset: int,
    start: int,
    end: int,
    include_headers: bool,
    columns: tuple[bytearray, ...],
) -> None:
    """Append the records of ``batch`` in ``[start, end)`` to ``columns`` (``ArrowRecordBuilder``'s)."""
    payload: Buffer = memoryview(batch.buffer)[HEADER_SIZE:]
    compression = batch.attributes & COMPRESSION_MASK
    if compression:
        payload = decompress(compression, bytes(payload))
    log_append_ts = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
    decode_records(
        payload,
        batch.record_count,
        base_offset,
        batch.base_timestamp,
        log_append_ts,
        start,
        end,
        include_headers,
        columns,
    )


class ArrowRecordBuilder:
    """Accumulates records of one topic partition and builds Arrow record batches of them.

    The records' bytes go straight into 16 bytearray columns that become the Arrow buffers:
    offsets, timestamps, timestamp types; data, end offsets and validity of keys, then of values;
    the header list ends; data, end offsets and validity of header keys, then of header values.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool, *, codec: RecordsCodec = _speedups.codec):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._decode_records = codec.decode_records
        self._decode_batches = codec.decode_batches
        self._reserve_columns = codec.reserve_columns
        self._schema = kafka_source_schema(include_headers)
        self._constants: tuple[pa.Array, pa.Array] | None = None
        self._reset()

    def _reset(self, expected: tuple[int, ...] | None = None) -> None:
        self._columns = _empty_columns()
        if expected:  # a builder flushed at a size is flushed at about that size again: no column regrows
            self._reserve_columns(self._columns, expected)

    def __len__(self) -> int:
        return len(self._columns[0]) // 8

    @property
    def size_in_bytes(self) -> int:
        c = self._columns
        return len(c[3]) + len(c[6]) + len(c[13])

    def _topic_partition(self, n: int) -> tuple[pa.Array, pa.Array]:
        # Arrays are immutable: batches of one size (every full flush) share one pair.
        if self._constants is None or len(self._constants[0]) != n:
            self._constants = (
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            )
        return self._constants

    def add(self, batch: RecordBatch, base_offset: int, start: int = 0, end: int = (1 << 63) - 1) -> None:
        """Add the records of ``batch`` (whose first offset is ``base_offset``) that lie in
        ``[start, end)``. Control batches hold no data and add nothing."""
        if batch.is_control or base_offset + batch.last_offset_delta < start or base_offset >= end:
            return
        _decode(self._decode_records, batch, base_offset, start, end, self.include_headers, self._columns)

    def add_batches(
        self,
        data: Buffer,
        spans: Buffer,
        first: int,
        offset_base: int,
        start: int,
        end: int,
        max_rows: int,
        max_bytes: int,
    ) -> int:
        """``add`` for a run of framed batches in ``data``: those at ``spans[first:]`` (int64 pairs:
        position, size), each batch's first offset ``offset_base`` plus its ``baseOffset``, until the
        builder holds ``max_rows`` records or ``max_bytes`` (``size_in_bytes``). One codec call
        decodes the run, so a run of small batches costs no Python per batch. Returns the index of
        the first span not added."""
        i = self._decode_batches(
            data, spans, first, offset_base, start, end, self.include_headers, max_rows, max_bytes, self._columns
        )
        if i < memoryview(spans).nbytes // 16 and len(self) < max_rows and self.size_in_bytes < max_bytes:
            # the codec stopped at a compressed batch, which is decompressed here
            at, size = struct.unpack_from("=qq", spans, i * 16)
            batch = RecordBatch(memoryview(data)[at : at + size])
            self.add(batch, offset_base + batch.base_offset, start, end)
            i += 1
        return i

    def build(self) -> pa.RecordBatch:
        """The records added so far as one Arrow batch; the builder starts empty again."""
        (
            offsets,
            timestamps,
            ts_types,
            kdata,
            kends,
            kvalid,
            vdata,
            vends,
            vvalid,
            header_ends,
            hkdata,
            hkends,
            hkvalid,
            hvdata,
            hvends,
            hvvalid,
        ) = self._columns
        n = len(self)
        columns: list[pa.Array] = [
            _binary_column(kdata, kends, kvalid, pa.binary()),
            _binary_column(vdata, vends, vvalid, pa.binary()),
            *self._topic_partition(n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ts_types)]),
        ]
        if self.include_headers:
            header_keys = _binary_column(hkdata, hkends, hkvalid, pa.string())
            try:
                header_keys.validate(full=True)
            except pa.ArrowInvalid:
                first, last = (
                    struct.unpack_from("<q", offsets)[0],
                    struct.unpack_from("<q", offsets, len(offsets) - 8)[0],
                )
                raise CorruptRecordError(
                    f"{self.topic}-{self.partition}: a record header key is not UTF-8 (offsets {first} to {last})"
                ) from None
            entries = pa.StructArray.from_arrays(
                [header_keys, _binary_column(hvdata, hvends, hvvalid, pa.binary())], ["key", "value"]
            )
            list_ends = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(header_ends)])
            columns.append(pa.ListArray.from_arrays(list_ends, entries, HEADERS_TYPE))
        self._reset(tuple(len(c) + (len(c) >> 3) for c in self._columns))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


_UNITS_PER_MS = {"ms": 1, "us": 1000, "ns": 1_000_000}


def _fixed_values(array: pa.Array, type_: pa.DataType, what: str) -> memoryview:
    """The values of a column without nulls, as ``type_``, from its first row, as the codec takes
    a fixed-width column."""
    if array.null_count:
        raise ValueError(f"{what} must not be null")
    if array.type != type_:
        array = array.cast(type_)
    width = type_.bit_width // 8
    return memoryview(array.buffers()[1])[array.offset * width : (array.offset + len(array)) * width]


def _binary_parts(array: pa.Array | None) -> BinaryColumn | None:
    """A binary or string array as the codec takes it: ``(validity, int32 offsets, data, offset)``."""
    if array is None:
        return None
    if pa.types.is_string(array.type):
        array = array.cast(pa.binary())  # zero-copy: same buffers
    elif not pa.types.is_binary(array.type):
        raise TypeError(f"expected a binary or string column, got {array.type}")
    validity, offsets, data = array.buffers()
    return (validity if array.null_count else None, offsets, data if data is not None else b"", array.offset)


def encode_arrow(
    values: pa.Array | None,
    keys: pa.Array | None = None,
    timestamps_ms: pa.Array | None = None,
    headers: pa.Array | None = None,
    *,
    rows: pa.Array | None = None,
    compression: CompressionType = CompressionType.NONE,
    batch_bytes: int = 16384,
    now_ms: int | None = None,
    codec: RecordsCodec = _speedups.codec,
) -> list[bytes | memoryview]:
    """Encode Arrow columns as record batches, as a Kafka producer with ``batch.size`` would: a
    batch closes after the record that brings its records to ``batch_bytes``.

    ``values`` and ``keys`` are binary or string (null allowed); ``timestamps_ms`` int64 milliseconds
    or an Arrow timestamp of any unit, floored to milliseconds as Spark's Kafka sink does (null means
    ``now_ms``, by default the time of the call); ``headers`` a list of ``struct<key: string,
    value: binary>``. Absent columns are null in every record. ``rows`` (uint64 row numbers, as
    ``sort_indices`` gives) picks the rows to encode, in its order; by default all, in order.
    """
    selected = None if rows is None else _fixed_values(rows, pa.uint64(), "row numbers")
    columns = (values, keys, timestamps_ms, headers)
    return _encode(columns, selected, None, 1, compression, batch_bytes, now_ms, codec, None)[0]


def encode_arrow_by_partition(
    values: pa.Array | None,
    keys: pa.Array | None,
    timestamps_ms: pa.Array | None,
    headers: pa.Array | None,
    *,
    partitions: pa.Array,
    num_partitions: int,
    compression: CompressionType = CompressionType.NONE,
    batch_bytes: int = 16384,
    now_ms: int | None = None,
    codec: RecordsCodec = _speedups.codec,
    into: list[bytearray] | None = None,
) -> list[list[bytes | memoryview]]:
    """``encode_arrow`` of each partition's rows, in their order, in one pass over the columns:
    ``partitions`` (int32, no nulls) says where each row goes; the result's ``p``-th list holds
    partition ``p``'s batches.

    Uncompressed batches are views of ``into``'s ``p``-th bytearray, which a caller that copies the
    batches out before its next call passes again, its room kept (``BufferError`` if a view of the
    last call's batches is still held); by default they are new."""
    where = _fixed_values(partitions, pa.int32(), "partitions")
    columns = (values, keys, timestamps_ms, headers)
    return _encode(columns, None, where, num_partitions, compression, batch_bytes, now_ms, codec, into)


def _encode(
    columns: tuple[pa.Array | None, pa.Array | None, pa.Array | None, pa.Array | None],
    rows: memoryview | None,
    partitions: memoryview | None,
    num_partitions: int,
    compression: CompressionType,
    batch_bytes: int,
    now_ms: int | None,
    codec: RecordsCodec,
    into: list[bytearray] | None,
) -> list[list[bytes | memoryview]]:
    values, keys, timestamps_ms, headers = columns
    n = len(values) if values is not None else len(keys) if keys is not None else 0
    for column in (keys, timestamps_ms, headers):
        if column is not None and len(column) != n:
            raise ValueError(f"columns of {n} and {len(column)} rows")
    if partitions is not None and len(partitions) != n * 4:
        raise ValueError(f"{n} rows and {len(partitions) // 4} partitions")
    seal = compression == CompressionType.NONE  # the codec frames uncompressed batches itself
    into = [bytearray() for _ in range(num_partitions)] if into is None else into
    encoded = codec.encode_records(
        _binary_parts(keys),
        _binary_parts(values),
        _timestamp_parts(timestamps_ms),
        _header_parts(headers),
        rows,
        partitions,
        num_partitions,
        n if rows is None else len(rows) // 8,
        batch_bytes,
        wall_clock_ms() if now_ms is None else now_ms,
        seal,
        into,
    )
    # views made once the codec is done growing the bytearrays
    views = ((memoryview(out), chunks) for out, chunks in zip(into, encoded, strict=True))
    if seal:
        return [[view[start:end] for start, end, *_ in chunks] for view, chunks in views]
    return [
        [
            seal_record_batch(view[start:end], count, first_ts, max_ts, compression=compression)
            for start, end, count, first_ts, max_ts in chunks
        ]
        for view, chunks in views
    ]


def _timestamp_parts(timestamps: pa.Array | None) -> TimestampColumn | None:
    """int64 milliseconds, or an Arrow timestamp, as the codec takes it (its unit is the codec's to
    floor to milliseconds)."""
    if timestamps is None:
        return None
    per_ms = _UNITS_PER_MS.get(timestamps.type.unit, 0) if pa.types.is_timestamp(timestamps.type) else 1
    if per_ms == 0:  # seconds: to milliseconds first
        timestamps, per_ms = timestamps.cast(pa.timestamp("ms", timestamps.type.tz)), 1
    validity, data = timestamps.buffers()
    return (validity if timestamps.null_count else None, data, timestamps.offset, per_ms)


def _header_parts(headers: pa.Array | None) -> HeaderColumn | None:
    if headers is None:
        return None
    entries = headers.values.flatten()  # key and value children, the struct's nulls folded in
    return (
        headers.buffers()[0] if headers.null_count else None,
        headers.buffers()[1],
        headers.offset,
        _binary_parts(entries[0]),
        _binary_parts(entries[1]),
    )


def key_partitions(keys: pa.Array, num_partitions: int, *, codec: RecordsCodec = _speedups.codec) -> pa.Array:
    """Where Kafka's default partitioner sends each key (``toPositive(murmur2(key)) % n``), as an
    int32 array, null where the key is null."""
    parts = codec.key_partitions(len(keys), _binary_parts(keys), num_partitions)
    chosen = pa.Array.from_buffers(pa.int32(), len(keys), [None, pa.py_buffer(parts)])
    return pc.if_else(keys.is_null(), pa.scalar(None, pa.int32()), chosen) if keys.null_count else chosen


class RecordsSummary(NamedTuple):
    """What a broker checks of a batch's records, read without a Python object per record."""

    offsets_in_order: bool  # record i has offset delta i
    min_timestamp: int  # the records' own (create) times, in ms; records without one (-1) left out
    max_timestamp: int
    keyless: int  # records without a key


# Arrow's kernels cost about 90 µs a call, a scan in Python about 0.17 µs a record.
_SCANNED_IN_PYTHON = 512


def first_at_or_after(
    batch: RecordBatch, timestamp_ms: int, *, start: int = 0, codec: RecordsCodec = _speedups.codec
) -> tuple[int, int] | None:
    """The offset and timestamp of the first record of ``batch`` (whose ``baseOffset`` is absolute)
    at offset ``start`` or later stamped at or after ``timestamp_ms``, as Kafka's ListOffsets by time
    finds it; None when no record is. The records are decoded by the codec, into the columns only
    (a whole Arrow batch made of them cost more than the decoding: ListOffsets for a thousand
    partitions took most of a second)."""
    columns = _empty_columns()
    _decode(codec.decode_records, batch, batch.base_offset, start, (1 << 63) - 1, False, columns)
    stamps, target = memoryview(columns[1]).cast("q"), timestamp_ms * 1000
    if len(stamps) <= _SCANNED_IN_PYTHON:
        at = next((i for i, stamp in enumerate(stamps) if stamp >= target), -1)
    else:
        array = pa.Array.from_buffers(pa.int64(), len(stamps), [None, pa.py_buffer(columns[1])])
        at = pc.index(pc.greater_equal(array, target), True).as_py()
    if at < 0:
        return None
    return memoryview(columns[0]).cast("q")[at], stamps[at] // 1000


def summarize(batch: RecordBatch, *, codec: RecordsCodec = _speedups.codec) -> RecordsSummary:
    """Walk every record of ``batch`` (its framing, keys, values and headers checked, a
    ``CorruptRecordError`` otherwise) and say what a produce must check."""
    payload: Buffer = memoryview(batch.buffer)[HEADER_SIZE:]
    if batch.attributes & COMPRESSION_MASK:
        payload = decompress(batch.attributes & COMPRESSION_MASK, bytes(payload))
    return RecordsSummary(*codec.check_records(payload, batch.record_count, 0, batch.base_timestamp))
