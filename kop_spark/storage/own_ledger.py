"""The ledger a managed ledger's writer owns: the one it appends to, at the tail of the log.

A writer creates its ledger in the CAS that adds it (fencing another writer's open tail at its
confirmed length), appends to it while it has room, and seals it when it rolls over, closes, or
finds it fenced by someone else. Every length it truncates or seals at comes from the metadata the
change is based on, never from what it remembers (see ``managed_ledger``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..record import RecordBatch
from .ledger import FILE_HEADER, LedgerReader, LedgerWriter, delete_quietly
from .ledger_entry import EntryInfo
from .ledger_metadata import CLOSED, OPEN, LedgerRecord, LogMetadata
from .staging import new_ledger_id

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger


class OwnLedger:
    def __init__(self, log: ManagedLedger):
        self._log = log
        self._writer: LedgerWriter | None = None
        self._rows: list[EntryInfo] = []  # every row written to our open ledger, confirmed or not
        self._sealed: int | None = None  # the ledger we last sealed, until the CAS recording it goes through

    @property
    def active(self) -> bool:
        return self._writer is not None

    def write(
        self, meta: LogMetadata, now: int, appends: Sequence[tuple[Sequence[bytes], int]]
    ) -> tuple[int, list[EntryInfo]]:
        """Write ``appends`` ((batches, broker timestamp) each) as the next entries of our tail
        ledger (made writable in ``meta`` first), then sync once; return the ledger's new length and
        the entries' rows, for the CAS to confirm."""
        writer = self._writable_tail(meta, now)
        rows: list[EntryInfo] = []
        relative = meta.ledgers[-1].records
        for batches, broker_ts in appends:
            rows += writer.append(batches, relative, broker_ts)
            relative += sum(RecordBatch(b).offset_span for b in batches)
        writer.sync()
        self._rows.extend(rows)
        return writer.position, rows

    def _writable_tail(self, meta: LogMetadata, now: int) -> LedgerWriter:
        """Make sure the tail ledger is our own open one, with room, positioned at its confirmed end."""
        self._resume_sealed(meta)
        tail = meta.tail
        writer = self._writer
        ours = tail is not None and tail.state == OPEN and tail.owner == self._log.writer_id
        if tail is not None and ours and writer is not None and writer.ledger_id == tail.id:
            del self._rows[tail.entries :]  # forget rows of appends that were never confirmed
            writer.rewind(tail.length)
            cfg = self._log.config
            if (
                tail.entries < cfg.max_entries_per_ledger
                and tail.length < cfg.max_bytes_per_ledger
                and now - tail.created_ms < cfg.max_ledger_age_ms
            ):
                return writer
            self._seal(meta, len(meta.ledgers) - 1)
        else:
            self._finish_fenced(meta)
            meta.fence_tail()  # the other writer stops at its confirmed length
        writer = self._writer = self.create_file()
        self._rows = []
        meta.add_ledger(
            LedgerRecord.new(
                writer.ledger_id, writer.path, meta.next_offset, now, length=FILE_HEADER.size, state=OPEN,
                owner=self._log.writer_id,
            )
        )  # fmt: skip
        return writer

    def _resume_sealed(self, meta: LogMetadata) -> None:
        """Take up again the open tail we sealed in an attempt whose CAS was lost (rolling over,
        say): only we wrote it, so it is sealed anew, where fencing it as another writer's would
        leave it without its entry table. The ledger that attempt made next is forgotten."""
        tail = meta.tail
        if tail is None or tail.state != OPEN or tail.id != self._sealed:
            return
        if self._writer is not None and self._writer.ledger_id == tail.id:
            return
        self._finish_fenced(meta)
        self._writer = LedgerWriter.reopen(self._log.fileio, tail.file, tail.id, tail.length)

    def _finish_fenced(self, meta: LogMetadata) -> None:
        """We own a ledger that another writer closed: seal its file at the closed length, so
        readers get a table instead of scanning, or forget it if it never got confirmed."""
        if self._writer is None:
            return
        at = meta.find(self._writer.ledger_id)
        if at >= 0 and meta.ledgers[at].state == CLOSED:
            self._seal(meta, at)
            return
        path = self._writer.path
        self.drop()
        if at < 0 and path not in meta.referenced():
            delete_quietly(self._log.fileio, path)  # created by an attempt whose CAS lost: nobody refers to it

    def close_tail(self, meta: LogMetadata) -> LogMetadata | None:
        """Close the open tail: sealed if it is ours, fenced otherwise."""
        tail = meta.tail
        if tail is None or tail.state != OPEN:
            return None
        if self._writer is not None and tail.id == self._writer.ledger_id:
            return self.seal_tail(meta)
        meta.fence_tail()
        return meta

    def seal_tail(self, meta: LogMetadata) -> LogMetadata:
        """Seal our ledger if it is the open tail, or finish it if another writer fenced it."""
        self._resume_sealed(meta)
        tail = meta.tail
        if self._writer is None or tail is None or tail.id != self._writer.ledger_id or tail.state != OPEN:
            self._finish_fenced(meta)
        else:
            self._seal(meta, len(meta.ledgers) - 1)
        return meta

    def _seal(self, meta: LogMetadata, at: int) -> None:
        """Seal our ledger file at its confirmed length, dropping any unconfirmed tail. The ledger
        comes from the metadata this change will CAS against, never from what we remember."""
        writer = self._writer
        assert writer is not None
        ledger = meta.ledgers[at]
        rows = self._rows[: ledger.entries]
        if len(rows) != ledger.entries or (rows and rows[-1].position >= ledger.length):
            # What we remember does not match what was confirmed: read the rows from the file.
            rows = LedgerReader(self._log.fileio, writer.path, ledger.length, False, self._log.stats).table().rows
        writer.rewind(ledger.length)
        meta.seal(at, writer.seal(rows, ledger.records))
        self._sealed = ledger.id
        self.drop()

    def create_file(self) -> LedgerWriter:
        ledger_id = new_ledger_id()
        return LedgerWriter.create(self._log.fileio, self._log.ledger_path(ledger_id), ledger_id)

    def drop(self) -> None:
        writer, self._writer, self._rows = self._writer, None, []
        if writer is not None:
            writer.close()
