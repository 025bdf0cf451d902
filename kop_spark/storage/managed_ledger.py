"""A partition's log: the ordered ledgers of one topic partition, kept in the metadata store.

The managed ledger's metadata (one key) lists its ledgers with their base offsets, record counts,
lengths and timestamp ranges, plus ``next_offset`` (the log end offset; KoP's "index" property)
and ``log_start_offset``. It changes only by compare-and-set on its version, which is what makes
every guarantee here hold across threads, processes and crashes:

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

import bisect
import logging
import marshal
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

from ..errors import BadVersionError, CorruptRecordError, KopError, LogEndMovedError, StorageError
from ..record import Record, RecordBatch, build_record_batch
from ..record.default_record_batch import with_base_offset
from .fileio import FileIO
from .ledger import FILE_HEADER, Entry, EntryInfo, IOStats, LedgerReader, LedgerWriter, delete_quietly
from .log_check import LedgerCheck, check_ledger, intact_entries, structure_problems
from .metadata_store import MetadataStore, Versioned

OPEN, CLOSED, SEALED = "open", "closed", "sealed"
_MAX_ATTEMPTS = 10_000
# Merging in passing: ledgers are tiered by size (below 64 KiB, below 1 MiB); a run of
# ``merge_in_passing`` adjacent ledgers of one tier becomes one ledger of about the next tier, so
# every record is copied a couple of times at most and a run costs a writer at most a few MiB.
_TIER_BASE = 64 << 10
_TIER_FACTOR = 16
_TIERS_MERGED_IN_PASSING = 2

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ManagedLedgerConfig:
    max_entries_per_ledger: int = 50000
    max_bytes_per_ledger: int = 2048 << 20
    max_ledger_age_ms: int = 240 * 60_000
    producer_expiration_ms: int = 86_400_000
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    delete_policy: bool = True  # cleanup.policy has "delete": retention applies
    delete_retention_ms: int = 86_400_000  # compaction keeps tombstones this long
    merge_in_passing: int = 16  # merge a run of this many small ledgers as part of writing; 0: never
    sink_expiration_ms: int = 604_800_000  # forget an exactly-once writer's last batch this long after it


class LedgerInfo(NamedTuple):
    """One ledger as the managed ledger records it."""

    id: int
    file: str
    base_offset: int
    entries: int
    records: int  # offsets the ledger spans (more than the records in it, once compacted)
    length: int  # confirmed bytes; for a sealed ledger, the whole file with its table
    max_timestamp: int
    created_ms: int
    state: str
    owner: str | None
    modified_ms: int = -1  # when entries were last added (-1 in metadata of earlier versions)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.records

    @property
    def retention_time(self) -> int:
        """What time-based retention compares: the newest record's time, as Kafka; when no record
        has one, the time the ledger last grew (Kafka: the segment's modification time)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.modified_ms if self.modified_ms >= 0 else self.created_ms


def _ledger_record(
    ledger_id: int,
    file: str,
    base_offset: int,
    entries: int,
    records: int,
    length: int,
    max_timestamp: int,
    now: int,
    state: str = SEALED,
    owner: str | None = None,
) -> dict:
    """A ledger as the managed ledger's metadata lists it (the fields of ``LedgerInfo``)."""
    return {
        "id": ledger_id,
        "file": file,
        "base_offset": base_offset,
        "entries": entries,
        "records": records,
        "length": length,
        "max_timestamp": max_timestamp,
        "created_ms": now,
        "modified_ms": now,
        "state": state,
        "owner": owner,
    }


def _trash(meta: dict, files: Iterable[str], delete_after_ms: int) -> None:
    """Files the metadata stops referring to, deleted once readers' grace has passed."""
    meta["trash"] = meta.get("trash", []) + [{"file": f, "delete_after_ms": delete_after_ms} for f in files]


def _referenced(meta: dict) -> set:
    return {l["file"] for l in meta.get("ledgers", [])} | {t["file"] for t in meta.get("trash", [])}


def _tier(length: int) -> int:
    return 0 if length < _TIER_BASE else int(math.log(length / _TIER_BASE, _TIER_FACTOR)) + 1


class OrphanRemovedError(StorageError):
    """A file written for a change was condemned as an orphan (by maintenance with a short grace)
    before the change could refer to it. Nothing was applied; the operation can be run again."""


class AppendResult(NamedTuple):
    base_offset: int  # -1 for a duplicate whose original offsets are no longer known
    record_count: int
    duplicate: bool = False


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


def read_slice(
    fileio: FileIO, ledger: LedgerSlice, start: int, end: int, max_bytes: int = 8 << 20, stats: IOStats | None = None
) -> Iterator[ReadEntry]:
    """The entries of ``ledger`` holding offsets in ``[start, end)``, read ``max_bytes`` at a time."""
    reader = LedgerReader(fileio, ledger.file, ledger.length, ledger.sealed, stats or IOStats())
    table = reader.table()
    k = max(table.find_entry(start - ledger.base_offset), 0)
    last = table.find_entry(end - 1 - ledger.base_offset)
    while k <= last:
        entries = reader.read(k, max_bytes, last)
        for e in entries:
            yield ReadEntry(ledger.base_offset + e.relative_index, e)
        k += len(entries)


class StagedLedger(NamedTuple):
    """A sealed ledger written outside any managed ledger (by a Spark task), waiting to be appended."""

    file: str
    ledger_id: int
    entries: int
    records: int
    length: int
    max_timestamp: int


class LedgerStager:
    """Writes one ledger that is not yet part of a partition: entries get relative indexes from 0,
    and ``finish`` seals it. ``ManagedLedger.append_ledgers`` later gives it offsets in one CAS."""

    def __init__(self, fileio: FileIO, path: str):
        self.path = path
        self._fileio = fileio
        self._writer = LedgerWriter.create(fileio, path, uuid.uuid4().int >> 65)
        self._rows: list[EntryInfo] = []
        self._records = 0

    def append(self, batches: Sequence[bytes], broker_timestamp: int) -> None:
        """Write batches as the ledger's next entries, in one write."""
        if batches:
            self._rows += self._writer.append(batches, self._records, broker_timestamp)
            self._records = self._rows[-1].relative_index + RecordBatch(batches[-1]).offset_span

    def finish(self) -> StagedLedger:
        length = self._writer.seal(self._rows, self._records)
        self._writer.close()
        max_ts = max((r.max_timestamp for r in self._rows), default=-1)
        return StagedLedger(self.path, self._writer.ledger_id, len(self._rows), self._records, length, max_ts)

    def discard(self) -> None:
        self._writer.close()
        self._fileio.delete(self.path)


class ManagedLedgerDeletedError(Exception):
    """The managed ledger does not exist (never created, or deleted)."""


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of a managed ledger at one metadata version."""

    version: int
    log_start_offset: int
    next_offset: int
    ledgers: tuple[LedgerInfo, ...]
    _bases: tuple[int, ...] = field(repr=False, default=())
    _running_max_ts: tuple[int, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, meta: dict, version: int) -> Snapshot:
        ledgers = tuple(LedgerInfo(**l) for l in meta["ledgers"])
        running, top = [], -(1 << 63)
        for l in ledgers:
            top = max(top, l.max_timestamp)
            running.append(top)
        return cls(
            version,
            meta["log_start_offset"],
            meta["next_offset"],
            ledgers,
            tuple(l.base_offset for l in ledgers),
            tuple(running),
        )

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
                    LedgerSlice(
                        ledger.file, ledger.length, ledger.state == SEALED, ledger.base_offset, ledger.end_offset
                    )
                )
        return out

    @property
    def size_bytes(self) -> int:
        return sum(l.length for l in self.ledgers)


def _empty_metadata(log_start_offset: int = 0) -> dict:
    return {
        "log_start_offset": log_start_offset,
        "next_offset": log_start_offset,
        "ledgers": [],
        "producers": {},
        "trash": [],
    }


Change = Callable[[dict, int], dict | None]


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
    ):
        self.name = name  # for messages, e.g. "orders-0"
        self.key = key
        self.data_dir = data_dir
        self.store = store
        self.fileio = fileio
        self.config = config
        self.writer_id = writer_id or uuid.uuid4().hex
        self.stats = stats if stats is not None else IOStats()
        self._lock = threading.RLock()
        # The metadata as our own last CAS left it. None whenever that is unknown (a CAS that
        # raised, or anything raised while one was being prepared): the next write reads afresh.
        self._state: Versioned | None = None
        self._writer: LedgerWriter | None = None
        self._rows: list[EntryInfo] = []  # every row written to our open ledger, confirmed or not

    # -- lifecycle -------------------------------------------------------------------------

    @staticmethod
    def create(store: MetadataStore, key: str) -> None:
        """Create an empty managed ledger, carrying over the trash of a deleted one of that name."""
        current = store.get(key)
        meta = _empty_metadata()
        if current.value is not None:
            if not current.value.get("deleted"):
                raise BadVersionError(f"managed ledger {key} already exists")
            meta["trash"] = current.value.get("trash", [])
            meta["condemned"] = current.value.get("condemned", [])
        store.put(key, meta, current.version)

    def delete(self) -> None:
        """Drop every ledger; files go to the trash and are deleted after the grace period."""

        def change(meta: dict, now: int) -> dict:
            deleted = {"deleted": True, "trash": meta.get("trash", []), "condemned": meta.get("condemned", [])}
            _trash(deleted, [l["file"] for l in meta["ledgers"]], now + self.config.file_delete_delay_ms)
            return deleted

        with self._lock:
            self._drop_writer()
            self._retry(change)

    def close(self) -> None:
        """Seal this writer's open ledger so readers get its entry table and nobody must fence it."""
        with self._lock:
            if self._writer is None:
                return
            try:
                self._retry(self._seal_own_tail)
            except ManagedLedgerDeletedError:
                pass
            finally:
                self._drop_writer()

    def purge(self) -> bool:
        """Delete trashed files past their grace period, also of a deleted managed ledger.
        Returns True once a deleted managed ledger has nothing left, so its key can go."""
        with self._lock:
            self._retry(lambda meta, now: meta, allow_deleted=True)
            value = self._state.value if self._state else None
            return bool(value and value.get("deleted") and not value.get("trash") and not value.get("condemned"))

    def _retry(self, change: Change, *, allow_deleted: bool = False, new_files: bool = False) -> None:
        """Apply ``change`` by CAS, again on a fresh read whenever another writer got there first.
        With ``new_files``, the change makes its files afresh on every attempt, so one that maintenance
        removed as an orphan before the CAS (a lost race, like any other) is retried too."""
        lost = (BadVersionError, OrphanRemovedError) if new_files else BadVersionError
        for _ in range(_MAX_ATTEMPTS):
            try:
                return self._update(change, allow_deleted=allow_deleted)
            except lost:
                continue
        raise StorageError(f"{self.name}: gave up after {_MAX_ATTEMPTS} lost compare-and-sets")

    def _drop_writer(self) -> None:
        writer, self._writer, self._rows = self._writer, None, []
        if writer is not None:
            writer.close()

    # -- reads -----------------------------------------------------------------------------

    def _load(self, allow_deleted: bool = False) -> Versioned:
        state = self.store.get(self.key)
        if state.value is None or (state.value.get("deleted") and not allow_deleted):
            raise ManagedLedgerDeletedError(self.key)
        return state

    def snapshot(self) -> Snapshot:
        """The current state, read fresh from the metadata store."""
        state = self._load()
        return Snapshot.of(state.value, state.version)

    def reader(self, ledger: LedgerInfo) -> LedgerReader:
        return LedgerReader(self.fileio, ledger.file, ledger.length, ledger.state == SEALED, self.stats)

    def read(self, snapshot: Snapshot, offset: int, max_bytes: int, max_records: int | None = None) -> list[ReadEntry]:
        """Entries from the one holding ``offset`` on, within one ledger: at least one, then more
        within ``max_bytes``, and no more than needed to cover ``max_records`` records. Offsets
        that compaction emptied are stepped over. Empty only when nothing is left at or after
        ``offset``, which must be in ``[log_start_offset, next_offset)``."""
        for i in range(snapshot.ledger_for_offset(offset), len(snapshot.ledgers)):
            ledger = snapshot.ledgers[i]
            reader = self.reader(ledger)
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

    def entry_for_timestamp(self, snapshot: Snapshot, timestamp: int) -> ReadEntry | None:
        """The first entry whose batch, or one before it, reaches ``timestamp``; None if none does."""
        i = snapshot.ledger_for_timestamp(timestamp)
        if i >= len(snapshot.ledgers):
            return None
        ledger = snapshot.ledgers[i]
        reader = self.reader(ledger)
        table = reader.table()
        k = table.find_timestamp(timestamp)
        if k >= len(table):
            raise CorruptRecordError(
                f"{self.fileio.full_path(ledger.file)}: no entry reaches timestamp {timestamp} "
                f"although the managed ledger records {ledger.max_timestamp} for this ledger"
            )
        entry = reader.read(k, 0)[0]
        return ReadEntry(ledger.base_offset + entry.relative_index, entry)

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
        With ``expected_next_offset`` the append happens only if the log still ends there
        (``LogEndMovedError`` otherwise): a decision made from the log is applied in the CAS that
        checks it still holds."""
        if not batches:
            raise ValueError("nothing to append")
        count = sum(RecordBatch(b).offset_span for b in batches)
        result: list[AppendResult] = []

        def change(meta: dict, now: int) -> dict | None:
            result.clear()  # from an attempt whose CAS lost
            if idempotence_key is not None:
                seen = meta["producers"].get(idempotence_key[0])
                if seen is not None and idempotence_key[1] <= seen["seq"]:
                    if idempotence_key[1] == seen["seq"]:
                        result.append(AppendResult(seen["base_offset"], seen["count"], True))
                    else:
                        result.append(AppendResult(-1, count, True))
                    return None
            if expected_next_offset is not None and meta["next_offset"] != expected_next_offset:
                raise LogEndMovedError(
                    f"{self.name}: the log end moved from {expected_next_offset} to {meta['next_offset']}"
                )
            ledger = self._writable_tail(meta, now)
            base = meta["next_offset"]
            writer = self._writer
            assert writer is not None
            rows = writer.append(batches, ledger["records"], broker_timestamp if broker_timestamp is not None else now)
            writer.sync()
            self._rows.extend(rows)
            ledger["entries"] += len(rows)
            ledger["records"] += count
            ledger["length"] = writer.position
            ledger["max_timestamp"] = max([ledger["max_timestamp"]] + [r.max_timestamp for r in rows])
            ledger["modified_ms"] = now
            meta["next_offset"] = base + count
            if idempotence_key is not None:
                meta["producers"][idempotence_key[0]] = {
                    "seq": idempotence_key[1],
                    "base_offset": base,
                    "count": count,
                    "ts": now,
                }
            result.append(AppendResult(base, count))
            return meta

        with self._lock:
            self._retry(change, new_files=True)
            self._merge_in_passing()
        return result[-1]

    def ledger_path(self, ledger_id: int) -> str:
        """Where a ledger of this partition lives (a staged one once it is appended)."""
        return f"{self.data_dir}/{ledger_id:016x}.ledger"

    def append_ledgers(self, staged: Sequence[StagedLedger], sink_key: tuple[str, int]) -> AppendResult:
        """Append staged ledgers whole, as the partition's next ledgers, in one CAS that gives them
        offsets: an exactly-once sink's commit. ``sink_key`` = (writer, batch): a batch the writer
        already appended (or an older one) is not appended again. Several appliers of one recorded
        batch (a rerun, maintenance rolling it forward) may race: files moved by one are found in
        place by the other, and the partition's record of the batch lets exactly one CAS through."""
        staged = [s for s in staged if s.records]
        moved = [(s, self.ledger_path(s.ledger_id)) for s in staged]
        result: list[AppendResult] = []

        def already(meta: dict) -> bool:
            seen = meta.get("sinks", {}).get(sink_key[0])
            if seen is not None and sink_key[1] <= seen["batch"]:
                result.append(
                    AppendResult(seen["base_offset"] if sink_key[1] == seen["batch"] else -1, seen["count"], True)
                )
                return True
            return False

        def change(meta: dict, now: int) -> dict | None:
            result.clear()
            if already(meta):
                return None
            if not moved:
                result.append(AppendResult(meta["next_offset"], 0))
                return None
            self._seal_own_tail(meta, now)  # or finish a ledger of ours that was fenced
            ledgers = meta["ledgers"]
            if ledgers and ledgers[-1]["state"] == OPEN:
                ledgers[-1]["state"] = CLOSED  # fence its writer at its confirmed length
            base = offset = meta["next_offset"]
            for s, path in moved:
                ledgers.append(
                    _ledger_record(s.ledger_id, path, offset, s.entries, s.records, s.length, s.max_timestamp, now)
                )
                offset += s.records
            meta["next_offset"] = offset
            meta.setdefault("sinks", {})[sink_key[0]] = {
                "batch": sink_key[1],
                "base_offset": base,
                "count": offset - base,
                "ts": now,
            }
            result.append(AppendResult(base, offset - base))
            return meta

        with self._lock:
            if already(self._load().value):
                return result[-1]
            for s, path in moved:
                self._move_staged(s.file, path)
            # Should the CAS fail, the moved files stay unreferenced until maintenance removes them:
            # deleting them here could race another applier of the same batch whose CAS went through.
            self._retry(change)
            if not result[-1].duplicate:
                self._merge_in_passing()
        return result[-1]

    def _move_staged(self, staged: str, path: str) -> None:
        if self.fileio.exists(staged):
            self.fileio.rename(staged, path)
        elif not self.fileio.exists(path):
            raise StorageError(
                f"{self.name}: staged ledger {self.fileio.full_path(staged)} is gone, and was not moved "
                f"to {self.fileio.full_path(path)}"
            )

    def forget_sink(self, writer: str) -> None:
        """Drop a writer's record of its last batch (a batch job's, once its commit is complete:
        Spark never runs a batch job again, so nothing needs it)."""

        def change(meta: dict, now: int) -> dict | None:
            if writer not in meta.get("sinks", {}):
                return None
            del meta["sinks"][writer]
            return meta

        with self._lock:
            self._retry(change)

    def _writable_tail(self, meta: dict, now: int) -> dict:
        """Make sure the tail ledger is our own open one, with room, positioned at its confirmed end."""
        ledgers = meta["ledgers"]
        tail = ledgers[-1] if ledgers else None
        writer = self._writer
        if (
            tail is not None
            and tail["state"] == OPEN
            and tail["owner"] == self.writer_id
            and writer is not None
            and writer.ledger_id == tail["id"]
        ):
            del self._rows[tail["entries"] :]  # forget rows of appends that were never confirmed
            writer.rewind(tail["length"])
            cfg = self.config
            if (
                tail["entries"] < cfg.max_entries_per_ledger
                and tail["length"] < cfg.max_bytes_per_ledger
                and now - tail["created_ms"] < cfg.max_ledger_age_ms
            ):
                return tail
            self._seal(tail)
        else:
            self._finish_fenced(meta)
            if tail is not None and tail["state"] == OPEN:
                tail["state"] = CLOSED  # fence the other writer at its confirmed length
        return self._new_ledger(meta, now)

    def _finish_fenced(self, meta: dict) -> None:
        """We own a ledger that another writer closed: seal its file at the closed length, so
        readers get a table instead of scanning, or forget it if it never got confirmed."""
        if self._writer is None:
            return
        own = next((l for l in meta["ledgers"] if l["id"] == self._writer.ledger_id), None)
        if own is not None and own["state"] == CLOSED:
            self._seal(own)
            return
        path = self._writer.path
        self._drop_writer()
        if own is None and path not in _referenced(meta):
            delete_quietly(self.fileio, path)  # created by an attempt whose CAS lost: nobody refers to it

    def _seal_own_tail(self, meta: dict, now: int) -> dict:
        tail = meta["ledgers"][-1] if meta["ledgers"] else None
        if self._writer is None or tail is None or tail["id"] != self._writer.ledger_id or tail["state"] != OPEN:
            self._finish_fenced(meta)
            return meta
        self._seal(tail)
        return meta

    def _seal(self, ledger: dict) -> None:
        """Seal our ledger file at its confirmed length, dropping any unconfirmed tail. ``ledger``
        comes from the metadata this change will CAS against, never from what we remember."""
        writer = self._writer
        assert writer is not None
        rows = self._rows[: ledger["entries"]]
        if len(rows) != ledger["entries"] or (rows and rows[-1].position >= ledger["length"]):
            # What we remember does not match what was confirmed: read the rows from the file.
            rows = LedgerReader(self.fileio, writer.path, ledger["length"], False, self.stats).table().rows
        writer.rewind(ledger["length"])
        ledger["length"] = writer.seal(rows, ledger["records"])
        ledger["state"], ledger["owner"] = SEALED, None
        self._drop_writer()

    def _create_ledger_file(self) -> LedgerWriter:
        ledger_id = uuid.uuid4().int >> 65
        return LedgerWriter.create(self.fileio, f"{self.data_dir}/{ledger_id:016x}.ledger", ledger_id)

    def _new_ledger(self, meta: dict, now: int) -> dict:
        self._writer = self._create_ledger_file()
        self._rows = []
        ledger = _ledger_record(
            self._writer.ledger_id,
            self._writer.path,
            meta["next_offset"],
            0,
            0,
            FILE_HEADER.size,
            -1,
            now,
            OPEN,
            self.writer_id,
        )
        meta["ledgers"].append(ledger)
        return ledger

    # -- the log cleaner: compaction and merging --------------------------------------------

    def compact(self) -> int | None:
        """Keep only the latest record of each key (and tombstones younger than
        ``delete_retention_ms``), as Kafka's log cleaner does, without changing any offset.

        The whole log is rewritten into one sealed ledger that keeps the offsets of the records it
        keeps; the offsets in between simply hold nothing any more. The open tail is sealed (or
        fenced) first so that it is compacted too. Returns the records kept, or None when the log
        changed under the compaction (another compaction or retention won; nothing is lost).
        """

        def close_tail(meta: dict, now: int) -> dict | None:
            tail = meta["ledgers"][-1] if meta["ledgers"] else None
            if tail is None or tail["state"] != OPEN:
                return None
            if self._writer is not None and tail["id"] == self._writer.ledger_id:
                return self._seal_own_tail(meta, now)
            tail["state"] = CLOSED
            return meta

        with self._lock:
            self._retry(close_tail)
            snap = self.snapshot()
            if not snap.ledgers:
                return 0
            base, end = snap.ledgers[0].base_offset, snap.ledgers[-1].end_offset
            new, kept = self._write_ledger(base, end, self._compacted_entries(snap), now_ms())
            if not self._swap(list(snap.ledgers), new):
                return None
            return kept

    def _compacted_entries(self, snap: Snapshot) -> Iterator[tuple[bytes, int, int, int]]:
        """(batch, relative index, broker timestamp, records kept) of the entries compaction keeps."""
        contents = []
        latest: dict[bytes, int] = {}
        for ledger in snap.ledgers:
            reader = self.reader(ledger)
            entries = reader.read(0, 1 << 62) if len(reader.table()) else []
            for e in entries:
                batch = ReadEntry(ledger.base_offset + e.relative_index, e).record_batch()
                records = [] if batch.is_control else batch.records()
                contents.append((e, batch, records))
                for r in records:
                    if r.key is not None:
                        latest[r.key] = r.offset
        horizon = now_ms() - self.config.delete_retention_ms
        base = snap.ledgers[0].base_offset
        for e, batch, records in contents:
            survivors = [
                r
                for r in records
                if r.key is not None
                and latest[r.key] == r.offset
                and (r.value is not None or r.timestamp_ms >= horizon)
            ]
            if survivors:
                rebuilt = build_record_batch(
                    [Record(r.value, r.key, r.timestamp_ms, r.headers) for r in survivors],
                    compression=batch.compression,
                    timestamp_type=batch.timestamp_type,
                    log_append_time_ms=batch.max_timestamp,
                    offset_deltas=[r.offset - batch.base_offset for r in survivors],
                    last_offset_delta=batch.last_offset_delta,
                )
                yield rebuilt, batch.base_offset - base, e.broker_timestamp, len(survivors)

    def merge_ledgers(self, target_bytes: int) -> int:
        """Rewrite runs of adjacent small ledgers as one ledger per run of up to ``target_bytes``,
        without changing any offset: entries keep their batches byte for byte, only their relative
        indexes move to the new ledger's base. Ledgers of ``target_bytes / 2`` or more are left as
        they are, so a ledger is rewritten a few times at most. Closed ledgers that were never
        sealed (their writer died) come out sealed. Returns how many ledgers went away."""
        runs: list[list[LedgerInfo]] = [[]]
        for ledger in self.snapshot().ledgers:
            small = ledger.state != OPEN and ledger.length < target_bytes // 2
            if not small or sum(l.length for l in runs[-1]) + ledger.length > target_bytes:
                runs.append([])
            if small:
                runs[-1].append(ledger)
        with self._lock:
            return sum(len(run) - 1 for run in runs if len(run) > 1 and self._merge(run))

    def _merge_in_passing(self) -> None:
        """Keep the ledger list short when many writers take turns (each turn fences the last
        writer's ledger and starts a new one): merge a run of small ledgers of one size tier.
        The append this follows is already confirmed, so a failure here is only logged."""
        if self.config.merge_in_passing < 2 or self._state is None:
            return
        run: list[LedgerInfo] = []  # newest first
        for ledger in reversed([LedgerInfo(**l) for l in self._state.value["ledgers"]]):
            tier = _tier(ledger.length)
            small = ledger.state != OPEN and tier < _TIERS_MERGED_IN_PASSING
            if small and (not run or tier == _tier(run[-1].length)):
                run.append(ledger)
            else:
                run = [ledger] if small else []
            if len(run) == self.config.merge_in_passing:
                break
        if len(run) < self.config.merge_in_passing:
            return
        try:
            self._merge(run[::-1])
        except (KopError, OSError) as e:
            log.warning(
                "%s: merging %d small ledgers in passing failed (the append stands): %s", self.name, len(run), e
            )

    def _merge(self, run: list[LedgerInfo]) -> bool:
        def entries() -> Iterator[tuple[bytes, int, int, int]]:
            for ledger in run:
                reader = self.reader(ledger)
                k, n = 0, len(reader.table())
                while k < n:
                    read = reader.read(k, 8 << 20)
                    for e in read:
                        yield e.batch, ledger.base_offset - base + e.relative_index, e.broker_timestamp, e.record_count
                    k += len(read)

        base = run[0].base_offset
        new, _ = self._write_ledger(base, run[-1].end_offset, entries(), max(l.modified_ms for l in run))
        return self._swap(run, new)

    def _write_ledger(
        self, base: int, end: int, entries: Iterator[tuple[bytes, int, int, int]], modified_ms: int
    ) -> tuple[dict | None, int]:
        """A sealed ledger of ``entries`` spanning offsets ``[base, end)``, not yet referred to by
        anything; None when there are no entries. Returns it and the records in it."""
        writer = self._create_ledger_file()
        try:
            rows: list[EntryInfo] = []
            records = 0
            for batch, rel, broker_ts, count in entries:
                rows += writer.append([batch], rel, broker_ts)
                records += count
            if not rows:
                writer.close()
                delete_quietly(self.fileio, writer.path)
                return None, 0
            length = writer.seal(rows, end - base)
            writer.close()
        except BaseException:
            writer.close()
            delete_quietly(self.fileio, writer.path)
            raise
        new = _ledger_record(
            writer.ledger_id,
            writer.path,
            base,
            len(rows),
            end - base,
            length,
            max(r.max_timestamp for r in rows),
            now_ms(),
        )
        new["modified_ms"] = modified_ms if modified_ms >= 0 else new["modified_ms"]
        return new, records

    def _swap(self, run: list[LedgerInfo], new: dict | None) -> bool:
        """Replace ``run`` (adjacent ledgers, as a snapshot saw them) by ``new`` in one CAS, if
        they are still there unchanged; ``new`` None drops their offsets altogether. The old files
        go to the trash. False (and ``new`` deleted) when retention, another cleaner or a fenced
        writer's seal got there first, or ``new`` was condemned as an orphan."""
        replaced = [(l.id, l.length, l.state) for l in run]

        class Stale(Exception):
            pass

        def swap(meta: dict, now: int) -> dict:
            ids = [l["id"] for l in meta["ledgers"]]
            at = ids.index(run[0].id) if run[0].id in ids else -1
            current = meta["ledgers"][at : at + len(run)] if at >= 0 else []
            if [(l["id"], l["length"], l["state"]) for l in current] != replaced:
                raise Stale()
            _trash(meta, [l["file"] for l in current], now + self.config.file_delete_delay_ms)
            meta["ledgers"][at : at + len(run)] = [new] if new is not None else []
            if new is None and at == 0:  # nothing left of these offsets at all
                meta["log_start_offset"] = run[-1].end_offset
            return meta

        try:
            self._retry(swap)
        except (Stale, OrphanRemovedError):
            if new is not None:
                delete_quietly(self.fileio, new["file"])
            return False
        return True

    # -- checking and repair ---------------------------------------------------------------

    def check(self) -> list[str]:
        """Everything wrong with this partition: metadata whose offsets do not run through its
        ledgers, and confirmed entries that are missing, torn or corrupt. Empty when all is well."""
        snap = self.snapshot()
        problems = structure_problems(self.name, snap.log_start_offset, snap.next_offset, snap.ledgers)
        return problems + [c.problem for c in self._check_ledgers(snap) if c.problem]

    def _check_ledgers(self, snap: Snapshot) -> Iterator[LedgerCheck]:
        for l in snap.ledgers:
            if l.entries:
                yield check_ledger(
                    self.fileio, l.file, l.base_offset, l.entries, l.records, l.length, l.state == SEALED
                )

    def repair(self, dry_run: bool = False) -> tuple[int, int] | None:
        """Truncate the log at its first damaged entry, as Kafka's log recovery does: the intact
        entries before it stay (rewritten as a sealed ledger), everything after goes, and the log
        end moves back to the last intact offset. Idempotence records past the new end are
        forgotten, so their writers' retries append again. Returns the offsets dropped as
        ``(new end, old end)``, or None when there was nothing to repair; ``dry_run`` only says."""
        with self._lock:
            snap = self.snapshot()
            damaged = next((c for c in self._check_ledgers(snap) if not c.ok), None)
            if damaged is None:
                if snap.ledgers and snap.ledgers[-1].end_offset < snap.next_offset:
                    end = snap.ledgers[-1].end_offset
                    return (end, snap.next_offset) if dry_run else self._truncate(snap, len(snap.ledgers), None, end)
                return None
            if dry_run:
                return damaged.intact_end, snap.next_offset
            at = next(i for i, l in enumerate(snap.ledgers) if l.file == damaged.file)
            ledger = snap.ledgers[at]
            kept = (
                (e.batch, e.relative_index, e.broker_timestamp, e.record_count)
                for e in islice(
                    intact_entries(self.fileio, ledger.file, ledger.length, ledger.state == SEALED),
                    damaged.intact_entries,
                )
            )
            new, _ = self._write_ledger(ledger.base_offset, damaged.intact_end, kept, ledger.modified_ms)
            return self._truncate(snap, at, new, damaged.intact_end)

    def _truncate(self, snap: Snapshot, at: int, new: dict | None, end: int) -> tuple[int, int]:
        replaced = [l.id for l in snap.ledgers[at:]]

        def change(meta: dict, now: int) -> dict:
            if [l["id"] for l in meta["ledgers"][at:]] != replaced or meta["next_offset"] != snap.next_offset:
                raise StorageError(f"{self.name}: the log changed while it was being repaired; run the repair again")
            _trash(meta, [l["file"] for l in meta["ledgers"][at:]], now + self.config.file_delete_delay_ms)
            meta["ledgers"][at:] = [new] if new is not None else []
            meta["next_offset"] = end
            meta["log_start_offset"] = min(meta["log_start_offset"], end)
            for table in (meta["producers"], meta.get("sinks", {})):
                for writer in [w for w, p in table.items() if p["base_offset"] + p["count"] > end]:
                    del table[writer]
            return meta

        try:
            self._retry(change)
        except BaseException:
            if new is not None:
                delete_quietly(self.fileio, new["file"])
            raise
        return end, snap.next_offset

    # -- retention, orphans and the CAS that applies every change ---------------------------

    def enforce_retention(self) -> None:
        """Apply retention and delete trashed files past their grace period, now. Two passes:
        files trashed by the first are deleted by the second, once their grace (maybe none) is over."""
        with self._lock:
            self._retry(lambda meta, now: meta)
            self._retry(lambda meta, now: meta)

    def remove_orphans(self, files: Iterable[tuple[str, float]], grace_ms: int) -> list[str]:
        """Delete ``files`` (path, modification time in s) of this partition that no metadata
        refers to and that are older than ``grace_ms``. They are condemned first, by a CAS that
        checks they are still unreferenced; a writer's CAS that would refer to a condemned file
        fails. So a file a writer is about to confirm is never deleted, whatever the grace."""
        files = list(files)

        def condemn(meta: dict, now: int) -> dict | None:
            known = _referenced(meta) | set(meta.get("condemned", []))
            new = [f for f, mtime in files if f not in known and now - mtime * 1000 >= grace_ms]
            if not new:
                return None
            meta["condemned"] = sorted(set(meta.get("condemned", [])) | set(new))
            return meta

        def acquit(done: list[str]) -> Change:
            def change(meta: dict, now: int) -> dict | None:
                left = [f for f in meta.get("condemned", []) if f not in done]
                if left == meta.get("condemned", []):
                    return None
                meta["condemned"] = left
                return meta

            return change

        with self._lock:
            self._retry(condemn, allow_deleted=True)
            condemned = list(self._state.value.get("condemned", [])) if self._state else []
            for f in condemned:
                self.fileio.delete(f)
            if condemned:
                self._retry(acquit(condemned), allow_deleted=True)
            return condemned

    def _update(self, change: Change, *, allow_deleted: bool = False) -> None:
        """Read-modify-CAS once, with retention and trash handling folded into the same CAS.

        ``change(meta, now)`` edits a copy of the metadata and returns it (or None for no change).
        Raises BadVersionError when another writer got there first; the caller decides to retry.
        """
        state = self._state if self._state is not None else self._load(allow_deleted)
        self._state = None  # unknown until this attempt is known to have gone through, or not
        if state.value is None or (state.value.get("deleted") and not allow_deleted):
            raise ManagedLedgerDeletedError(self.key)
        now = now_ms()
        new = change(marshal.loads(marshal.dumps(state.value)), now)  # a deep copy, in C
        if new is None:
            self._state = state
            return
        if not new.get("deleted"):
            self._apply_retention(new, now)
            self._expire_producers(new, now)
        self._purge_trash(state.value, new, now)
        if new == state.value:
            self._state = state
            return
        self._check_added_files(state.value, new)
        version = self.store.put(self.key, new, state.version)
        self._state = Versioned(new, version)

    def _check_added_files(self, committed: dict, new: dict) -> None:
        """Files a change starts referring to must not be orphans condemned by maintenance. An
        orphan is condemned by one CAS, deleted, then acquitted by another: while condemned, the
        list says so; once acquitted, it is already gone, which a look at the file tells, since
        ``committed`` (read after the acquitting CAS) is what this change is based on."""
        for f in _referenced(new) - _referenced(committed):
            if f in new.get("condemned", ()) or not self.fileio.exists(f):
                raise OrphanRemovedError(f"{self.name}: {f} was removed as an orphan before it was referred to")

    def _apply_retention(self, meta: dict, now: int) -> None:
        cfg = self.config
        if not cfg.delete_policy:
            return
        ledgers = meta["ledgers"]
        size = sum(l["length"] for l in ledgers)
        dropped = 0
        for l in ledgers:
            if l["state"] == OPEN:
                break
            too_old = cfg.retention_ms >= 0 and LedgerInfo(**l).retention_time < now - cfg.retention_ms
            # Kafka drops a segment only while the log stays at or above retention.bytes without it.
            too_big = cfg.retention_bytes >= 0 and size - l["length"] >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            size -= l["length"]
            dropped += 1
        if dropped:
            _trash(meta, [l["file"] for l in ledgers[:dropped]], now + cfg.file_delete_delay_ms)
            del ledgers[:dropped]
            meta["log_start_offset"] = ledgers[0]["base_offset"] if ledgers else meta["next_offset"]

    def _expire_producers(self, meta: dict, now: int) -> None:
        """Forget idempotent producers and exactly-once writers by time, never by count (as Kafka's
        producer.id.expiration.ms and transactional.id.expiration.ms)."""
        for table, expiration in (
            (meta["producers"], self.config.producer_expiration_ms),
            (meta.get("sinks", {}), self.config.sink_expiration_ms),
        ):
            for writer in [w for w, p in table.items() if p["ts"] < now - expiration]:
                del table[writer]

    def _purge_trash(self, committed: dict, meta: dict, now: int) -> None:
        """Delete trashed files whose grace has passed. Only entries of the ``committed`` version's
        trash qualify: a file is deleted only once a CAS that stopped referring to it has gone
        through, never on the strength of the CAS being prepared. A crash after the delete leaves
        a trash record of a missing file (harmless), never an unrecorded file."""
        due = {t["file"] for t in committed.get("trash", []) if t["delete_after_ms"] <= now}
        if not due:
            return
        for f in due:
            self.fileio.delete(f)
        meta["trash"] = [t for t in meta.get("trash", []) if t["file"] not in due]
