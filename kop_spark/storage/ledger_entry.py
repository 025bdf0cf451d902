"""A ledger's entries: broker entry metadata followed by one Kafka v2 record batch (format in
docs/ledger-format.md), and scanning a run of them.

The metadata carries the entry's index relative to its ledger, the broker's timestamp and the
record count, and a CRC-32C that covers itself and the batch's first 21 bytes; the batch's own CRC
covers the rest. So every byte of an entry is checked, and corrupt bytes are never handed out as data.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from ..errors import CorruptRecordError
from ..record.codec import Buffer
from ..record.default_record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_OFFSET,
    RECORDS_COUNT_OFFSET,
    check_framing,
    crc_matches,
)
from .fileio import FileIO

ENTRY_MAGIC = 0x4B45  # "KE": lets dump-ledger tell an entry boundary from garbage
ENTRY_METADATA = struct.Struct(">HiqqiI")  # magic, batch size, relative index, broker ts, records, crc
_METADATA_CRC_SPAN = ENTRY_METADATA.size - 4
_BATCH_PREFIX = ATTRIBUTES_OFFSET  # batch bytes the metadata CRC covers
_MAX_TS = struct.Struct(">q")
_BASE_OFFSET = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
# An entry's metadata and its batch's header, which follow each other: unpacked in one call.
_METADATA_AND_HEADER = struct.Struct(ENTRY_METADATA.format + HEADER.format[1:])
_SCAN_CHUNK = 8 << 20
_HEADER_SCAN_CHUNK = 64 << 10


class EntryInfo(NamedTuple):
    """One row of a ledger's entry table."""

    position: int
    relative_index: int
    max_timestamp: int


class Entry(NamedTuple):
    """An entry read back and verified. ``batch`` has ``baseOffset`` = relative index; it is a view of
    the bytes read (which it keeps alive)."""

    position: int
    relative_index: int
    broker_timestamp: int
    record_count: int
    batch: memoryview

    @property
    def size(self) -> int:
        return ENTRY_METADATA.size + len(self.batch)

    @property
    def offset_span(self) -> int:
        return _I32.unpack_from(self.batch, LAST_OFFSET_DELTA_OFFSET)[0] + 1


def entry_parts(batch: bytes | memoryview, relative_index: int, broker_timestamp: int) -> tuple[tuple, int]:
    """An entry as the pieces to write (metadata, the batch with its base offset set to the
    relative index) and the batch's max timestamp. Checks the batch's framing and magic."""
    check_framing(batch)
    (count,) = _I32.unpack_from(batch, RECORDS_COUNT_OFFSET)
    prefix = _BASE_OFFSET.pack(relative_index) + bytes(batch[8:_BATCH_PREFIX])
    meta = ENTRY_METADATA.pack(ENTRY_MAGIC, len(batch), relative_index, broker_timestamp, count, 0)[:_METADATA_CRC_SPAN]
    crc = crc32c.crc32c(prefix, crc32c.crc32c(meta))
    return (meta, _CRC.pack(crc), prefix, memoryview(batch)[_BATCH_PREFIX:]), _MAX_TS.unpack_from(
        batch, MAX_TIMESTAMP_OFFSET
    )[0]


def entry_header(buf: Buffer, pos: int, path: str, file_offset: int, limit: int) -> tuple[int, int, int, int, int]:
    """Check the metadata of the entry at ``buf[pos:]`` and its batch's header, where ``buf`` starts
    at byte ``file_offset`` of the file and the entry must end by ``buf[limit]`` (which may lie past
    what ``buf`` holds); return the batch's size, the relative index, the broker's timestamp, the
    record count and the batch's max timestamp. Errors give the entry's byte in the file, as
    ``kop dump-ledger`` lists it."""
    at = file_offset + pos
    end_meta = pos + ENTRY_METADATA.size
    if end_meta > len(buf):
        raise CorruptRecordError(f"{path}: entry at byte {at} is cut short in its metadata")
    magic, size, rel, broker_ts, count, crc = ENTRY_METADATA.unpack_from(buf, pos)
    if magic != ENTRY_MAGIC:
        raise CorruptRecordError(f"{path}: no entry starts at byte {at} (bad entry magic {magic:#06x})")
    if size < HEADER_SIZE or end_meta + size > limit:
        raise CorruptRecordError(f"{path}: entry at byte {at} claims {size} bytes, beyond the data")
    if end_meta + HEADER_SIZE > len(buf):
        raise CorruptRecordError(f"{path}: entry at byte {at} is cut short (file ends at {file_offset + len(buf)})")
    view = memoryview(buf)
    actual = crc32c.crc32c(
        view[end_meta : end_meta + _BATCH_PREFIX], crc32c.crc32c(view[pos : pos + _METADATA_CRC_SPAN])
    )
    if actual != crc:
        raise CorruptRecordError(f"{path}: entry at byte {at} fails its metadata checksum")
    try:
        check_framing(view[end_meta : end_meta + HEADER_SIZE], size)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{path}: entry at byte {at} holds a malformed record batch: {e}") from None
    (max_ts,) = _MAX_TS.unpack_from(buf, end_meta + MAX_TIMESTAMP_OFFSET)
    return size, rel, broker_ts, count, max_ts


def parse_entry(buf: Buffer, pos: int, path: str, file_offset: int) -> tuple[Entry, int]:
    """Parse and verify the entry at ``buf[pos:]`` (both checksums, as ``entry_header`` says);
    return it and the max timestamp of its batch."""
    size, rel, broker_ts, count, max_ts = entry_header(buf, pos, path, file_offset, len(buf))
    at, end_meta = file_offset + pos, pos + ENTRY_METADATA.size
    batch = memoryview(buf)[end_meta : end_meta + size]  # a view: the entry's bytes are not copied again
    if not crc_matches(batch):  # the batch's own CRC covers all the metadata's does not
        raise CorruptRecordError(f"{path}: record batch of the entry at byte {at} fails its CRC-32C")
    (records,) = _I32.unpack_from(batch, RECORDS_COUNT_OFFSET)
    if records != count:
        raise CorruptRecordError(f"{path}: entry at byte {at} says {count} records, its batch {records}")
    return Entry(at, rel, broker_ts, count, batch), max_ts


@dataclass(frozen=True)
class EntryRun:
    """Consecutive entries read and verified together, for a reader that decodes them together:
    the bytes read and where each entry's batch lies in them (``baseOffset`` = relative index).
    Its length is its number of entries."""

    data: Buffer
    spans: array  # int64 pairs: position of the batch in ``data``, its size
    end_index: int  # the relative index after the run's last record

    def __len__(self) -> int:
        return len(self.spans) // 2


def verify_run(data: Buffer, rows: Sequence[EntryInfo], start: int, path: str) -> EntryRun:
    """Verify the entries of table ``rows``, which ``data`` holds from byte ``start`` of the file on,
    as ``parse_entry`` does (both checksums, the batch's framing and record count) and against the
    rows' relative indexes, in one call for the run (it runs once per entry a Spark task reads).
    The first entry amiss is handed to ``parse_entry``, whose error says what."""
    spans = array("q", bytes(16 * len(rows)))
    good, end_index = verify_entries(data, rows, start, spans)
    if good < len(rows):
        row = rows[good]
        entry, _ = parse_entry(memoryview(data), row.position - start, path, start)  # raises, saying what
        check_table_row(entry, row, path)
        raise CorruptRecordError(f"{path}: entry at byte {row.position} fails verification")  # the twins disagree
    return EntryRun(data, spans, end_index)


def verify_entries_reference(data: Buffer, rows: Sequence[EntryInfo], start: int, spans: array) -> tuple[int, int]:
    """The pure-Python twin of ``_centries.verify_entries``: how many of ``rows``, from the first,
    hold good entries (``spans`` gets each one's batch position in ``data`` and size), and the
    relative index after the last good one's records. One unpack and three CRCs an entry."""
    view = memoryview(data)
    unpack, crc32 = _METADATA_AND_HEADER.unpack_from, crc32c.crc32c
    size = len(view)
    end_index = 0
    for good, row in enumerate(rows):
        pos = row.position - start
        meta_end = pos + ENTRY_METADATA.size
        try:
            fields = unpack(view, pos) if pos >= 0 else ()
        except struct.error:
            fields = ()
        # magic, batch size, relative index, broker ts, records, crc | the batch header's fields
        if not (
            fields
            and fields[0] == ENTRY_MAGIC
            and fields[1] >= HEADER_SIZE
            and (end := meta_end + fields[1]) <= size
            and fields[9] == MAGIC
            and fields[7] + LOG_OVERHEAD == fields[1]
            and fields[18] == fields[4]
            and fields[2] == row.relative_index
            and crc32(view[meta_end : meta_end + _BATCH_PREFIX], crc32(view[pos : meta_end - 4])) == fields[5]
            and crc32(view[meta_end + _BATCH_PREFIX : end]) == fields[10]
        ):
            return good, end_index
        spans[2 * good] = meta_end
        spans[2 * good + 1] = fields[1]
        end_index = fields[2] + fields[12] + 1  # after the batch's lastOffsetDelta
    return len(rows), end_index


def _verify_entries() -> Callable[[Buffer, Sequence[EntryInfo], int, array], tuple[int, int]]:
    """The compiled twin when it is built (and ``KOP_SPARK_NO_EXTENSIONS`` is not set), as the
    record codec chooses its own."""
    if not os.environ.get("KOP_SPARK_NO_EXTENSIONS"):
        try:
            from ._centries import verify_entries as compiled
        except ImportError:
            pass
        else:
            return compiled
    return verify_entries_reference


verify_entries = _verify_entries()


def check_table_row(entry: Entry, row: EntryInfo, path: str) -> None:
    """Raise ``CorruptRecordError`` unless ``entry`` has the relative index its table row gives it."""
    if entry.relative_index != row.relative_index:
        raise CorruptRecordError(
            f"{path}: entry at byte {row.position} has relative index {entry.relative_index}, "
            f"its table says {row.relative_index}"
        )


def scan_entries(fileio: FileIO, path: str, start: int, end: int) -> Iterator[Entry]:
    """Entries in ``[start, end)``, each verified whole (both checksums); raises
    ``CorruptRecordError`` at the first bad one."""
    for entry, _ in scan(fileio, path, start, end):
        yield entry


def scan_table_rows(fileio: FileIO, path: str, start: int, end: int) -> tuple[list[EntryInfo], int]:
    """The table rows of the entries in ``[start, end)`` and the bytes read for them: each entry's
    metadata and batch header are checked (as every read checks them), its records are skipped, not
    read: an open ledger of large batches is indexed without reading it whole."""
    full = fileio.full_path(path)
    # Where a read is a system call, read a little past each header; where it is a request to an
    # object store, read in large chunks.
    chunk = _HEADER_SCAN_CHUNK if fileio.supports_append else _SCAN_CHUNK
    rows, read = [], 0
    with fileio.open_input(path) as f:
        buf, buf_start, pos = b"", start, start
        while pos < end:
            if pos + ENTRY_METADATA.size + HEADER_SIZE > buf_start + len(buf):
                buf, buf_start = f.read_at(min(chunk, end - pos), pos), pos
                read += len(buf)
            size, rel, _, _, max_ts = entry_header(buf, pos - buf_start, full, buf_start, end - buf_start)
            rows.append(EntryInfo(pos, rel, max_ts))
            pos += ENTRY_METADATA.size + size
    return rows, read


def scan(fileio: FileIO, path: str, start: int, end: int) -> Iterator[tuple[Entry, int]]:
    """Entries in ``[start, end)``, each verified whole; raises CorruptRecordError at the first bad one."""
    full = fileio.full_path(path)
    with fileio.open_input(path) as f:

        def fill(at: int, n: int) -> memoryview:
            # Never past ``end``: bytes after the confirmed length are not entries.
            return memoryview(f.read_at(min(n, end - at), at))

        buf = memoryview(b"")
        buf_start = start
        pos = start
        while pos < end:
            if pos + ENTRY_METADATA.size > buf_start + len(buf):
                buf, buf_start = fill(pos, _SCAN_CHUNK), pos
            if len(buf) < ENTRY_METADATA.size:
                raise CorruptRecordError(f"{full}: entry at byte {pos} is cut short (file ends at {pos + len(buf)})")
            (size,) = _I32.unpack_from(buf, pos - buf_start + 2)
            need = ENTRY_METADATA.size + max(size, 0)
            if pos - buf_start + need > len(buf) and size >= 0 and pos + need <= end:
                buf, buf_start = fill(pos, max(_SCAN_CHUNK, need)), pos
            entry, max_ts = parse_entry(buf, pos - buf_start, full, buf_start)
            yield entry, max_ts
            pos += entry.size
