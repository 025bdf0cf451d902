"""Checking a partition's ledgers against what its metadata confirms, as ``kafka-dump-log --verify``.

Every confirmed entry must be in its ledger file, whole (both checksums), in order, and within
the offsets the metadata gives the ledger; a sealed ledger's entry table must list exactly the
confirmed entries. What reads back intact from the start of a ledger is its *intact prefix*:
the part a repair keeps, as Kafka's log recovery keeps a segment up to its first bad batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import CorruptRecordError, StorageError
from .fileio import FileIO
from .ledger import FILE_HEADER, LedgerReader
from .ledger_entry import Entry, scan_entries


@dataclass(frozen=True)
class LedgerCheck:
    """What a check of one ledger found."""

    file: str
    base_offset: int
    confirmed_entries: int
    intact_entries: int  # entries from the start that read back whole and in order
    intact_end: int  # the offset after the last of them (the ledger's base when there is none)
    problem: str | None  # None when every confirmed entry is intact

    @property
    def ok(self) -> bool:
        return self.problem is None


def check_ledger(
    fileio: FileIO, file: str, base_offset: int, entries: int, records: int, length: int, sealed: bool
) -> LedgerCheck:
    """Check one ledger as the metadata records it (confirmed ``entries``, ``records`` offsets from
    ``base_offset``, ``length`` bytes, sealed or not)."""
    intact: list[Entry] = []
    problem = None
    try:
        for entry in intact_entries(fileio, file, length, sealed):
            if intact and entry.relative_index < intact[-1].relative_index + intact[-1].offset_span:
                raise CorruptRecordError(
                    f"{fileio.full_path(file)}: entry at byte {entry.position} goes back to "
                    f"relative index {entry.relative_index}"
                )
            if entry.relative_index + entry.offset_span > records:
                raise CorruptRecordError(
                    f"{fileio.full_path(file)}: entry at byte {entry.position} reaches past the "
                    f"{records} offsets the metadata gives the ledger"
                )
            intact.append(entry)
    except (CorruptRecordError, StorageError) as e:
        problem = str(e)
    if problem is None and len(intact) != entries:
        problem = (
            f"{fileio.full_path(file)}: the metadata confirms {entries} entries, the file holds "
            f"{len(intact)} intact ones"
        )
    end = base_offset + (intact[-1].relative_index + intact[-1].offset_span if intact else 0)
    return LedgerCheck(file, base_offset, entries, len(intact), end, problem)


def intact_entries(fileio: FileIO, file: str, length: int, sealed: bool) -> Iterator[Entry]:
    """The entries of a ledger's confirmed ``length``, each checked whole; raises at the first that
    is not. A sealed ledger's table must agree with what is found."""
    size = fileio.size(file)
    data_end = min(length, size)
    table = None
    if sealed:
        reader = LedgerReader(fileio, file, length, sealed=True)
        table = reader.table().rows
        data_end = reader.data_end
    for i, entry in enumerate(scan_entries(fileio, file, FILE_HEADER.size, data_end)):
        if table is not None and (i >= len(table) or table[i].position != entry.position):
            raise CorruptRecordError(
                f"{fileio.full_path(file)}: entry at byte {entry.position} is not in the sealed ledger's entry table"
            )
        yield entry
    if size < length:
        raise CorruptRecordError(
            f"{fileio.full_path(file)}: file of {size} bytes is shorter than its confirmed length {length}"
        )


def structure_problems(name: str, log_start: int, next_offset: int, ledgers: Sequence) -> list[str]:
    """What is wrong with the shape of a partition's metadata: offsets must run from the log
    start to the log end through the ledgers, each starting where the one before ends."""
    problems = []
    expected = ledgers[0].base_offset if ledgers else next_offset
    if ledgers and log_start < ledgers[0].base_offset:
        problems.append(f"{name}: log start offset {log_start} is before the first ledger's {ledgers[0].base_offset}")
    for ledger in ledgers:
        if ledger.base_offset != expected:
            problems.append(
                f"{name}: ledger {ledger.file} starts at offset {ledger.base_offset}, "
                f"the ledger before it ends at {expected}"
            )
        expected = ledger.end_offset
    if expected != next_offset:
        problems.append(f"{name}: the ledgers end at offset {expected}, the log end offset is {next_offset}")
    return problems
