"""Ledgers: append-only files of entries, written by one writer and then sealed.

A ledger is BookKeeper's unit of storage. Here it is one file (format in docs/ledger-format.md)::

    file header | entry | entry | ... | [entry table | trailer]      (table and trailer once sealed)

An entry (``ledger_entry``) is broker entry metadata followed by one Kafka v2 record batch.

The absolute offset of a record is ``ledger base offset + entry relative index + i``; the base
offset lives in the managed ledger, not here, so committing a ledger to a partition never rewrites
it (KIP-31's relative offsets, one level up). On disk a batch's ``baseOffset`` holds the relative
index; readers patch in the absolute one.

A sealed ledger ends with an entry table (position, relative index, max timestamp per entry) so
an offset or a timestamp is found by binary search. Ledgers not sealed (still open, or closed by
another writer's fencing) are indexed by scanning their entry headers up to the confirmed length;
the result is cached and extended incrementally.
"""

from __future__ import annotations

import bisect
import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import crc32c

from ..errors import CorruptRecordError
from ..record.codec import Buffer
from ..record.default_record_batch import (
    LAST_OFFSET_DELTA_OFFSET,
)
from .fileio import FileIO, NewFile
from .ledger_entry import (
    ENTRY_METADATA,
    Entry,
    EntryInfo,
    EntryRun,
    check_table_row,
    entry_parts,
    parse_entry,
    scan,
    scan_table_rows,
    verify_run,
)

FILE_MAGIC = b"KOPL"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct(">4sHHqI")  # magic, version, flags, ledger id, crc
TABLE_ROW = struct.Struct(">qqq")  # position, relative index, max timestamp
TRAILER = struct.Struct(">qiqII4s")  # table position, entries, records, table crc, trailer crc, magic
TRAILER_MAGIC = b"KOPE"
_I32 = struct.Struct(">i")

log = logging.getLogger(__name__)


class EntryTable:
    """A ledger's entry rows with their search keys: relative indexes, and the running maximum of
    timestamps (timestamps need not grow, so that is what Kafka's time index searches too)."""

    __slots__ = ("relative_indexes", "rows", "running_max_ts")

    def __init__(self, rows: list[EntryInfo]):
        self.rows = rows
        self.relative_indexes = [r.relative_index for r in rows]
        running, top = [], -(1 << 63)
        for r in rows:
            top = r.max_timestamp if r.max_timestamp > top else top
            running.append(top)
        self.running_max_ts = running

    def __len__(self) -> int:
        return len(self.rows)

    def find_entry(self, relative_index: int) -> int:
        """Index of the row whose entry holds ``relative_index``."""
        return bisect.bisect_right(self.relative_indexes, relative_index) - 1

    def find_timestamp(self, timestamp: int) -> int:
        """Index of the first row whose entry reaches ``timestamp``; ``len(self)`` if none does."""
        return bisect.bisect_left(self.running_max_ts, timestamp)

    def extended(self, more: list[EntryInfo]) -> EntryTable:
        return EntryTable(self.rows + more) if more else self


@dataclass
class IOStats:
    """Counters of what reads cost; tests assert on them instead of on time."""

    entries_read: int = 0
    bytes_read: int = 0
    tables_loaded: int = 0
    entries_scanned: int = 0


def ledger_file_header(ledger_id: int) -> bytes:
    head = struct.pack(">4sHHq", FILE_MAGIC, FORMAT_VERSION, 0, ledger_id)
    return head + struct.pack(">I", crc32c.crc32c(head))


class LedgerWriter:
    """The one writer of a ledger file."""

    def __init__(self, fileio: FileIO, path: str, ledger_id: int, file: NewFile):
        self.fileio = fileio
        self.path = path
        self.ledger_id = ledger_id
        self._file = file

    @classmethod
    def create(cls, fileio: FileIO, path: str, ledger_id: int, direct: bool = False) -> LedgerWriter:
        """A new ledger file; ``direct``: one written whole, then read by others (``FileIO.create``)."""
        f = fileio.create(path, direct)
        try:
            f.write(ledger_file_header(ledger_id))
        except BaseException:
            f.close()
            delete_quietly(fileio, path)  # nobody refers to it yet
            raise
        return cls(fileio, path, ledger_id, f)

    @classmethod
    def reopen(cls, fileio: FileIO, path: str, ledger_id: int, length: int) -> LedgerWriter:
        """Resume a ledger this writer owns, dropping anything after its confirmed ``length``."""
        return cls(fileio, path, ledger_id, fileio.reopen(path, length))

    @property
    def position(self) -> int:
        return self._file.position

    def append(
        self, batches: Sequence[bytes | memoryview], first_relative_index: int, broker_timestamp: int
    ) -> list[EntryInfo]:
        """Write batches as consecutive entries (not yet durable: call ``sync``)."""
        parts: list = []
        rows = []
        rel = first_relative_index
        position = self._file.position
        for batch in batches:
            pieces, max_ts = entry_parts(batch, rel, broker_timestamp)
            rows.append(EntryInfo(position, rel, max_ts))
            parts += pieces
            position += ENTRY_METADATA.size + len(batch)
            rel += _I32.unpack_from(batch, LAST_OFFSET_DELTA_OFFSET)[0] + 1
        self._file.write_parts(parts)
        return rows

    def sync(self) -> None:
        self._file.sync()

    def truncate(self, length: int) -> None:
        self._file.truncate(length)

    def rewind(self, length: int) -> None:
        """Make ``length`` (a confirmed length) the end of the file, dropping whatever an
        unconfirmed or interrupted write left after it; a no-op when nothing did."""
        if self._file.position != length or self._file.torn:
            self._file.truncate(length)

    def seal(self, rows: Sequence[EntryInfo], record_count: int) -> int:
        """Append the entry table and trailer and sync; return the sealed file's length."""
        table = b"".join(TABLE_ROW.pack(*r) for r in rows)
        table_position = self._file.position
        head = struct.pack(">qiqI", table_position, len(rows), record_count, crc32c.crc32c(table))
        trailer = head + struct.pack(">I", crc32c.crc32c(head)) + TRAILER_MAGIC
        self._file.write(table + trailer)
        self._file.sync()
        return self._file.position

    def close(self) -> None:
        self._file.close()


def delete_quietly(fileio: FileIO, path: str) -> None:
    """Delete a file nothing refers to; should that fail, maintenance removes it later."""
    try:
        fileio.delete(path)
    except OSError as e:
        log.warning("cannot delete unreferenced file %s (maintenance will): %s", path, e)


_CacheKey = tuple[object, ...]  # (root, path, sealed or scanned, ...): see LedgerReader.table


class _TableCache:
    """Entry tables by ledger file: a sealed one is immutable; an open one is extended as it grows.

    Sealed and scanned tables are kept under different keys: a scan covers a length, not a table."""

    def __init__(self, capacity: int = 4096):
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[_CacheKey, tuple[int, EntryTable]] = OrderedDict()

    def get(self, key: _CacheKey) -> tuple[int, EntryTable] | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: _CacheKey, covered_length: int, table: EntryTable) -> None:
        with self._lock:
            self._items[key] = (covered_length, table)
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


_TABLES = _TableCache()


@dataclass
class LedgerReader:
    """Reads the confirmed part of one ledger: ``length`` bytes, with or without a sealed table."""

    fileio: FileIO
    path: str
    length: int
    sealed: bool
    stats: IOStats = field(default_factory=IOStats)
    _data_end: int = field(default=0, init=False)
    _whole: bytes | None = field(default=None, init=False, repr=False)  # the file, where its table's read took it all

    def _full(self) -> str:
        return self.fileio.full_path(self.path)

    @property
    def data_end(self) -> int:
        """Where entries end: the table's position once sealed, else the confirmed length.
        Known once ``table()`` has been read."""
        return self._data_end

    def table(self) -> EntryTable:
        """The entry table; also fixes where entry data ends (the table's position once sealed)."""
        if self.sealed:
            key = ("sealed", self.fileio.uri, self.path)
            cached = _TABLES.get(key)
            if cached is None:
                table_position, rows = self._load_sealed_table()
                cached = (table_position, EntryTable(rows))
                _TABLES.put(key, *cached)
            self._data_end = cached[0]
            return cached[1]
        self._data_end = self.length
        key = ("open", self.fileio.uri, self.path)
        cached = _TABLES.get(key)
        if cached is None:
            covered, table = FILE_HEADER.size, EntryTable([])
        elif cached[0] > self.length:
            # Cached from a longer view than this (older) snapshot confirms: the entries it confirms
            # are the table's first rows (confirmed lengths fall between entries).
            rows = cached[1].rows
            return EntryTable(rows[: bisect.bisect_left(rows, self.length, key=lambda r: r.position)])
        else:
            covered, table = cached
        if covered < self.length:
            table = table.extended(self._scan_rows(covered, self.length))
            _TABLES.put(key, self.length, table)
        return table

    def hold_if_small(self) -> None:
        """Read the whole ledger now where that costs what a read of any part of it does
        (``FileIO.small_read_bytes``): its entries are then taken from what was read."""
        if self._whole is None and self.length <= self.fileio.small_read_bytes:
            whole = self.fileio.read_at(self.path, 0, self.length)
            if len(whole) != self.length:
                raise CorruptRecordError(f"{self._full()}: ledger ends before its confirmed length {self.length}")
            self.stats.bytes_read += len(whole)
            self._whole = whole

    def _load_sealed_table(self) -> tuple[int, list[EntryInfo]]:
        self.stats.tables_loaded += 1
        if self.length < FILE_HEADER.size + TRAILER.size:
            raise CorruptRecordError(
                f"{self._full()}: sealed ledger of {self.length} bytes is too short for its trailer"
            )
        # One read of the tail, as long as the backend reads at the cost of one: on an object store
        # it holds a small ledger's table, and its entries too, which a read then takes from it.
        tail_start = self.length - min(self.length, max(TRAILER.size, self.fileio.small_read_bytes))
        tail = self.fileio.read_at(self.path, tail_start, self.length - tail_start)
        if len(tail) != self.length - tail_start:
            raise CorruptRecordError(f"{self._full()}: sealed ledger ends before its confirmed length {self.length}")
        trailer = tail[-TRAILER.size :]
        table_pos, n, _records, table_crc, trailer_crc, magic = TRAILER.unpack(trailer)
        if magic != TRAILER_MAGIC or crc32c.crc32c(trailer[:24]) != trailer_crc:
            raise CorruptRecordError(f"{self._full()}: sealed ledger trailer is corrupt")
        if table_pos + n * TABLE_ROW.size + TRAILER.size != self.length:
            raise CorruptRecordError(f"{self._full()}: entry table does not fit the sealed ledger")
        if table_pos >= tail_start:
            table = tail[table_pos - tail_start : -TRAILER.size]
        else:
            table = self.fileio.read_at(self.path, table_pos, n * TABLE_ROW.size)
            self.stats.bytes_read += len(table)
        self.stats.bytes_read += len(tail)
        if crc32c.crc32c(table) != table_crc:
            raise CorruptRecordError(f"{self._full()}: entry table fails its checksum")
        if tail_start == 0:
            self._whole = tail
        return table_pos, [EntryInfo(*r) for r in TABLE_ROW.iter_unpack(table)]

    def _scan_rows(self, start: int, end: int) -> list[EntryInfo]:
        rows, read = scan_table_rows(self.fileio, self.path, start, end)
        self.stats.entries_scanned += len(rows)
        self.stats.bytes_read += read
        return rows

    def read(self, first_entry: int, max_bytes: int, last_entry: int | None = None) -> list[Entry]:
        """Read and verify entries from table row ``first_entry`` on (to ``last_entry`` at most):
        at least one, then more while their total size stays within ``max_bytes``."""
        rows, start, data = self._read_rows(first_entry, max_bytes, last_entry)
        entries, full = [], self._full()
        for row in rows:
            entry, _ = parse_entry(data, row.position - start, full, start)
            check_table_row(entry, row, full)
            entries.append(entry)
        self.stats.entries_read += len(entries)
        return entries

    def read_run(self, first_entry: int, max_bytes: int, last_entry: int | None = None) -> EntryRun:
        """``read``'s entries as one run, verified alike, for a reader that decodes them together
        (a Spark task): no Python object per entry."""
        rows, start, data = self._read_rows(first_entry, max_bytes, last_entry)
        run = verify_run(data, rows, start, self._full())
        self.stats.entries_read += len(run)
        return run

    def _read_rows(
        self, first_entry: int, max_bytes: int, last_entry: int | None
    ) -> tuple[list[EntryInfo], int, Buffer]:
        """The table rows from ``first_entry`` that ``read`` takes, where their bytes start in the
        file, and those bytes."""
        rows = self.table().rows
        data_end = self._data_end
        stop_row = len(rows) if last_entry is None else min(len(rows), last_entry + 1)
        start = rows[first_entry].position
        # More entries while they end within max_bytes: entry k ends where row k + 1 starts (the
        # last where the data ends), so those before the row before the first that starts past it.
        past = bisect.bisect_right(rows, start + max_bytes, lo=first_entry + 1, key=attrgetter("position"))
        fits = past if past == len(rows) and data_end - start <= max_bytes else past - 1
        last = max(first_entry + 1, min(stop_row, fits))
        stop = rows[last].position if last < len(rows) else data_end
        if self._whole is not None:
            data: Buffer = memoryview(self._whole)[start:stop]
        else:
            data = self.fileio.read_view(self.path, start, stop - start)
            self.stats.bytes_read += len(data)
        if len(data) != stop - start:
            raise CorruptRecordError(f"{self._full()}: ledger ends before its confirmed length {data_end}")
        return rows[first_entry:last], start, data


@dataclass
class Recovered:
    """What a scan of a ledger file found: its valid entries and where validity ended."""

    ledger_id: int
    rows: list[EntryInfo]
    entries: list[Entry]
    valid_length: int
    file_length: int
    sealed: bool
    error: str | None


def recover(fileio: FileIO, path: str) -> Recovered:
    """Scan a ledger from its header and stop at the first torn or corrupt entry.
    A sealed ledger is recognised by its trailer."""
    full = fileio.full_path(path)
    size = fileio.size(path)
    head = fileio.read_at(path, 0, FILE_HEADER.size)
    if len(head) < FILE_HEADER.size:
        raise CorruptRecordError(f"{full}: file of {size} bytes is too short for a ledger header")
    magic, version, _flags, ledger_id, crc = FILE_HEADER.unpack(head)
    if magic != FILE_MAGIC or crc32c.crc32c(head[:-4]) != crc:
        raise CorruptRecordError(f"{full}: not a kop ledger (bad header)")
    if version != FORMAT_VERSION:
        raise CorruptRecordError(f"{full}: ledger format version {version} is not supported (this is {FORMAT_VERSION})")
    end, sealed = size, False
    try:
        end = LedgerReader(fileio, path, size, sealed=True)._load_sealed_table()[0]
        sealed = True
    except CorruptRecordError:
        pass
    rows: list[EntryInfo] = []
    entries: list[Entry] = []
    error = None
    valid = FILE_HEADER.size
    try:
        for entry, max_ts in scan(fileio, path, FILE_HEADER.size, end):
            rows.append(EntryInfo(entry.position, entry.relative_index, max_ts))
            entries.append(entry)
            valid = entry.position + entry.size
    except CorruptRecordError as e:
        error = str(e)
        sealed = False
    return Recovered(ledger_id, rows, entries, valid, size, sealed, error)
