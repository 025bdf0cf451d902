"""Decode Kafka v2 record batches straight into Arrow columns, in the layout of Spark's Kafka source.

Records are parsed in place and their bytes appended to growing column buffers (offsets + data),
so no Python object is made per key, value or header: the Arrow arrays are built from the buffers
in one step. The column types are those Spark's Arrow bridge expects for the Kafka source schema:
binary, string, int32, int64 and ``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

from array import array
from typing import List, Optional

import pyarrow as pa

from ..errors import CorruptRecordError
from .compression import decompress
from .default_record_batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, RecordBatch
from .varint import read_varint

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


class _BinaryColumn:
    """A variable-length column under construction: data, int32 end offsets and a validity byte per row."""

    __slots__ = ("data", "ends", "valid", "nulls")

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("i", [0])
        self.valid = bytearray()
        self.nulls = 0

    def append(self, view: memoryview, start: int, length: int) -> None:
        if length < 0:
            self.valid.append(0)
            self.nulls += 1
        else:
            self.data += view[start : start + length]
            self.valid.append(1)
        self.ends.append(len(self.data))

    def build(self, type_: pa.DataType) -> pa.Array:
        n = len(self.valid)
        if len(self.data) >= 1 << 31:
            raise OverflowError("an Arrow batch column exceeds 2 GiB; flush more often")
        validity = None
        if self.nulls:
            # The bitmap of a boolean array is exactly an Arrow validity buffer.
            flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(self.valid)])
            validity = flags.cast(pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(self.ends), pa.py_buffer(self.data)], self.nulls)


class ArrowRecordBuilder:
    """Accumulates records of one topic partition and builds Arrow record batches of them."""

    def __init__(self, topic: str, partition: int, include_headers: bool):
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self._keys = _BinaryColumn()
        self._values = _BinaryColumn()
        self._offsets = array("q")
        self._timestamps = array("q")
        self._timestamp_types = array("i")
        self._header_ends = array("i", [0])
        self._header_keys = _BinaryColumn()
        self._header_values = _BinaryColumn()

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def size_in_bytes(self) -> int:
        return len(self._keys.data) + len(self._values.data) + len(self._header_values.data)

    def add(self, batch: RecordBatch, base_offset: int, start: int = 0, end: int = 1 << 63) -> None:
        """Add the records of ``batch`` (whose first offset is ``base_offset``) that lie in
        ``[start, end)``. Control batches hold no data and add nothing."""
        if batch.is_control or base_offset + batch.last_offset_delta < start or base_offset >= end:
            return
        payload = memoryview(batch.buffer)[HEADER_SIZE:]
        codec = batch.attributes & COMPRESSION_MASK
        if codec:
            payload = memoryview(decompress(codec, bytes(payload)))
        log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
        try:
            self._decode(payload, batch.record_count, base_offset, batch.base_timestamp,
                         batch.max_timestamp if log_append else None, start, end)
        except IndexError:
            raise CorruptRecordError(f"record batch at offset {base_offset} ends inside a record") from None

    def _decode(self, buf: memoryview, count: int, base_offset: int, base_ts: int,
                log_append_ts: Optional[int], start: int, end: int) -> None:
        # The varint reader is inlined: this loop runs once per record read by Spark.
        offsets, timestamps, ts_types = self._offsets, self._timestamps, self._timestamp_types
        keys, values = self._keys, self._values
        headers = self.include_headers
        ts_type = 0 if log_append_ts is None else 1
        size = len(buf)
        pos = 0
        for _ in range(count):
            fields = [0, 0, 0, 0, 0]  # length, timestampDelta, offsetDelta, keyLength, (valueLength)
            for i in range(4):
                if i == 1:
                    pos += 1  # the record's attributes byte sits after its length
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
                        raise CorruptRecordError(f"record of {fields[0]} bytes overruns its batch at offset {base_offset}")
            offset = base_offset + fields[2]
            if offset < start or offset >= end:
                pos = record_end
                continue
            key_length = fields[3]
            key_at = pos
            pos += max(key_length, 0)
            value_length, pos = read_varint(buf, pos)
            value_at = pos
            pos += max(value_length, 0)
            if pos > record_end:
                raise CorruptRecordError(f"record at offset {offset} overruns its length")
            keys.append(buf, key_at, key_length)
            values.append(buf, value_at, value_length)
            offsets.append(offset)
            timestamps.append((base_ts + fields[1] if log_append_ts is None else log_append_ts) * 1000)
            ts_types.append(ts_type)
            if headers:
                pos = self._decode_headers(buf, pos, offset)
            if headers and pos != record_end:
                raise CorruptRecordError(f"record at offset {offset} does not match its length")
            pos = record_end

    def _decode_headers(self, buf: memoryview, pos: int, offset: int) -> int:
        n, pos = read_varint(buf, pos)
        if n < 0:
            raise CorruptRecordError(f"record at offset {offset} has a negative header count")
        for _ in range(n):
            key_length, pos = read_varint(buf, pos)
            if key_length < 0:
                raise CorruptRecordError(f"record at offset {offset} has a header with a null key")
            self._header_keys.append(buf, pos, key_length)
            pos += key_length
            value_length, pos = read_varint(buf, pos)
            self._header_values.append(buf, pos, value_length)
            pos += max(value_length, 0)
        self._header_ends.append(self._header_ends[-1] + n)
        return pos

    def build(self) -> pa.RecordBatch:
        """The records added so far as one Arrow batch; the builder starts empty again."""
        n = len(self._offsets)
        columns: List[pa.Array] = [
            self._keys.build(pa.binary()),
            self._values.build(pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._offsets)]),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(self._timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self._timestamp_types)]),
        ]
        if self.include_headers:
            header_keys = self._header_keys.build(pa.string())
            try:
                header_keys.validate(full=True)
            except pa.ArrowInvalid:
                raise CorruptRecordError(
                    f"{self.topic}-{self.partition}: a record header key is not UTF-8 (offsets {self._offsets[0]} to {self._offsets[-1]})"
                ) from None
            entries = pa.StructArray.from_arrays([header_keys, self._header_values.build(pa.binary())], ["key", "value"])
            columns.append(pa.ListArray.from_arrays(pa.array(self._header_ends, pa.int32()), entries, HEADERS_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=kafka_source_schema(self.include_headers))

