# The compiled twin of _pyrecords (see codec.RecordsCodec for what the arguments are).
from .codec import BinaryColumn, Buffer, EncodedChunk, HeaderColumn, TimestampColumn

def check_records(payload: Buffer, count: int, base_offset: int, base_ts: int, /) -> tuple[bool, int, int, int]: ...
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
    /,
) -> None: ...
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
    /,
) -> int: ...
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
    /,
) -> list[list[EncodedChunk]]: ...
def keep_records(
    payload: Buffer, count: int, base_offset: int, base_ts: int, kept: Buffer, /
) -> tuple[bytes, int, int]: ...
def key_partitions(n: int, keys: BinaryColumn | None, num_partitions: int, /) -> bytes: ...
def reserve_columns(columns: tuple[bytearray, ...], sizes: tuple[int, ...], /) -> None: ...
def offset_table_put(
    table: Buffer, keys: BinaryColumn | None, count: int, offsets: Buffer, expired: Buffer, /
) -> int: ...
def offset_table_get(table: Buffer, keys: BinaryColumn | None, count: int, /) -> bytes: ...
def offset_table_live(table: Buffer, /) -> bytes: ...
