"""What readers get: a view of a partition's log at one metadata version, and reads planned from it.

A ``PartitionView`` is immutable. The ``LedgerSlice``s it hands out carry everything needed to read
a ledger with no metadata store (file, confirmed length, sealed or not, offsets), so Spark ships
them to executors; a ``SliceReader`` reads them there.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter
from typing import NamedTuple

from ..errors import CorruptRecordError
from ..record import RecordBatch
from ..record.default_record_batch import with_base_offset
from .fileio import FileIO, open_fileio
from .ledger import EntryTable, IOStats, LedgerReader, Recovered, recover
from .ledger_entry import Entry, EntryRun
from .ledger_metadata import CleaningMark, LedgerRecord, LogMetadata
from .producer_state import ProducerEntry
from .read_ahead import ReadAhead


class ReadEntry(NamedTuple):
    """An entry read from a partition, with the absolute offset of its first record."""

    base_offset: int
    entry: Entry

    def batch_bytes(self) -> bytes:
        """The entry's batch as a FETCH hands it out: ``baseOffset`` patched to the absolute offset."""
        return with_base_offset(self.entry.batch, self.base_offset)

    def record_batch(self) -> RecordBatch:
        return RecordBatch(self.batch_bytes())


class LedgerSlice(NamedTuple):
    """What a reader needs to read one ledger with no metadata store: the file, its confirmed
    length, whether it is sealed, and the offsets it holds. Spark ships these to executors."""

    file: str
    length: int
    sealed: bool
    base_offset: int
    end_offset: int


class SliceReader:
    """Reads planned slices of the ledgers under a store root, with no metadata store."""

    def __init__(self, root: str, options: Mapping[str, str] | None = None, stats: IOStats | None = None):
        """``options``: object-store settings (endpoint, credentials) over the environment's."""
        self._fileio = open_fileio(root, options=options)
        self._stats = stats if stats is not None else IOStats()
        self._ahead = ReadAhead(self._opened, self._fileio.read_parallelism)

    def read_ahead(self, ledgers: Iterable[LedgerSlice]) -> None:
        """The ledgers to be read next, in order. Where the store serves many reads at once, each
        is opened before its turn: its entry table read, and a small ledger whole."""
        self._ahead.expect(ledgers)

    def close(self) -> None:
        self._ahead.close()

    def __enter__(self) -> SliceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _opened(self, ledger: LedgerSlice) -> tuple[LedgerReader, EntryTable]:
        reader = LedgerReader(self._fileio, ledger.file, ledger.length, ledger.sealed, self._stats)
        table = reader.table()
        reader.hold_if_small()  # its table may have come from the cache, and its entries are next
        return reader, table

    def read_runs(self, ledger: LedgerSlice, start: int, end: int, max_bytes: int = 8 << 20) -> Iterator[EntryRun]:
        """The entries of ``ledger`` holding offsets in ``[start, end)``, in runs of ``max_bytes`` at
        most, each verified whole; their batches' ``baseOffset`` is relative to ``ledger.base_offset``."""
        reader, table = self._ahead.get(ledger)
        k = max(table.find_entry(start - ledger.base_offset), 0)
        last = table.find_entry(end - 1 - ledger.base_offset)
        while k <= last:
            run = reader.read_run(k, max_bytes, last)
            yield run
            k += len(run)


def inspect_ledger_file(path: str, options: Mapping[str, str] | None = None) -> Recovered:
    """Every entry of a ledger file (a local path or an object-store URI) that reads back intact,
    and where and why reading stopped (``kop dump-ledger``): read as found, with no metadata."""
    directory, name = path.rsplit("/", 1) if "://" in path else os.path.split(os.path.abspath(path))
    return recover(open_fileio(directory, options=options), name)


def ledger_reader(fileio: FileIO, ledger: LedgerRecord, stats: IOStats) -> LedgerReader:
    return LedgerReader(fileio, ledger.file, ledger.length, ledger.sealed, stats)


@dataclass(frozen=True)
class PartitionView:
    """A partition's log at one metadata version: offsets ``[log_start_offset, log_end_offset)``
    and the ledgers holding them."""

    version: int
    log_start_offset: int
    log_end_offset: int
    ledgers: tuple[LedgerRecord, ...]
    _bases: tuple[int, ...] = field(repr=False, default=())
    _running_max_ts: tuple[int, ...] = field(repr=False, default=())
    producers: Mapping[int, ProducerEntry] = field(repr=False, compare=False, default_factory=dict)  # idempotent ones
    cleaned_offset: int = 0  # where the last compaction reached
    cleaning: CleaningMark | None = None  # a compaction under way
    created_ms: int = 0  # when the log was made

    @classmethod
    def of(cls, meta: LogMetadata, version: int) -> PartitionView:
        ledgers = tuple(meta.ledgers)
        # built by C loops: a cold reader pays this for every ledger of the partition
        running = tuple(accumulate(map(attrgetter("max_timestamp"), ledgers), max, initial=-(1 << 63)))[1:]
        bases = tuple(map(attrgetter("base_offset"), ledgers))
        return cls(
            version, meta.log_start_offset, meta.next_offset, ledgers, bases, running, meta.kafka_producers,
            meta.cleaned_offset, meta.cleaning, meta.created_ms,
        )  # fmt: skip

    def ledger_for_offset(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def ledger_for_timestamp(self, timestamp: int) -> int:
        return bisect.bisect_left(self._running_max_ts, timestamp)

    def slices(self, start: int, end: int) -> list[LedgerSlice]:
        """The ledgers holding offsets in ``[start, end)``."""
        out = []
        for ledger in self.ledgers[max(self.ledger_for_offset(start), 0) :]:
            if ledger.base_offset >= end:
                break
            if ledger.end_offset > start and ledger.entries:
                out.append(
                    LedgerSlice(ledger.file, ledger.length, ledger.sealed, ledger.base_offset, ledger.end_offset)
                )
        return out

    def estimated_bytes(self, start: int, end: int) -> int:
        """Bytes of ``[start, end)``, prorated within each ledger (for ``maxBytesPerTrigger``)."""
        total = 0
        for ledger in self.ledgers[max(self.ledger_for_offset(start), 0) :]:
            if ledger.base_offset >= end:
                break
            lo, hi = max(start, ledger.base_offset), min(end, ledger.end_offset)
            if hi > lo and ledger.records:
                total += ledger.length * (hi - lo) // ledger.records
        return total

    @property
    def size_bytes(self) -> int:
        return sum(l.length for l in self.ledgers)

    # -- reads -------------------------------------------------------------------------------

    def read(
        self, fileio: FileIO, offset: int, max_bytes: int, max_records: int | None = None, stats: IOStats | None = None
    ) -> list[ReadEntry]:
        """Entries from the one holding ``offset`` on, within one ledger: at least one, then more
        within ``max_bytes``, and no more than needed to cover ``max_records`` records. Offsets
        that compaction emptied are stepped over. Empty only when nothing is left at or after
        ``offset``, which must be in ``[log_start_offset, log_end_offset)``."""
        stats = stats if stats is not None else IOStats()
        for i in range(self.ledger_for_offset(offset), len(self.ledgers)):
            ledger = self.ledgers[i]
            reader = ledger_reader(fileio, ledger, stats)
            table = reader.table()
            rel = max(offset - ledger.base_offset, 0)
            last = None if max_records is None else table.find_entry(rel + max_records - 1)
            k = max(table.find_entry(rel), 0)
            while k < len(table):
                entries = reader.read(k, max_bytes, None if last is None else max(last, k))
                wanted = [e for e in entries if e.relative_index + e.offset_span > rel]
                if wanted:
                    return [ReadEntry(ledger.base_offset + e.relative_index, e) for e in wanted]
                k += len(entries)
        return []

    def entry_for_timestamp(self, fileio: FileIO, timestamp: int, stats: IOStats | None = None) -> ReadEntry | None:
        """The first entry whose batch, or one before it, reaches ``timestamp``; None if none does."""
        i = self.ledger_for_timestamp(timestamp)
        if i >= len(self.ledgers):
            return None
        ledger = self.ledgers[i]
        reader = ledger_reader(fileio, ledger, stats if stats is not None else IOStats())
        table = reader.table()
        k = table.find_timestamp(timestamp)
        if k >= len(table):
            raise CorruptRecordError(
                f"{fileio.full_path(ledger.file)}: no entry reaches timestamp {timestamp} "
                f"although the managed ledger records {ledger.max_timestamp} for this ledger"
            )
        entry = reader.read(k, 0)[0]
        return ReadEntry(ledger.base_offset + entry.relative_index, entry)
