"""Staged ledgers: sealed ledgers written outside any partition (by Spark tasks, by Kafka
transactions), which a partition later takes whole, in the one CAS that gives them offsets
(``ManagedLedger.append_ledgers``). A transaction's outlive the server that wrote them: the next
takes them up (``staged_run``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..layout import staged_ledger_file, staged_marker_file
from ..record import RecordBatch
from .fileio import FileIO
from .ledger import FILE_HEADER, LedgerReader, LedgerWriter, recover
from .ledger_entry import EntryInfo
from .ledger_metadata import LedgerRecord


class StagedLedger(NamedTuple):
    """A sealed ledger written outside any managed ledger, waiting to be appended."""

    file: str
    ledger_id: int
    entries: int
    records: int
    length: int
    max_timestamp: int

    def record(self, file: str, base_offset: int, now: int) -> LedgerRecord:
        """This ledger as a partition's metadata records it, at ``file``, from ``base_offset`` on."""
        return LedgerRecord.new(
            self.ledger_id, file, base_offset, now, entries=self.entries, records=self.records,
            length=self.length, max_timestamp=self.max_timestamp,
        )  # fmt: skip


def new_ledger_id() -> int:
    """A ledger id no other writer picks: random, so writers need no coordination to name files."""
    return uuid.uuid4().int >> 65


class LedgerStager:
    """Writes one ledger that is not yet part of a partition: entries get relative indexes from 0,
    and ``finish`` seals it."""

    def __init__(
        self, fileio: FileIO, path: str, ledger_id: int | None = None, direct: bool = False, marker: str | None = None
    ):
        self.path = path
        self._fileio = fileio
        self._marker = marker  # written just before the ledger is (see ``task_stager``)
        ledger_id = new_ledger_id() if ledger_id is None else ledger_id
        self._writer = LedgerWriter.create(fileio, path, ledger_id, direct)
        self._rows: list[EntryInfo] = []
        self._records = 0

    @property
    def length(self) -> int:
        """Bytes written so far."""
        return self._writer.position

    def append(self, batches: Sequence[bytes | memoryview], broker_timestamp: int) -> None:
        """Write batches as the ledger's next entries, in one write."""
        if batches:
            self._rows += self._writer.append(batches, self._records, broker_timestamp)
            self._records = self._rows[-1].relative_index + RecordBatch(batches[-1]).offset_span

    @property
    def appendable(self) -> bool:
        """Whether ``sync`` makes what was appended durable and more may follow; else only
        ``finish`` stores the ledger, written whole."""
        return self._fileio.supports_append

    def sync(self) -> None:
        self._writer.sync()

    def finish(self) -> StagedLedger:
        if self._marker is not None:
            self._fileio.write_whole(self._marker, b"")
        length = self._writer.seal(self._rows, self._records)
        self._writer.close()
        max_ts = max((r.max_timestamp for r in self._rows), default=-1)
        return StagedLedger(self.path, self._writer.ledger_id, len(self._rows), self._records, length, max_ts)

    def discard(self) -> None:
        self._writer.close()
        self._fileio.delete(self.path)

    def abandon(self) -> None:
        """Close the file as it is, to another writer that took it up (``reseal``); what was
        appended is durable already (``sync``), so closing writes nothing."""
        self._writer.close()


def sealed_ledger(
    fileio: FileIO, ledger_path: Callable[[int], str], appends: Sequence[tuple[Sequence[bytes], int]]
) -> StagedLedger:
    """Write appends ((batches, broker timestamp) each) as a new sealed ledger at ``ledger_path(id)``.
    Its entries carry offsets relative to it, so a CAS that lost can place it at the new log end
    unchanged (how an object store's appends are written)."""
    ledger_id = new_ledger_id()
    stager = LedgerStager(fileio, ledger_path(ledger_id), ledger_id)
    for batches, broker_timestamp in appends:
        stager.append(batches, broker_timestamp)
    return stager.finish()


def task_stager(
    fileio: FileIO, ledger_path: Callable[[int], str], task_dir: str, ledger_id: int | None = None
) -> LedgerStager:
    """A ledger a task stages for a partition: in ``task_dir``, to be moved in when it is appended;
    on an object store (no rename) at its final name ``ledger_path(id)``, where it will stay, named
    first by a marker in ``task_dir`` (maintenance takes an unreferenced ledger for an orphan unless
    a marker names it, and deletes a gone job's marked ledgers only once it has condemned them).
    The ledger is built in memory there, and its marker written just before it: a task's many
    partitions then write theirs at once, when it finishes, not in turn as they are begun."""
    ledger_id = new_ledger_id() if ledger_id is None else ledger_id
    path = staged_path(fileio, ledger_path, task_dir, ledger_id)
    if fileio.supports_append:  # written whole and read only once appended: around the page cache
        return LedgerStager(fileio, path, ledger_id, direct=True)
    return LedgerStager(fileio, path, ledger_id, marker=staged_marker_file(task_dir, ledger_id))


def staged_path(fileio: FileIO, ledger_path: Callable[[int], str], task_dir: str, ledger_id: int) -> str:
    """Where ``task_stager`` writes ledger ``ledger_id``."""
    return staged_ledger_file(task_dir, f"{ledger_id:x}") if fileio.supports_append else ledger_path(ledger_id)


def reseal(fileio: FileIO, path: str) -> StagedLedger | None:
    """A staged ledger its writer left behind, as it stands: sealed already, or sealed now after its
    last whole entry (what follows was never synced, so never acknowledged). None if it has no
    entry (no file, not even a header, or nothing after it)."""
    if not fileio.exists(path) or fileio.size(path) < FILE_HEADER.size:
        return None
    found = recover(fileio, path)
    if not found.entries:
        return None
    last = found.entries[-1]
    records = last.relative_index + last.offset_span
    length = found.file_length
    if not found.sealed:
        writer = LedgerWriter.reopen(fileio, path, found.ledger_id, found.valid_length)
        try:
            length = writer.seal(found.rows, records)
        finally:
            writer.close()
    max_ts = max(r.max_timestamp for r in found.rows)
    return StagedLedger(path, found.ledger_id, len(found.rows), records, length, max_ts)


def staged_run(
    fileio: FileIO, ledger_path: Callable[[int], str], task_dir: str, ledger_id: Callable[[int], int]
) -> list[StagedLedger]:
    """The ledgers a writer that stopped staged with ``task_stager``, the n-th named
    ``ledger_id(n)``: those it wrote, each sealed (``reseal``), up to the first it had not. What
    it began of that one (a marker, a file with no entry) is removed, so it may be staged afresh."""
    found: list[StagedLedger] = []
    while True:
        named = ledger_id(len(found))
        path = staged_path(fileio, ledger_path, task_dir, named)
        ledger = reseal(fileio, path)
        if ledger is None:
            fileio.delete(path)
            if not fileio.supports_append:
                fileio.delete(staged_marker_file(task_dir, named))
            return found
        found.append(ledger)


def last_batches(fileio: FileIO, ledgers: Sequence[StagedLedger], count: int) -> list[bytes]:
    """The last ``count`` batches (or fewer) of sealed staged ``ledgers``, in order: only those
    entries are read, through the ledgers' tables."""
    batches: list[bytes] = []
    for ledger in reversed(ledgers):
        if len(batches) >= count:
            break
        reader = LedgerReader(fileio, ledger.file, ledger.length, sealed=True)
        first = max(ledger.entries - (count - len(batches)), 0)
        batches[:0] = [bytes(e.batch) for e in reader.read(first, ledger.length)]
    return batches
