"""The protocol of the codec's hot loops, which two twins implement (as aiokafka's ``record/``):
``_pyrecords`` (the pure-Python reference) and ``_crecords`` (compiled; typed by ``_crecords.pyi``).
``_speedups`` picks one. Columns travel as Arrow buffers, results as bytearray columns."""

from __future__ import annotations

from typing import Any, Protocol

# Anything with the buffer protocol: bytes, bytearray, memoryview, a pyarrow Buffer. (Python
# 3.12's collections.abc.Buffer names it; the codec runs on 3.11 too.)
Buffer = Any
# A binary column: (validity or None, int32 end offsets, data, offset of the first row)
BinaryColumn = tuple[Buffer | None, Buffer, Buffer, int]
# An int64 column of milliseconds: (validity or None, values, offset of the first row)
TimestampColumn = tuple[Buffer | None, Buffer, int, int]  # validity, int64 values, offset, units per ms
# A list<struct<key, value>> column: (validity or None, int32 list ends, offset, keys, values)
HeaderColumn = tuple[Buffer | None, Buffer, int, BinaryColumn | None, BinaryColumn | None]
# An encoded records section (or whole batch), as where it is in its partition's bytearray:
# (start, end, records, first timestamp, max timestamp)
EncodedChunk = tuple[int, int, int, int, int]


class RecordsCodec(Protocol):
    def check_records(
        self, payload: Buffer, count: int, base_offset: int, base_ts: int, /
    ) -> tuple[bool, int, int, int]: ...

    def decode_records(
        self,
        payload: Buffer,
        count: int,
        base_offset: int,
        base_ts: int,
        log_append_ts: int | None,
        start: int,
        end: int,
        include_headers: bool,
        columns: tuple[bytearray, ...],
        /,
    ) -> None: ...

    def decode_batches(
        self,
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
        /,
    ) -> int: ...

    def encode_records(
        self,
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
        /,
    ) -> list[list[EncodedChunk]]: ...

    def keep_records(
        self, payload: Buffer, count: int, base_offset: int, base_ts: int, kept: Buffer, /
    ) -> tuple[bytes, int, int]: ...

    def key_partitions(self, n: int, keys: BinaryColumn | None, num_partitions: int, /) -> bytes: ...

    def reserve_columns(self, columns: tuple[bytearray, ...], sizes: tuple[int, ...], /) -> None: ...

    # The log cleaner's offset table: a key's digest and latest offset per 24-byte slot (``_pyoffset_table``).
    def offset_table_put(
        self, table: Buffer, keys: BinaryColumn | None, count: int, offsets: Buffer, expired: Buffer, /
    ) -> int: ...

    def offset_table_get(self, table: Buffer, keys: BinaryColumn | None, count: int, /) -> bytes: ...

    def offset_table_live(self, table: Buffer, /) -> bytes: ...
