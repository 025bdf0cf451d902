"""Kafka's record batch format v2 (magic 2), as ``DefaultRecordBatch`` defines it.

Layout (big-endian), 61 bytes of header then the records::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

The CRC-32C covers ``attributes`` to the end, so ``baseOffset`` and ``partitionLeaderEpoch`` can
be rewritten without touching it: that is how a broker assigns offsets without rewriting data.
Each record is ``length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
key (varint length, -1 = null) | value (likewise) | header count varint | headers``.
Compression (attribute bits 0-2) applies to the records section only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import crc32c

from ..clock import now_ms as wall_clock_ms
from ..errors import CorruptRecordError, InvalidRecordError
from .codec import Buffer
from .compression import CompressionType, compress, decompress
from .record import BatchRecord, Header, Record, TimestampType
from .varint import read_varint, write_varint

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_OFFSET = 8  # batchLength counts the bytes after itself
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
LAST_OFFSET_DELTA_OFFSET = 23
RECORDS_COUNT_OFFSET = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_I32 = struct.Struct(">i")


def check_framing(buffer: bytes | bytearray | memoryview, size: int | None = None) -> None:
    """Raise ``CorruptRecordError`` unless ``buffer`` is exactly one magic-2 batch, as its header says.
    With ``size``, ``buffer`` may be the batch's header alone and ``size`` is the whole batch's."""
    size = len(buffer) if size is None else size
    if size < HEADER_SIZE or len(buffer) < HEADER_SIZE:
        raise CorruptRecordError(f"record batch of {size} bytes is shorter than its {HEADER_SIZE}-byte header")
    magic = buffer[MAGIC_OFFSET]
    if magic != MAGIC:
        raise CorruptRecordError(f"record batch has magic {magic}; only magic {MAGIC} (Kafka 0.11+) is supported")
    (length,) = _I32.unpack_from(buffer, LENGTH_OFFSET)
    if length + LOG_OVERHEAD != size:
        raise CorruptRecordError(
            f"record batch says it is {length + LOG_OVERHEAD} bytes long but {size} bytes were given"
        )


def batch_crc(buffer: bytes | bytearray | memoryview) -> int:
    """The CRC-32C a framed batch should carry: of its bytes from ``attributes`` on."""
    return crc32c.crc32c(memoryview(buffer)[ATTRIBUTES_OFFSET:])


def crc_matches(buffer: bytes | bytearray | memoryview) -> bool:
    """Whether a framed batch's stored CRC-32C is its ``batch_crc``; read in place, without building a
    RecordBatch (every read of a stored entry checks it)."""
    return batch_crc(buffer) == _CRC.unpack_from(buffer, CRC_OFFSET)[0]


class RecordBatch:
    """A read-only view of one record batch. Construction checks the framing; ``validate()`` the CRC."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "buffer",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    def __init__(self, buffer: bytes | bytearray | memoryview):
        check_framing(buffer)
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = HEADER.unpack_from(buffer, 0)
        self.buffer = buffer

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """Control batches (transaction markers) take offsets but are never returned as data."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def offset_span(self) -> int:
        """Offsets the batch takes: ``lastOffsetDelta + 1``, more than its records after compaction."""
        return self.last_offset_delta + 1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    def compute_crc(self) -> int:
        return batch_crc(self.buffer)

    def is_valid(self) -> bool:
        return crc_matches(self.buffer)

    def validate(self) -> None:
        actual = self.compute_crc()
        if actual != self.crc:
            raise CorruptRecordError(
                f"record batch at base offset {self.base_offset} fails its CRC-32C: "
                f"stored {self.crc:#010x}, computed {actual:#010x}"
            )

    def records(self) -> list[BatchRecord]:
        """Decode every record (control records included), with absolute offsets and timestamps."""
        payload = memoryview(self.buffer)[HEADER_SIZE:]
        codec = self.attributes & COMPRESSION_MASK
        if codec:
            payload = memoryview(decompress(codec, bytes(payload)))
        log_append = self.attributes & TIMESTAMP_TYPE_MASK
        out: list[BatchRecord] = []
        pos = 0
        base_offset, base_ts, max_ts = self.base_offset, self.base_timestamp, self.max_timestamp
        try:
            for _ in range(self.record_count):
                length, pos = read_varint(payload, pos)
                end = pos + length
                if length < 0 or end > len(payload):
                    raise CorruptRecordError(
                        f"record of {length} bytes overruns its batch at base offset {base_offset}"
                    )
                pos += 1  # record attributes: unused by Kafka
                ts_delta, pos = read_varint(payload, pos)
                offset_delta, pos = read_varint(payload, pos)
                key, pos = _read_bytes(payload, pos)
                value, pos = _read_bytes(payload, pos)
                n_headers, pos = read_varint(payload, pos)
                if n_headers < 0:
                    raise CorruptRecordError(f"negative header count {n_headers}")
                headers: list[Header] = []
                for _ in range(n_headers):
                    hkey, pos = _read_bytes(payload, pos)
                    if hkey is None:
                        raise CorruptRecordError("record header with a null key")
                    hvalue, pos = _read_bytes(payload, pos)
                    headers.append((hkey.decode("utf-8"), hvalue))
                if pos != end:
                    raise CorruptRecordError(
                        f"record length {length} does not match its contents at base offset {base_offset}"
                    )
                out.append(
                    BatchRecord(
                        base_offset + offset_delta,
                        max_ts if log_append else base_ts + ts_delta,
                        key,
                        value,
                        tuple(headers),
                    )
                )
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"record header key is not UTF-8 at base offset {base_offset}") from e
        if pos != len(payload):
            raise CorruptRecordError(
                f"record batch at base offset {base_offset} has {len(payload) - pos} bytes after its {self.record_count} records"
            )
        return out

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, records={self.record_count}, "
            f"size={self.size_in_bytes}, compression={self.compression.name}, control={self.is_control})"
        )


def _read_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError(f"a {n}-byte field runs past the end of its record")
    return bytes(buf[pos:end]), end


def encode_record(
    out: bytearray,
    offset_delta: int,
    ts_delta: int,
    key: Buffer | None,
    value: Buffer | None,
    headers: Sequence[tuple[str | bytes, Buffer | None]],
) -> None:
    """Append one record (length-prefixed) to ``out``; header keys may be str or UTF-8 bytes."""
    body = bytearray(b"\x00")  # attributes
    write_varint(ts_delta, body)
    write_varint(offset_delta, body)
    for field in (key, value):
        if field is None:
            write_varint(-1, body)
        else:
            write_varint(len(field), body)
            body += field
    write_varint(len(headers), body)
    for hkey, hvalue in headers:
        hk = hkey.encode("utf-8") if isinstance(hkey, str) else hkey
        write_varint(len(hk), body)
        body += hk
        if hvalue is None:
            write_varint(-1, body)
        else:
            write_varint(len(hvalue), body)
            body += hvalue
    write_varint(len(body), out)
    out += body


def build_record_batch(
    records: Iterable[Record],
    *,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode records into one batch, as a Kafka producer (``MemoryRecordsBuilder``) would.

    A record without a timestamp gets the current time, as in Kafka's producer. ``offset_deltas``
    and ``last_offset_delta`` rebuild a batch that compaction thinned out: the survivors keep their
    offsets, and the batch still spans the offsets of the original.
    """
    now: int | None = None
    body = bytearray()
    count = 0
    first_ts = max_ts = NO_TIMESTAMP
    for count, rec in enumerate(records, 1):
        ts = rec.timestamp_ms
        if ts is None:
            if now is None:
                now = wall_clock_ms()
            ts = now
        if count == 1:
            first_ts = max_ts = ts
        elif ts > max_ts:
            max_ts = ts
        delta = count - 1 if offset_deltas is None else offset_deltas[count - 1]
        encode_record(body, delta, ts - first_ts, rec.key, rec.value, rec.headers)
    if count == 0:
        raise InvalidRecordError("a record batch needs at least one record")
    return seal_record_batch(
        body,
        count,
        first_ts,
        max_ts,
        compression=compression,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        log_append_time_ms=log_append_time_ms,
        last_offset_delta=last_offset_delta,
    )


def seal_record_batch(
    records: bytes | bytearray | memoryview,
    count: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Frame an encoded records section of ``count`` records as a batch: compress it, write the
    header, sign it with the CRC-32C."""
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        if log_append_time_ms is not None:
            max_timestamp = log_append_time_ms
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    payload = compress(compression, bytes(records)) if compression else records
    header = HEADER.pack(
        base_offset,
        HEADER_SIZE + len(payload) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(header[ATTRIBUTES_OFFSET:]))
    return b"".join((header[:CRC_OFFSET], _CRC.pack(crc), header[ATTRIBUTES_OFFSET:], payload))


def with_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """Return the batch with ``baseOffset`` replaced; the CRC does not cover it, so it stays valid."""
    return b"".join((_BASE_OFFSET.pack(base_offset), memoryview(batch)[8:]))  # one copy, not two


def with_timestamps(batch: bytes | bytearray | memoryview, timestamp_type: TimestampType, max_timestamp: int) -> bytes:
    """The batch with its timestamp type and ``maxTimestamp`` set and re-signed, as a Kafka broker
    sets them from the topic's ``message.timestamp.type`` and the records (LogValidator); the
    batch as it is when both already hold."""
    (attributes,) = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)
    wanted = (
        attributes | TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME
        else attributes & ~TIMESTAMP_TYPE_MASK
    )
    if wanted == attributes and struct.unpack_from(">q", batch, MAX_TIMESTAMP_OFFSET)[0] == max_timestamp:
        return bytes(batch)
    out = bytearray(batch)
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, wanted)
    struct.pack_into(">q", out, MAX_TIMESTAMP_OFFSET, max_timestamp)
    _CRC.pack_into(out, CRC_OFFSET, batch_crc(out))
    return bytes(out)


def with_log_append_time(batch: bytes | bytearray | memoryview, timestamp_ms: int) -> bytes:
    """Stamp a batch with the broker's append time, as a Kafka broker does for
    ``message.timestamp.type=LogAppendTime``: set the attribute bit and ``maxTimestamp``, re-sign."""
    return with_timestamps(batch, TimestampType.LOG_APPEND_TIME, timestamp_ms)


def split_batches(data: bytes | memoryview) -> list[memoryview]:
    """Split concatenated batches (a PRODUCE request's or a FETCH response's record set)."""
    view = memoryview(data)
    out = []
    pos = 0
    while pos < len(view):
        if pos + LOG_OVERHEAD > len(view):
            raise CorruptRecordError(f"{len(view) - pos} trailing bytes are too short for a record batch header")
        (length,) = _I32.unpack_from(view, pos + LENGTH_OFFSET)
        end = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > len(view):
            raise CorruptRecordError(f"record batch at byte {pos} claims {length} bytes, beyond the data given")
        out.append(view[pos:end])
        pos = end
    return out


_RECORD_COUNT_OFFSET = HEADER_SIZE - 4  # the header's last field


def record_count(data: bytes | memoryview) -> int:
    """How many records concatenated batches hold, by their headers (batches already checked: a
    fetch's, or a produce's that was accepted)."""
    view, pos, total = memoryview(data), 0, 0
    while pos + HEADER_SIZE <= len(view):
        total += _I32.unpack_from(view, pos + _RECORD_COUNT_OFFSET)[0]
        pos += LOG_OVERHEAD + _I32.unpack_from(view, pos + LENGTH_OFFSET)[0]
    return total
