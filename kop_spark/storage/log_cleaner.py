"""The log cleaner: compaction and merging, which rewrite ledgers without changing any offset.

Both write a new sealed ledger that nothing refers to yet, then ``swap`` it for the run of ledgers
it replaces, in one CAS that checks the run is still there unchanged; the old files go to the
trash. A lost race (retention, another cleaner, a fenced writer's seal) only wastes the new file.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..errors import FileMissingError, HousekeepingStoppedError, KopError, ManagedLedgerDeletedError, OrphanRemovedError
from ..record import RecordBatch
from ..record.compacted_batch import thinned
from .ledger import delete_quietly
from .ledger_entry import Entry
from .ledger_metadata import CLEANING_LEASE_MS, OPEN, CleaningMark, LedgerRecord, LogMetadata
from .offset_map import OffsetMap
from .read_plan import PartitionView, ReadEntry, ledger_reader
from .rewritten_ledgers import NewEntry, write_ledgers

if TYPE_CHECKING:
    from .managed_ledger import ManagedLedger

# Merging in passing: ledgers are tiered by size (below 64 KiB, below 1 MiB); a run of
# ``merge_in_passing`` adjacent ledgers of one tier becomes one ledger of about the next tier, so
# every record is copied a couple of times at most and a run costs a writer at most a few MiB.
_TIER_BASE = 64 << 10
_TIER_FACTOR = 16
_TIERS_MERGED_IN_PASSING = 2

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

        The whole log is rewritten into sealed ledgers of about ``target_ledger_bytes`` that keep
        the offsets of the records they keep; the offsets in between simply hold nothing any more.
        When more keys came since the last compaction than the offset map holds, it takes several
        passes, as ``clean`` does. The open tail is sealed (or
        fenced) first so that it is compacted too. Returns the records kept, or None when the log
        changed under the compaction (another compaction or retention won, or the topic was made
        again since its settings were read; nothing is lost).
        ``stop`` set meanwhile raises ``HousekeepingStoppedError``, the log left as it was.
        """
        ml = self._log
        with ml.lock:
            ml.apply(ml.close_tail)
            view = ml.view()
            if not ml.config.settings_cover(view.created_ms):
                return None
            return self._compact(list(view.ledgers), view.cleaned_offset, stop) if view.ledgers else 0

    def clean(self, stop: threading.Event | None = None, view: PartitionView | None = None) -> int | None:
        """What Kafka's log cleaner does in the background: compact the ledgers no writer holds
        open, and none holding records younger than ``min_compaction_lag_ms``, once
        ``min_cleanable_dirty_ratio`` of their bytes came after the last compaction, or the oldest
        of those is ``max_compaction_lag_ms`` old. A writer is not held up: the rewrite takes no
        lock, and its swap checks the ledgers are still those it read. An open ledger that is
        itself ``max_compaction_lag_ms`` old is closed first: Kafka rolls such an active segment
        at its next append, and this does not wait for one.
        Returns the records kept, or None when none was due (or a race lost). ``view``: the log's,
        if the caller has it."""
        ml = self._log
        config, now, view = ml.config, ml.clock.now_ms(), view if view is not None else ml.view()
        if not config.settings_cover(view.created_ms):
            return None  # the settings are an older topic's: this one was made again since
        if _overdue_tail(view, config.max_compaction_lag_ms, now):
            ml.apply(
                lambda meta, at: (
                    ml.close_tail(meta, at) if _overdue_tail(meta, config.max_compaction_lag_ms, at) else None
                )
            )
            view = ml.view()
        run = _cleanable(view, now - config.min_compaction_lag_ms if config.min_compaction_lag_ms else None)
        dirty = [l for l in run if l.end_offset > view.cleaned_offset]
        if not dirty:
            return None
        overdue = now - min(l.created_ms for l in dirty) >= config.max_compaction_lag_ms
        if not overdue and sum(l.length for l in dirty) < config.min_cleanable_dirty_ratio * sum(l.length for l in run):
            return None
        return self._compact(run, view.cleaned_offset, stop)

    def _compact(self, run: list[LedgerRecord], cleaned: int, stop: threading.Event | None) -> int | None:
        """Compact ``run`` in as many passes as the offset map needs to cover what came after
        ``cleaned``, each a rewrite of the whole run, as Kafka's cleaner does. The run is marked
        as being cleaned meanwhile, so that merges in passing leave it alone. None when the run
        changed first, or another compaction of it is under way."""
        end, lease = run[-1].end_offset, _Lease(self._log)
        try:
            lease.take(run)
            while True:
                dirty = max(cleaned, run[0].base_offset)
                done = self._compact_once(run, dirty, lease, stop)
                if done is None:
                    return None
                kept, reached = done
                if reached >= end:
                    return kept
                if reached <= dirty:  # a pass maps a batch at least: else this loop would never end
                    raise RuntimeError(f"{self._log.name}: a compaction pass mapped nothing past offset {dirty}")
                view = self._log.view()
                run, cleaned = [l for l in view.ledgers if l.base_offset < end], max(view.cleaned_offset, reached)
                if not run:
                    return kept  # retention took it meanwhile
        except _Stale:
            return None
        finally:
            lease.give_up()

    def _compact_once(
        self, run: list[LedgerRecord], dirty: int, lease: _Lease, stop: threading.Event | None
    ) -> tuple[int, int] | None:
        """One pass: the offset map of the run from offset ``dirty`` on, as far as it holds, then
        the run rewritten by it. Returns the records kept and where the map reached, or None when
        the log changed under the pass."""
        ml = self._log
        try:
            offsets, end = self._offset_map(run, dirty, lease, stop)
        except FileMissingError:
            if self._damaged(run):
                raise
            return None  # the run was replaced meanwhile: give way
        log.info(
            "%s: compacting offsets %d to %d (%d bytes) by the keys of offsets %d to %d",
            ml.name, run[0].base_offset, run[-1].end_offset, sum(l.length for l in run), dirty, end,
        )  # fmt: skip
        entries = self._compacted_entries(run, offsets, dirty, end, lease, stop)
        kept = self._replace(run, entries, ml.clock.now_ms(), lease.cleaner, end, ml.config.target_ledger_bytes)
        return None if kept is None else (kept, end)

    def _offset_map(
        self, run: list[LedgerRecord], dirty: int, lease: _Lease, stop: threading.Event | None
    ) -> tuple[OffsetMap, int]:
        """The first pass: the offset map of the run from offset ``dirty`` on, and where it
        reached (the run's end unless the map filled first)."""
        config = self._log.config
        end = run[-1].end_offset
        horizon = self._log.clock.now_ms() - config.delete_retention_ms
        offsets = OffsetMap(horizon, config.dedupe_buffer_bytes, records=end - dirty)
        for ledger, e in self._entries(run, stop, dirty, lease):
            if not offsets.add(RecordBatch(e.batch), ledger.base_offset + e.relative_index):
                end = offsets.end
                break
        offsets.seal()
        return offsets, end

    def _compacted_entries(
        self,
        run: list[LedgerRecord],
        offsets: OffsetMap,
        dirty: int,
        end: int,
        lease: _Lease,
        stop: threading.Event | None,
    ) -> Iterator[NewEntry]:
        """The second pass, as Kafka's cleaner's: the records the offset map keeps (so memory holds
        the keys, not the log). Those before ``dirty`` are looked up in the map a group at a time;
        those the map was built from, up to ``end``, are kept by it; those after are all kept."""
        base = run[0].base_offset
        group: list[tuple[int, Entry]] = []  # entries before the map's, looked up together
        held, most = 0, self._log.config.dedupe_buffer_bytes  # their bytes: read into memory from an object store
        for ledger, e in self._entries(run, stop, lease=lease):
            first = ledger.base_offset + e.relative_index
            if first < dirty:
                group.append((first, e))
                held += len(e.batch)
                if offsets.ask(RecordBatch(e.batch), first) or held >= most:
                    yield from _looked_up(base, group, offsets)
                    group, held = [], 0
                continue
            yield from _looked_up(base, group, offsets)
            group, held = [], 0
            if first >= end:
                yield e.batch, first - base, e.broker_timestamp, e.record_count
            else:
                yield from _thinned(base, first, e, offsets.kept(first, first + e.offset_span - 1))
        yield from _looked_up(base, group, offsets)

    def _entries(
        self, run: list[LedgerRecord], stop: threading.Event | None, start: int = 0, lease: _Lease | None = None
    ) -> Iterator[tuple[LedgerRecord, Entry]]:
        """Each entry of the run with its ledger, read 8 MiB at a time, from the one holding
        ``start`` on. ``stop`` is looked at before each entry, so that a shutdown waits for one
        entry's work at most, and the ``lease`` kept."""
        for ledger in run:
            if ledger.end_offset <= start:
                continue
            reader = ledger_reader(self._log.fileio, ledger, self._log.stats)
            k, n = 0, len(reader.table())
            while k < n:
                read = reader.read(k, 8 << 20)
                for e in read:
                    if stop is not None and stop.is_set():
                        log.info("%s: rewrite stopped, the log left as it was", self._log.name)
                        raise HousekeepingStoppedError(f"{self._log.name}: rewrite stopped")
                    if lease is not None:
                        lease.keep()
                    if ledger.base_offset + e.relative_index + e.offset_span > start:
                        yield ledger, e
                k += len(read)

    def merge_ledgers(self, target_bytes: int, stop: threading.Event | None = None) -> int:
        """Rewrite runs of adjacent small ledgers as one ledger per run of up to ``target_bytes``,
        without changing any offset: entries keep their batches byte for byte, only their relative
        indexes move to the new ledger's base. Ledgers of ``target_bytes / 2`` or more are left as
        they are, so a ledger is rewritten a few times at most. Closed ledgers that were never
        sealed (their writer died) come out sealed. A run is all compacted or none. Returns how
        many ledgers went away."""
        runs: list[list[LedgerRecord]] = [[]]
        view, now = self._log.view(), self._log.clock.now_ms()
        for ledger in view.ledgers:
            small = ledger.state != OPEN and ledger.length < target_bytes // 2 and _free(ledger, view.cleaning, now)
            compacted = _compacted(ledger, view.cleaned_offset)
            if (
                not small
                or sum(l.length for l in runs[-1]) + ledger.length > target_bytes
                or (runs[-1] and _compacted(runs[-1][-1], view.cleaned_offset) != compacted)
            ):
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
        run = _small_run(meta, wanted, self._log.clock.now_ms())
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
        self,
        run: list[LedgerRecord],
        entries: Iterator[NewEntry],
        modified_ms: int,
        cleaner: str | None = None,
        cleaned_to: int = 0,
        target_bytes: int | None = None,
    ) -> int | None:
        """Write ``entries`` as the ledgers that replace ``run`` (each up to ``target_bytes``; None:
        one) and swap them in: the records kept, or None when retention or another cleaner replaced
        the run first (and the files it was reading may have gone with it). The partition's lock is
        held for the swap only, so writers are not held up meanwhile."""
        try:
            created = min(l.created_ms for l in run)
            new, kept = write_ledgers(
                self._log, run[0].base_offset, run[-1].end_offset, entries, created, modified_ms, target_bytes
            )
        except FileMissingError:
            if self._damaged(run):
                raise
            return None  # the run was replaced meanwhile: give way
        return kept if self.swap(run, new, cleaner, cleaned_to) else None

    def _damaged(self, run: list[LedgerRecord]) -> bool:
        """Whether a file of ``run`` found gone is damage: the log still holds the run. Else
        retention or another cleaner replaced it meanwhile, a race the rewrite gives way to."""
        return _holds(self._log.view().ledgers, run)

    def swap(
        self, run: list[LedgerRecord], new: list[LedgerRecord], cleaner: str | None = None, cleaned_to: int = 0
    ) -> bool:
        """Replace ``run`` (adjacent ledgers, as a view saw them) by ``new`` in one CAS, if they
        still hold what they held and no compaction but ``cleaner``'s holds them; no ``new`` drops
        their offsets altogether. The old files go to the trash. False (and ``new`` deleted) when
        retention or another cleaner got there first, or one of ``new`` was condemned as an orphan.
        ``cleaned_to``: where the compaction that made ``new`` reached."""
        delay = self._log.config.file_delete_delay_ms

        def change(meta: LogMetadata, now: int) -> LogMetadata:
            if not (_holds(meta.ledgers, run) and _free(run[0], meta.cleaning, now, cleaner)):
                raise _Stale()
            at = meta.find(run[0].id)
            meta.replace_run(at, len(run), new, now + delay)
            meta.cleaned_offset = max(meta.cleaned_offset, cleaned_to)
            return meta

        try:
            self._log.apply(change)
        except (_Stale, OrphanRemovedError, ManagedLedgerDeletedError) as e:
            for ledger in new:  # known not to be referred to, nor ever to be
                delete_quietly(self._log.fileio, ledger.file)
            if isinstance(e, ManagedLedgerDeletedError):  # the topic went meanwhile
                raise
            return False
        return True


class _Lease:
    """A compaction's mark on the ledgers it rewrites (``LogMetadata.cleaning``): taken in a CAS
    that checks they are still there and no live mark holds them, renewed every quarter of
    ``CLEANING_LEASE_MS`` as the compaction reads, given up when it ends, however it ends."""

    def __init__(self, log: ManagedLedger):
        self._log, self.cleaner = log, uuid.uuid4().hex  # this compaction, as the mark names it
        self._renew_at: int | None = None  # None: not taken

    def take(self, run: list[LedgerRecord]) -> None:
        """Mark ``run``; ``_Stale`` when it changed since it was read, or another compaction holds it."""

        def change(meta: LogMetadata, now: int) -> LogMetadata:
            if not (_holds(meta.ledgers, run) and _free(run[0], meta.cleaning, now)):
                raise _Stale()
            meta.cleaning = CleaningMark(self.cleaner, run[-1].end_offset, now)
            return meta

        self._log.apply(change)
        self._renew_at = self._log.clock.now_ms() + CLEANING_LEASE_MS // 4

    def keep(self) -> None:
        """Renew the mark when due; ``_Stale`` when another compaction took it over (this one was
        held up past the lease)."""
        if self._renew_at is None or self._log.clock.now_ms() < self._renew_at:
            return

        def change(meta: LogMetadata, now: int) -> LogMetadata:
            if meta.cleaning is None or meta.cleaning.cleaner != self.cleaner:
                raise _Stale()
            meta.cleaning = meta.cleaning._replace(renewed_ms=now)
            return meta

        self._log.apply(change)
        self._renew_at = self._log.clock.now_ms() + CLEANING_LEASE_MS // 4

    def give_up(self) -> None:
        """Remove the mark, unless another compaction took it over. Clean-up: a failure is only
        logged; the mark it leaves lapses with the lease."""
        if self._renew_at is None:
            return

        def change(meta: LogMetadata, now: int) -> LogMetadata | None:
            if meta.cleaning is None or meta.cleaning.cleaner != self.cleaner:
                return None
            meta.cleaning = None
            return meta

        try:
            self._log.apply(change, allow_deleted=True)
        except (KopError, OSError) as e:
            log.warning("%s: the mark of a compaction under way was left (it lapses): %s", self._log.name, e)


def _looked_up(base: int, group: list[tuple[int, Entry]], offsets: OffsetMap) -> Iterator[NewEntry]:
    """The entries of ``group`` (each with its first offset), asked about already, each as
    ``_thinned`` by the records the map keeps of them."""
    if group:
        kept = offsets.answer()
        for first, e in group:
            yield from _thinned(base, first, e, kept.between(first, first + e.offset_span - 1))


def _thinned(base: int, first: int, e: Entry, kept: memoryview) -> Iterator[NewEntry]:
    """Entry ``e`` (its first offset ``first``) as it is when it keeps all its records, thinned to
    those ``kept`` when it keeps some, nothing when it keeps none."""
    if len(kept) == e.record_count:
        yield e.batch, first - base, e.broker_timestamp, len(kept)
    elif kept:
        yield thinned(ReadEntry(first, e).record_batch(), kept), first - base, e.broker_timestamp, len(kept)


def _holds(ledgers: Sequence[LedgerRecord], run: list[LedgerRecord]) -> bool:
    """Whether ``ledgers`` still hold what ``run`` held as it was read, in a row."""
    at = next((i for i, l in enumerate(ledgers) if l.id == run[0].id), -1)
    return at >= 0 and [l.contents() for l in ledgers[at : at + len(run)]] == [l.contents() for l in run]


def _free(ledger: LedgerRecord, cleaning: CleaningMark | None, now: int, cleaner: str | None = None) -> bool:
    """Whether ``cleaner``'s rewrite (None: a merge's) may replace ``ledger``: not while another
    compaction under way holds it."""
    return (
        cleaning is None
        or cleaning.cleaner == cleaner
        or ledger.base_offset >= cleaning.end_offset
        or not cleaning.live(now)
    )


def _cleanable(view: PartitionView, stamped_by: int | None) -> list[LedgerRecord]:
    """The ledgers before the first one a writer holds open (Kafka's cleaner leaves the active
    segment) or, given ``stamped_by``, holding a record stamped after it."""
    run = []
    for ledger in view.ledgers:
        if ledger.state == OPEN or (stamped_by is not None and ledger.max_timestamp > stamped_by):
            break
        run.append(ledger)
    return run


def _overdue_tail(log: PartitionView | LogMetadata, max_lag_ms: int, now: int) -> bool:
    """Whether the open ledger holds records and was made ``max_lag_ms`` before ``now``."""
    tail = log.ledgers[-1] if log.ledgers else None
    return tail is not None and tail.state == OPEN and tail.entries > 0 and now - tail.created_ms >= max_lag_ms


def _compacted(ledger: LedgerRecord, cleaned: int) -> bool:
    # Merges keep compacted and dirty records in ledgers of their own: a merged ledger is dated as
    # the oldest it replaces, which must not make new records look overdue for compaction.
    return ledger.end_offset <= cleaned


def _small_run(meta: LogMetadata, wanted: int, now: int) -> list[LedgerRecord] | None:
    """The newest run of ``wanted`` adjacent small ledgers of one size tier, all compacted or
    none, oldest first."""
    run: list[LedgerRecord] = []  # newest first
    cleaned = meta.cleaned_offset
    for ledger in reversed(meta.ledgers):
        tier = _tier(ledger.length)
        small = ledger.state != OPEN and tier < _TIERS_MERGED_IN_PASSING and _free(ledger, meta.cleaning, now)
        if small and (
            not run or (tier == _tier(run[-1].length) and _compacted(ledger, cleaned) == _compacted(run[-1], cleaned))
        ):
            run.append(ledger)
        else:
            run = [ledger] if small else []
        if len(run) == wanted:
            return run[::-1]
    return None
