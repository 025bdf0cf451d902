"""The log cleaner: compaction and merging, which rewrite ledgers without changing any offset.

Both write a new sealed ledger that nothing refers to yet, then ``swap`` it for the run of ledgers
it replaces, in one CAS that checks the run is still there unchanged; the old files go to the
trash. A lost race (retention, another cleaner, a fenced writer's seal) only wastes the new file.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..errors import FileMissingError, HousekeepingStoppedError, KopError, ManagedLedgerDeletedError, OrphanRemovedError
from ..record import RecordBatch
from ..record.compacted_batch import thinned
from .ledger import delete_quietly
from .ledger_entry import Entry, EntryInfo
from .ledger_metadata import OPEN, LedgerRecord, LogMetadata
from .offset_map import OffsetMap
from .read_plan import PartitionView, ReadEntry, ledger_reader

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger

# Merging in passing: ledgers are tiered by size (below 64 KiB, below 1 MiB); a run of
# ``merge_in_passing`` adjacent ledgers of one tier becomes one ledger of about the next tier, so
# every record is copied a couple of times at most and a run costs a writer at most a few MiB.
_TIER_BASE = 64 << 10
_TIER_FACTOR = 16
_TIERS_MERGED_IN_PASSING = 2

# An entry to write: (batch, index relative to the new ledger, broker timestamp, records kept).
NewEntry = tuple[bytes | memoryview, int, int, int]

log = logging.getLogger(__name__)


def _tier(length: int) -> int:
    return 0 if length < _TIER_BASE else int(math.log(length / _TIER_BASE, _TIER_FACTOR)) + 1


class _Stale(Exception):
    """The run to replace changed since it was read."""


class LogCleaner:
    """Compaction and merging of one managed ledger's ledgers."""

    def __init__(self, log: ManagedLedger):
        self._log = log

    def compact(self, stop: threading.Event | None = None) -> int | None:
        """Keep only the latest record of each key (and tombstones younger than
        ``delete_retention_ms``), as Kafka's log cleaner does, without changing any offset.

        The whole log is rewritten into one sealed ledger that keeps the offsets of the records it
        keeps; the offsets in between simply hold nothing any more. The open tail is sealed (or
        fenced) first so that it is compacted too. Returns the records kept, or None when the log
        changed under the compaction (another compaction or retention won; nothing is lost).
        ``stop`` set meanwhile raises ``HousekeepingStoppedError``, the log left as it was.
        """
        ml = self._log
        with ml.lock:
            ml.apply(ml.close_tail)
            view = ml.view()
            return self._compact(list(view.ledgers), stop) if view.ledgers else 0

    def clean(self, stop: threading.Event | None = None) -> int | None:
        """What Kafka's log cleaner does in the background: compact the ledgers no writer holds
        open once ``min_cleanable_dirty_ratio`` of their bytes came after the last compaction.
        A writer is not held up: the rewrite takes no lock, and its swap checks the ledgers are
        still those it read. Returns the records kept, or None when none was due (or a race lost)."""
        view = self._log.view()
        run = _cleanable(view)
        dirty = sum(l.length for l in run if l.end_offset > view.cleaned_offset)
        if not dirty or dirty < self._log.config.min_cleanable_dirty_ratio * sum(l.length for l in run):
            return None
        return self._compact(run, stop)

    def _compact(self, run: list[LedgerRecord], stop: threading.Event | None) -> int | None:
        ml = self._log
        end = run[-1].end_offset
        log.info(
            "%s: compacting offsets %d to %d (%d bytes)", ml.name, run[0].base_offset, end, sum(l.length for l in run)
        )
        return self._replace(run, self._compacted_entries(run, stop), ml.clock.now_ms(), cleaned_to=end)

    def _compacted_entries(self, run: list[LedgerRecord], stop: threading.Event | None) -> Iterator[NewEntry]:
        """Two passes, as Kafka's cleaner: the offset map of the run, then the records it keeps (so
        memory holds the keys, not the log). A batch keeping none is skipped, one keeping all is
        copied as it is, and one keeping some is thinned to those, their bytes as they were."""
        base = run[0].base_offset
        offsets = OffsetMap(self._log.clock.now_ms() - self._log.config.delete_retention_ms)
        for ledger, e in self._entries(run, stop):
            offsets.add(RecordBatch(e.batch), ledger.base_offset + e.relative_index)
        offsets.seal()
        for ledger, e in self._entries(run, stop):
            first = ledger.base_offset + e.relative_index
            header = RecordBatch(e.batch)
            kept = offsets.kept(first, first + header.last_offset_delta)
            if len(kept) == header.record_count:
                yield e.batch, first - base, e.broker_timestamp, len(kept)
            elif kept:
                yield thinned(ReadEntry(first, e).record_batch(), kept), first - base, e.broker_timestamp, len(kept)

    def _entries(self, run: list[LedgerRecord], stop: threading.Event | None) -> Iterator[tuple[LedgerRecord, Entry]]:
        """Each entry of the run with its ledger, read 8 MiB at a time. ``stop`` is looked at before
        each entry, so that a shutdown waits for one entry's work at most."""
        for ledger in run:
            reader = ledger_reader(self._log.fileio, ledger, self._log.stats)
            k, n = 0, len(reader.table())
            while k < n:
                read = reader.read(k, 8 << 20)
                for e in read:
                    if stop is not None and stop.is_set():
                        log.info("%s: rewrite stopped, the log left as it was", self._log.name)
                        raise HousekeepingStoppedError(f"{self._log.name}: rewrite stopped")
                    yield ledger, e
                k += len(read)

    def merge_ledgers(self, target_bytes: int, stop: threading.Event | None = None) -> int:
        """Rewrite runs of adjacent small ledgers as one ledger per run of up to ``target_bytes``,
        without changing any offset: entries keep their batches byte for byte, only their relative
        indexes move to the new ledger's base. Ledgers of ``target_bytes / 2`` or more are left as
        they are, so a ledger is rewritten a few times at most. Closed ledgers that were never
        sealed (their writer died) come out sealed. Returns how many ledgers went away."""
        runs: list[list[LedgerRecord]] = [[]]
        for ledger in self._log.view().ledgers:
            small = ledger.state != OPEN and ledger.length < target_bytes // 2
            if not small or sum(l.length for l in runs[-1]) + ledger.length > target_bytes:
                runs.append([])
            if small:
                runs[-1].append(ledger)
        return sum(len(run) - 1 for run in runs if len(run) > 1 and self._merge(run, stop))

    def merge_in_passing(self) -> None:
        """Keep the ledger list short when many writers take turns (each turn fences the last
        writer's ledger and starts a new one): merge a run of small ledgers of one size tier.
        The append this follows is already confirmed, so a failure here is only logged."""
        wanted = self._log.config.merge_in_passing
        meta = self._log.last_known
        if wanted < 2 or meta is None:
            return
        run = _small_run(meta, wanted)
        if run is None:
            return
        try:
            self._merge(run)
        except (KopError, OSError) as e:
            log.warning(
                "%s: merging %d small ledgers in passing failed (the append stands): %s", self._log.name, len(run), e
            )

    def _merge(self, run: list[LedgerRecord], stop: threading.Event | None = None) -> bool:
        base = run[0].base_offset

        entries = (
            (e.batch, ledger.base_offset - base + e.relative_index, e.broker_timestamp, e.record_count)
            for ledger, e in self._entries(run, stop)
        )
        return self._replace(run, entries, max(l.modified_ms for l in run)) is not None

    def _replace(
        self, run: list[LedgerRecord], entries: Iterator[NewEntry], modified_ms: int, cleaned_to: int = 0
    ) -> int | None:
        """Write ``entries`` as the ledger that replaces ``run`` and swap it in: the records kept,
        or None when retention or another cleaner replaced the run first (and the files it was
        reading may have gone with it). The partition's lock is held for the swap only, so writers
        are not held up meanwhile."""
        try:
            new, kept = self.write_ledger(run[0].base_offset, run[-1].end_offset, entries, modified_ms)
        except FileMissingError:
            if _holds(self._log.view().ledgers, run):
                raise  # damage, not a race
            return None
        with self._log.lock:
            return kept if self.swap(run, new, cleaned_to) else None

    def write_ledger(
        self, base: int, end: int, entries: Iterator[NewEntry], modified_ms: int
    ) -> tuple[LedgerRecord | None, int]:
        """A sealed ledger of ``entries`` spanning offsets ``[base, end)``, not yet referred to by
        anything; None when there are no entries. Returns it and the records in it."""
        ml = self._log
        writer = ml.create_ledger_file()
        try:
            rows: list[EntryInfo] = []
            records = 0
            for batch, rel, broker_ts, count in entries:
                rows += writer.append([batch], rel, broker_ts)
                records += count
            if not rows:
                writer.close()
                delete_quietly(ml.fileio, writer.path)
                return None, 0
            length = writer.seal(rows, end - base)
            writer.close()
        except BaseException:
            writer.close()
            delete_quietly(ml.fileio, writer.path)
            raise
        new = LedgerRecord.new(
            writer.ledger_id, writer.path, base, ml.clock.now_ms(), entries=len(rows), records=end - base,
            length=length, max_timestamp=max(r.max_timestamp for r in rows), modified_ms=modified_ms,
        )  # fmt: skip
        return new, records

    def swap(self, run: list[LedgerRecord], new: LedgerRecord | None, cleaned_to: int = 0) -> bool:
        """Replace ``run`` (adjacent ledgers, as a view saw them) by ``new`` in one CAS, if they
        are still there unchanged; ``new`` None drops their offsets altogether. The old files go
        to the trash. False (and ``new`` deleted) when retention, another cleaner or a fenced
        writer's seal got there first, or ``new`` was condemned as an orphan. ``cleaned_to``: where
        the compaction that made ``new`` reached."""
        delay = self._log.config.file_delete_delay_ms

        def change(meta: LogMetadata, now: int) -> LogMetadata:
            if not _holds(meta.ledgers, run):
                raise _Stale()
            at = meta.find(run[0].id)
            meta.replace_run(at, len(run), new, now + delay)
            meta.cleaned_offset = max(meta.cleaned_offset, cleaned_to)
            return meta

        try:
            self._log.apply(change)
        except (_Stale, OrphanRemovedError, ManagedLedgerDeletedError) as e:
            if new is not None:  # known not to be referred to, nor ever to be
                delete_quietly(self._log.fileio, new.file)
            if isinstance(e, ManagedLedgerDeletedError):  # the topic went meanwhile
                raise
            return False
        return True


def _holds(ledgers: Sequence[LedgerRecord], run: list[LedgerRecord]) -> bool:
    """Whether ``ledgers`` still hold ``run`` as it was read, in a row."""
    at = next((i for i, l in enumerate(ledgers) if l.id == run[0].id), -1)
    return at >= 0 and [l.key() for l in ledgers[at : at + len(run)]] == [l.key() for l in run]


def _cleanable(view: PartitionView) -> list[LedgerRecord]:
    """The ledgers before the first one a writer holds open (Kafka's cleaner leaves the active segment)."""
    run = []
    for ledger in view.ledgers:
        if ledger.state == OPEN:
            break
        run.append(ledger)
    return run


def _small_run(meta: LogMetadata, wanted: int) -> list[LedgerRecord] | None:
    """The newest run of ``wanted`` adjacent small ledgers of one size tier, oldest first."""
    run: list[LedgerRecord] = []  # newest first
    for ledger in reversed(meta.ledgers):
        tier = _tier(ledger.length)
        small = ledger.state != OPEN and tier < _TIERS_MERGED_IN_PASSING
        if small and (not run or tier == _tier(run[-1].length)):
            run.append(ledger)
        else:
            run = [ledger] if small else []
        if len(run) == wanted:
            return run[::-1]
    return None
