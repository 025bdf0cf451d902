"""The sealed ledgers a rewrite (compaction, merging, repair) writes to take the place of others.

They span the offsets of the ledgers they replace, keep every offset as it was, and nothing refers
to them until the rewrite swaps them in. A rewrite's output is cut into ledgers of about a target
size, as Kafka's cleaner groups its output into segments: on an object store a ledger is written
whole from memory, so a compacted log of any size never has to fit in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .ledger import LedgerWriter, delete_quietly
from .ledger_entry import EntryInfo
from .ledger_metadata import LedgerRecord

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger

# An entry to write: (batch, index relative to the first ledger's base, broker timestamp, records kept).
NewEntry = tuple[bytes | memoryview, int, int, int]


class _NewLedger:
    """One ledger being written, from offset ``base``."""

    def __init__(self, log: ManagedLedger, base: int):
        self.log, self.base = log, base
        self.writer: LedgerWriter = log.create_ledger_file()
        self.rows: list[EntryInfo] = []

    def append(self, batch: bytes | memoryview, offset: int, broker_timestamp: int) -> None:
        self.rows += self.writer.append([batch], offset - self.base, broker_timestamp)

    def seal(self, end: int, created_ms: int, modified_ms: int) -> LedgerRecord:
        """Sealed, spanning offsets up to ``end``."""
        length = self.writer.seal(self.rows, end - self.base)
        self.writer.close()
        return LedgerRecord.new(
            self.writer.ledger_id, self.writer.path, self.base, created_ms, entries=len(self.rows),
            records=end - self.base, length=length, max_timestamp=max(r.max_timestamp for r in self.rows),
            modified_ms=modified_ms,
        )  # fmt: skip

    def abandon(self) -> None:
        self.writer.close()
        delete_quietly(self.log.fileio, self.writer.path)


def write_ledgers(
    log: ManagedLedger,
    base: int,
    end: int,
    entries: Iterable[NewEntry],
    created_ms: int,
    modified_ms: int,
    target_bytes: int | None = None,
) -> tuple[list[LedgerRecord], int]:
    """Sealed ledgers of ``entries`` spanning offsets ``[base, end)`` between them, a new one begun
    at an entry once the last holds ``target_bytes`` (None: one ledger); none when there are no
    entries. They are dated as the ledgers they replace (the oldest one's ``created_ms``, so that
    max.compaction.lag.ms counts from when their records came, not from the rewrite). Returns
    them and the records in them. On any failure none is left behind."""
    written: list[LedgerRecord] = []
    current: _NewLedger | None = None
    records = 0
    try:
        for batch, rel, broker_timestamp, count in entries:
            if current is not None and target_bytes is not None and current.writer.position >= target_bytes:
                written.append(current.seal(base + rel, created_ms, modified_ms))
                current = None
            if current is None:
                current = _NewLedger(log, base + rel if written else base)
            current.append(batch, base + rel, broker_timestamp)
            records += count
        if current is not None:
            written.append(current.seal(end, created_ms, modified_ms))
    except BaseException:
        if current is not None:
            current.abandon()
        for ledger in written:
            delete_quietly(log.fileio, ledger.file)
        raise
    return written, records
