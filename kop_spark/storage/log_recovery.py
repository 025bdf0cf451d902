"""Checking a managed ledger against its files, and truncating it at its first damaged entry,
as Kafka's log recovery does (``log_check`` judges each ledger)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from ..errors import StorageError
from .ledger import delete_quietly
from .ledger_metadata import LedgerRecord, LogMetadata
from .log_check import LedgerCheck, check_ledger, intact_entries, structure_problems
from .managed_ledger import ManagedLedger
from .read_plan import PartitionView
from .rewritten_ledgers import write_ledgers


def check(ml: ManagedLedger) -> list[str]:
    """Everything wrong with a partition: metadata whose offsets do not run through its ledgers,
    and confirmed entries that are missing, torn or corrupt. Empty when all is well."""
    view = ml.view()
    problems = structure_problems(ml.name, view.log_start_offset, view.log_end_offset, view.ledgers)
    return problems + [c.problem for c in _check_ledgers(ml, view) if c.problem]


def _check_ledgers(ml: ManagedLedger, view: PartitionView) -> Iterator[LedgerCheck]:
    for l in view.ledgers:
        if l.entries:
            yield check_ledger(ml.fileio, l.file, l.base_offset, l.entries, l.records, l.length, l.sealed)


def repair(ml: ManagedLedger, dry_run: bool = False) -> tuple[int, int] | None:
    """Truncate the log at its first damaged entry: the intact entries before it stay (rewritten
    as a sealed ledger), everything after goes, and the log end moves back to the last intact
    offset. Idempotence records past the new end are forgotten, so their writers' retries append
    again. Returns the offsets dropped as ``(new end, old end)``, or None when there was nothing
    to repair; ``dry_run`` only says."""
    with ml.lock:
        view = ml.view()
        damaged = next((c for c in _check_ledgers(ml, view) if not c.ok), None)
        if damaged is None:
            if view.ledgers and view.ledgers[-1].end_offset < view.log_end_offset:
                end = view.ledgers[-1].end_offset
                return (end, view.log_end_offset) if dry_run else _truncate(ml, view, len(view.ledgers), None, end)
            return None
        if dry_run:
            return damaged.intact_end, view.log_end_offset
        at = next(i for i, l in enumerate(view.ledgers) if l.file == damaged.file)
        ledger = view.ledgers[at]
        kept = (
            (e.batch, e.relative_index, e.broker_timestamp, e.record_count)
            for e in islice(
                intact_entries(ml.fileio, ledger.file, ledger.length, ledger.sealed), damaged.intact_entries
            )
        )
        new, _ = write_ledgers(ml, ledger.base_offset, damaged.intact_end, kept, ledger.created_ms, ledger.modified_ms)
        return _truncate(ml, view, at, new[0] if new else None, damaged.intact_end)


def _truncate(ml: ManagedLedger, view: PartitionView, at: int, new: LedgerRecord | None, end: int) -> tuple[int, int]:
    replaced = [l.id for l in view.ledgers[at:]]

    def change(meta: LogMetadata, now: int) -> LogMetadata:
        if [l.id for l in meta.ledgers[at:]] != replaced or meta.next_offset != view.log_end_offset:
            raise StorageError(f"{ml.name}: the log changed while it was being repaired; run the repair again")
        meta.truncate(at, new, end, now + ml.config.file_delete_delay_ms)
        return meta

    try:
        ml.apply(change)
    except BaseException:
        if new is not None:
            delete_quietly(ml.fileio, new.file)
        raise
    return end, view.log_end_offset
