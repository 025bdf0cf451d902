"""A partition's log: the ordered ledgers of one topic partition, kept in the metadata store.

The managed ledger's metadata (one key; ``ledger_metadata`` has its format) lists its ledgers
with their base offsets, record counts, lengths and timestamp ranges, plus ``next_offset`` (the
log end offset; KoP's "index" property) and ``log_start_offset``. It changes only by
compare-and-set on its version, which is what makes every guarantee here hold across threads,
processes and crashes:

- An append writes entries to a ledger this writer owns, syncs them, then CASes the metadata to
  confirm them (more records, a longer confirmed length, a larger ``next_offset``). Readers read
  only confirmed lengths, so nothing unconfirmed is visible and a torn tail is never read.
- A writer that finds another writer's open ledger at the tail closes it ("fences" it, as
  BookKeeper does) at its confirmed length in the same CAS that adds its own new ledger. The
  fenced writer's next CAS fails; it re-reads, sees its ledger closed, and writes to a new one.
- Offsets are assigned by the CAS: a new ledger's base offset is the ``next_offset`` it was added
  at, and its entries carry relative indexes. Whoever loses a CAS re-reads and retries, so offsets
  stay exactly ``log_start_offset .. next_offset-1`` with no gap and no duplicate.
- An append with an idempotence key (writer id, sequence) records the sequence in the same CAS,
  so a retried append is applied at most once.

What makes it hold when a writer is interrupted (an exception, Ctrl-C, a full disk) rather than
killed: a writer only truncates or seals its ledger file at a length taken from metadata it
knows to be current — the result of its own last CAS, or a fresh read. Whenever the outcome of a
CAS is unknown (anything raised around it), the next operation reads the metadata afresh. Files
are deleted only after a CAS has stopped referring to them (and the reader grace has passed);
orphans are condemned by a CAS before they are deleted, so a writer can never refer to one.
One instance is safe to share between threads: writes take its lock.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import NamedTuple

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (
    BadVersionError,
    FileMissingError,
    LogEndMovedError,
    ManagedLedgerDeletedError,
    OrphanRemovedError,
    StorageError,
)
from ..layout import ledger_file
from ..retry import retry_cas
from .fileio import FileIO
from .group_commit import AppendRequest, AppendResult, GroupCommit, place
from .ledger import IOStats, LedgerWriter
from .ledger_metadata import LogMetadata, WriterRecord
from .log_cleaner import LogCleaner
from .metadata_store import UNPROBED, MetadataStore, ProbedCache, Unprobed
from .offset_map import DEDUPE_BUFFER_BYTES
from .own_ledger import OwnLedger
from .read_plan import PartitionView
from .retention import RetentionPolicy, apply_retention, expire_writers, purge_trash, tail_expired
from .staging import StagedLedger, sealed_ledger


@dataclass(frozen=True)
class ManagedLedgerConfig:
    max_entries_per_ledger: int = 50000
    max_bytes_per_ledger: int = 2048 << 20
    max_ledger_age_ms: int = 240 * 60_000
    producer_expiration_ms: int = 86_400_000
    max_producers: int = 1000  # see retention.longest_idle
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    delete_policy: bool = True  # cleanup.policy has "delete": retention applies
    delete_retention_ms: int = 86_400_000  # compaction keeps tombstones this long
    compact_policy: bool = False  # cleanup.policy has "compact": the log cleaner compacts it
    min_cleanable_dirty_ratio: float = 0.5  # compacted once this share of its sealed bytes is new
    min_compaction_lag_ms: int = 0  # ledgers holding records younger than this are not compacted
    max_compaction_lag_ms: int = (1 << 63) - 1  # compacted once its oldest dirty ledger is this old
    dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES  # about the most a compaction's offset map holds
    target_ledger_bytes: int = 64 << 20  # a compaction writes ledgers of about this size
    merge_in_passing: int = 16  # merge a run of this many small ledgers as part of writing; 0: never
    sink_expiration_ms: int = 604_800_000  # forget an exactly-once writer's last batch this long after it
    # When the topic settings above were read (None: not known). Retention and compaction by them
    # apply only to a log made before: one made since is of a topic deleted and made again, whose
    # settings may differ, and a writer that took settings read a moment before (a produce, on a
    # store that cannot probe one key; a housekeeping pass, read at its start) deleted records by
    # the old topic's retention, or compacted a topic made again with cleanup.policy=delete.
    settings_read_ms: int | None = None

    def settings_cover(self, created_ms: int) -> bool:
        """Whether these settings are those of a log made at ``created_ms``."""
        return self.settings_read_ms is None or created_ms <= self.settings_read_ms

    @cached_property
    def retention(self) -> RetentionPolicy:
        return RetentionPolicy(
            self.retention_ms,
            self.retention_bytes,
            self.delete_policy,
            self.file_delete_delay_ms,
            self.producer_expiration_ms,
            self.max_producers,
            self.sink_expiration_ms,
        )


def _without_sinks(batches: Mapping[str, int], meta: LogMetadata, now: int) -> LogMetadata | None:
    gone = [w for w, batch in batches.items() if w in meta.sinks and meta.sinks[w].seq == batch]
    for writer in gone:
        del meta.sinks[writer]
    return meta if gone else None


class _Committed(NamedTuple):
    meta: LogMetadata
    version: int


Change = Callable[[LogMetadata, int], LogMetadata | None]


def _appended_already(
    meta: LogMetadata, moved: Sequence[tuple[StagedLedger, str]], sink_key: tuple[str, int]
) -> AppendResult | None:
    """What the partition says of a sink batch it took already (or an older one), else None.
    ``moved``: each staged ledger and the file it is appended as."""
    seen = meta.sinks.get(sink_key[0])
    if seen is not None and sink_key[1] <= seen.seq:
        return AppendResult(seen.base_offset if sink_key[1] == seen.seq else -1, seen.record_count, True)
    # A ledger is appended once, whatever the partition remembers of its writer: an applier that
    # read the batch record before another completed it, and came here after the partition forgot
    # the batch, must not append it again. Merged into another ledger (or past retention), it has
    # left the ledger list, but its file waits in the trash until it is deleted; once it is, the
    # append fails for want of the file.
    ids = {s.ledger_id for s, _ in moved}
    trashed = {t["file"] for t in meta.trash}
    if any(l.id in ids for l in meta.ledgers) or any(path in trashed for _, path in moved):
        return AppendResult(-1, sum(s.records for s, _ in moved), True)
    return None


def _check_added_files(name: str, fileio: FileIO, committed: LogMetadata, new: LogMetadata) -> None:
    """Files a change starts referring to must not be orphans condemned by maintenance."""
    for f in new.referenced() - committed.referenced():
        if not _in_place(fileio, f, new):
            raise OrphanRemovedError(f"{name}: {f} was removed as an orphan before it was referred to")


def _in_place(fileio: FileIO, file: str, meta: LogMetadata) -> bool:
    """Whether ``file``, not yet referred to, may be by a change to ``meta``: not removed as an
    orphan. An orphan is condemned by one CAS, deleted, then acquitted by another: while
    condemned, the list says so; once acquitted, it is already gone, which a look at the file
    tells, as long as ``meta`` was read after the acquitting CAS (read afresh for this change)."""
    return file not in meta.condemned and fileio.exists(file)


def _move_staged(fileio: FileIO, log: str, moves: list[tuple[str, str]]) -> None:
    """Move staged ledgers in; one moved already (by another applier of the batch) is skipped."""
    todo = []
    for staged, path in moves:
        if fileio.exists(staged):
            todo.append((staged, path))
        elif not fileio.exists(path):
            raise StorageError(
                f"{log}: staged ledger {fileio.full_path(staged)} is gone, and was not moved to {fileio.full_path(path)}"
            )
    if todo:
        fileio.rename(todo)


def create_managed_ledger(store: MetadataStore, key: str, now_ms: int = 0) -> None:
    """Create an empty managed ledger, carrying over the trash of a deleted one of that name;
    ``now_ms``: when, as the log says (``ManagedLedgerConfig.settings_read_ms``)."""
    current = store.get(key)
    meta = LogMetadata(created_ms=now_ms)
    if current.value is not None:
        old = LogMetadata.from_json(current.value)
        if not old.deleted:
            raise BadVersionError(f"managed ledger {key} already exists")
        meta.trash, meta.condemned = old.trash, old.condemned
    store.put(key, meta.to_json(), current.version)


class ManagedLedger:
    """One partition's log. Safe to use from several processes at once, and from several threads
    through one instance; one instance per writer."""

    def __init__(
        self,
        name: str,
        key: str,
        data_dir: str,
        store: MetadataStore,
        fileio: FileIO,
        config: ManagedLedgerConfig = ManagedLedgerConfig(),
        writer_id: str | None = None,
        stats: IOStats | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.name = name  # for messages, e.g. "orders-0"
        self.key = key
        self.data_dir = data_dir
        self.store = store
        self.fileio = fileio
        self.config = config
        self.writer_id = writer_id or uuid.uuid4().hex
        self.stats = stats if stats is not None else IOStats()
        self.clock = clock
        self.lock = threading.RLock()
        self.cleaner = LogCleaner(self)
        # The metadata as our own last CAS left it. None whenever that is unknown (a CAS that
        # raised, or anything raised while one was being prepared): the next write reads afresh.
        self._state: _Committed | None = None
        self._read: tuple[_Committed, int] | None = None  # the last view's read, and _writes as it began
        self._writes = 0  # CASes this instance made
        self._own = OwnLedger(self)
        self._appends = GroupCommit(self._commit_appends)
        self._views = ProbedCache(store)

    # -- lifecycle -------------------------------------------------------------------------

    def delete(self) -> None:
        """Drop every ledger; files go to the trash and are deleted after the grace period."""

        def change(meta: LogMetadata, now: int) -> LogMetadata:
            meta.mark_deleted(now + self.config.file_delete_delay_ms)
            return meta

        with self.lock:
            self._own.drop()
            self.apply(change)

    def close(self) -> None:
        """Seal this writer's open ledger so readers get its entry table and nobody must fence it."""
        with self.lock:
            if not self._own.active:
                return
            try:
                self.apply(lambda meta, now: self._own.seal_tail(meta))
            except ManagedLedgerDeletedError:
                pass
            finally:
                self._own.drop()

    def purge(self) -> bool:
        """Delete trashed files past their grace period, also of a deleted managed ledger.
        Returns True once a deleted managed ledger has nothing left, so its key can go."""
        with self.lock:
            self.apply(lambda meta, now: meta, allow_deleted=True)
            meta = self._state.meta if self._state else None
            return bool(meta and meta.deleted and not meta.trash and not meta.condemned)

    def enforce_retention(self, view: PartitionView | None = None) -> None:
        """Apply retention and delete trashed files past their grace, now; a second pass for what
        the first trashed. ``view``: the log as a probe just found it (``PartitionViews``), so
        that what this instance read or wrote at its version stands in for a read."""
        with self.lock:
            # On the log as it stands, with what other writers did since our last CAS: a pass read
            # each partition, a GET each on an object store, where most were as the last pass left
            # them. A view's read may be older than our own last append (sealing our ledger on it
            # would cut the ledger back to that read's length; a producer's next batch was refused
            # on it): only a log with none takes it, and only a read begun after our last CAS.
            read, writes = self._read or (None, -1)
            known = [self._state] if self._own.active or writes != self._writes else [self._state, read]
            at = -1 if view is None else view.version
            self._state = next((s for s in known if s is not None and s.version == at), None)
            self.apply(lambda m, now: self.close_tail(m, now) if tail_expired(m, self.config.retention, now) else m)
            self.apply(lambda meta, now: meta)

    # -- the CAS that applies every change -------------------------------------------------

    def apply(self, change: Change, *, allow_deleted: bool = False, new_files: bool = False) -> None:
        """Apply ``change`` by CAS, again on a fresh read whenever another writer got there first.
        ``change(meta, now)`` edits a copy of the metadata and returns it (or None for no change).
        ``new_files``: the change made (or found in place) after the read of ``meta`` every file it
        adds, which so needs no look (``_check_added_files``): condemning one fails this CAS."""
        with self.lock:  # interleaved CASes could leave a stale last-known state to decide on
            retry_cas(self.name, lambda: self._update(change, allow_deleted, new_files))

    def _update(self, change: Change, allow_deleted: bool, new_files: bool = False) -> None:
        """Read-modify-CAS once, with retention and trash handling folded into the same CAS.
        Raises BadVersionError when another writer got there first."""
        state = self._state if self._state is not None else self._load(allow_deleted)
        self._state = None  # unknown until this attempt is known to have gone through, or not
        if state.meta.deleted and not allow_deleted:
            raise ManagedLedgerDeletedError(self.key)
        now = self.clock.now_ms()
        try:
            new = change(state.meta.copy(), now)
        except FileMissingError:
            # The change used a file its metadata names (our ledger, to take up again or seal).
            # If the log moved on since that read, the file may have gone with it (merged away,
            # retention): decide again on the log as it stands. Missing from the current log: damage.
            if self.store.get(self.key).version != state.version:
                raise BadVersionError(f"{self.name}: changed, and a file it named removed, while deciding") from None
            raise
        if new is None:
            self._state = state
            return
        if not new.deleted:
            if self.config.settings_cover(state.meta.created_ms):
                apply_retention(new, self.config.retention, now)
            expire_writers(new, self.config.retention, now)
        purge_trash(self.fileio, state.meta, new, now)
        if new == state.meta:
            self._state = state
            return
        if not new_files:
            _check_added_files(self.name, self.fileio, state.meta, new)
        version = self.store.put(self.key, new.to_json(), state.version)
        self._state, self._writes = _Committed(new, version), self._writes + 1
        if not new.deleted:  # a look after it need not read what this instance wrote (a GET on an object store)
            self._views.seed(
                self.key, self.store.written_probe(self.key, version), lambda: PartitionView.of(new, version)
            )

    def _load(self, allow_deleted: bool = False) -> _Committed:
        state = self.store.get(self.key)
        meta = None if state.value is None else LogMetadata.from_json(state.value)
        if meta is None or (meta.deleted and not allow_deleted):
            raise ManagedLedgerDeletedError(self.key)
        return _Committed(meta, state.version)

    @property
    def last_known(self) -> LogMetadata | None:
        """The metadata as this instance last read or wrote it, if that is known."""
        return self._state.meta if self._state is not None else None

    def view(self, token: Hashable | Unprobed | None = UNPROBED) -> PartitionView:
        """The log as it stands: read fresh from the metadata store, unless the store tells
        cheaply that it has not changed since the last view (``token``: its probe, if taken)."""
        return self._views.get(self.key, self._load_view, token)

    def _load_view(self) -> PartitionView:
        writes = self._writes
        read = self._load()
        self._read = (read, writes)  # kept for a retention pass whose probe finds the log at this version
        return PartitionView.of(*read)

    # -- writes ----------------------------------------------------------------------------

    def append(
        self,
        batches: Sequence[bytes],
        *,
        idempotence_key: tuple[str, int] | None = None,
        broker_timestamp: int | None = None,
        expected_next_offset: int | None = None,
    ) -> AppendResult:
        """Append record batches as consecutive entries, atomically; return the first offset.
        Appends from other threads that arrive meanwhile share the write and the CAS
        (``group_commit``). With ``expected_next_offset`` the append happens only if the log still
        ends there (``LogEndMovedError`` otherwise), alone: a decision made from the log is applied
        in the CAS that checks it still holds."""
        if not batches:
            raise ValueError("nothing to append")
        request = AppendRequest(batches, idempotence_key, broker_timestamp)
        if expected_next_offset is None:
            return self._appends.submit(request)
        self._commit_appends([request], expected_next_offset)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def queue_append(
        self, batches: Sequence[bytes], *, broker_timestamp: int | None = None
    ) -> Callable[[], AppendResult]:
        """``append`` in two steps: queue the batches now (appends queued in order are appended in
        that order) and return the wait for their result, so that a caller may queue more before
        the first is written, and all of them share a write and a CAS."""
        if not batches:
            raise ValueError("nothing to append")
        request = AppendRequest(batches, None, broker_timestamp)
        self._appends.enqueue(request)
        return lambda: self._appends.wait(request)

    def _commit_appends(self, requests: list[AppendRequest], expected_next_offset: int | None = None) -> None:
        """Write ``requests`` together (one sync or upload) and confirm them in one CAS."""
        # Object stores: the sealed ledger of the appends to write, uploaded once for each set of them.
        sealed: dict[tuple[int, ...], StagedLedger] = {}
        fresh = [False]  # whether a refusal was decided on the log as read for it

        def change(meta: LogMetadata, now: int) -> LogMetadata | None:
            if expected_next_offset is not None and meta.next_offset != expected_next_offset:
                raise LogEndMovedError(
                    f"{self.name}: the log end moved from {expected_next_offset} to {meta.next_offset}"
                )
            base, writes = meta.next_offset, place(meta, requests, now, self.name)
            if any(r.error for r in requests) and not fresh[0]:
                # A producer refused (out of sequence, fenced) is a fatal error to it: decided on
                # the log as it stands, not on what this instance last knew, which no CAS checks.
                fresh[0] = True
                raise BadVersionError(f"{self.name}: a batch refused on the log as last known; reading it again")
            if not writes:
                return None
            appends = [(r.batches, r.broker_timestamp if r.broker_timestamp is not None else now) for r in writes]
            count = sum(r.count for r in writes)
            if self.fileio.supports_append:
                position, rows = self._own.write(meta, now, appends)
                meta.confirm(len(rows), count, position, max(r.max_timestamp for r in rows), now)
            else:  # an object store: the group's appends are a sealed ledger of their own, uploaded once
                ledger = sealed.get(which := tuple(id(r) for r in writes))  # else some were applied: write anew
                if ledger is None or not _in_place(self.fileio, ledger.file, meta):
                    ledger = sealed[which] = sealed_ledger(self.fileio, self.ledger_path, appends)
                meta.fence_tail()
                meta.add_ledger(ledger.record(ledger.file, base, now))
            return meta

        with self.lock:
            self.apply(change, new_files=True)
            self.cleaner.merge_in_passing()

    def ledger_path(self, ledger_id: int) -> str:
        """Where a ledger of this partition lives (a staged one once it is appended)."""
        return ledger_file(self.data_dir, ledger_id)

    def append_ledgers(self, staged: Sequence[StagedLedger], sink_key: tuple[str, int]) -> AppendResult:
        """Append staged ledgers whole, as the partition's next ledgers, in one CAS that gives them
        offsets: an exactly-once sink's commit. ``sink_key`` = (writer, batch): a batch the writer
        already appended (or an older one) is not appended again. Several appliers of one recorded
        batch (a rerun, maintenance rolling it forward) may race: files moved by one are found in
        place by the other, and the partition's record of the batch lets exactly one CAS through."""
        # Where renames are cheap the staged files move into the partition's directory; an object
        # store has no rename (a copy would write everything twice), so they stay where they are.
        moved = [
            (s, self.ledger_path(s.ledger_id) if self.fileio.supports_append else s.file) for s in staged if s.records
        ]
        result: list[AppendResult] = []

        def already(meta: LogMetadata) -> bool:
            done = _appended_already(meta, moved, sink_key)
            if done is not None:
                result.append(done)
            return done is not None

        def change(meta: LogMetadata, now: int) -> LogMetadata | None:
            result.clear()
            if already(meta):
                return None
            if not moved:
                result.append(AppendResult(meta.next_offset, 0))
                return None
            self._own.seal_tail(meta)  # or finish a ledger of ours that was fenced
            meta.fence_tail()
            base = meta.next_offset
            for s, path in moved:
                meta.add_ledger(s.record(path, meta.next_offset, now))
            meta.sinks[sink_key[0]] = WriterRecord(sink_key[1], base, meta.next_offset - base, now)
            result.append(AppendResult(base, meta.next_offset - base))
            return meta

        with self.lock:
            self._state = self._load()  # what the CAS below starts from, unless the log moves first
            if already(self._state.meta):
                return result[-1]
            _move_staged(self.fileio, self.name, [(s.file, path) for s, path in moved if s.file != path])
            # Should the CAS fail, the moved files stay unreferenced until maintenance removes them:
            # deleting them here could race another applier of the same batch whose CAS went through.
            self.apply(change)
            if not result[-1].duplicate:
                self.cleaner.merge_in_passing()
        return result[-1]

    def delete_before(self, offset: int | None) -> int:
        """Kafka's DeleteRecords: the log starts at ``offset`` (None: the log end) unless it starts
        later already; return where it starts. The caller checks ``offset`` is not past the end."""
        delay = self.config.file_delete_delay_ms
        self.apply(lambda meta, now: meta if meta.delete_before(offset, now + delay) else None)
        return self.view().log_start_offset  # as it stands: a racing call may have moved it further

    def forget_sinks(self, batches: Mapping[str, int]) -> None:
        """Drop writers' records of batches no commit can apply again (a batch job's, or one its
        writer's record says finished), each while still of the batch given."""
        self.apply(partial(_without_sinks, batches))

    def close_tail(self, meta: LogMetadata, now: int) -> LogMetadata | None:
        """A change that closes the open tail: sealed if it is ours, fenced otherwise."""
        return self._own.close_tail(meta)

    def create_ledger_file(self) -> LedgerWriter:
        return self._own.create_file()
