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
"""

from __future__ import annotations

import bisect
import copy
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import BadVersionError, CorruptRecordError, StorageError
from ..record import Record, RecordBatch, build_record_batch
from ..record.default_record_batch import with_base_offset
from .fileio import FileIO
from .ledger import FILE_HEADER, Entry, EntryInfo, IOStats, LedgerReader, LedgerWriter
from .metadata_store import MetadataStore, Versioned

OPEN, CLOSED, SEALED = "open", "closed", "sealed"
_MAX_SINKS = 1000  # exactly-once writers whose last batch a partition remembers
_MAX_ATTEMPTS = 10_000


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
    owner: Optional[str]

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.records


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


def read_slice(fileio: FileIO, ledger: LedgerSlice, start: int, end: int, max_bytes: int = 8 << 20,
               stats: Optional[IOStats] = None) -> Iterator[ReadEntry]:
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
        self._rows: List[EntryInfo] = []
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
    ledgers: Tuple[LedgerInfo, ...]
    _bases: Tuple[int, ...] = field(repr=False, default=())
    _running_max_ts: Tuple[int, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, meta: dict, version: int) -> "Snapshot":
        ledgers = tuple(LedgerInfo(**l) for l in meta["ledgers"])
        running, top = [], -(1 << 63)
        for l in ledgers:
            top = max(top, l.max_timestamp)
            running.append(top)
        return cls(version, meta["log_start_offset"], meta["next_offset"], ledgers,
                   tuple(l.base_offset for l in ledgers), tuple(running))

    def ledger_for_offset(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def ledger_for_timestamp(self, timestamp: int) -> int:
        return bisect.bisect_left(self._running_max_ts, timestamp)

    def slices(self, start: int, end: int) -> List[LedgerSlice]:
        """The ledgers holding offsets in ``[start, end)``."""
        out = []
        for ledger in self.ledgers[max(self.ledger_for_offset(start), 0):]:
            if ledger.base_offset >= end:
                break
            if ledger.end_offset > start and ledger.entries:
                out.append(LedgerSlice(ledger.file, ledger.length, ledger.state == SEALED, ledger.base_offset, ledger.end_offset))
        return out

    @property
    def size_bytes(self) -> int:
        return sum(l.length for l in self.ledgers)


def _empty_metadata(log_start_offset: int = 0) -> dict:
    return {"log_start_offset": log_start_offset, "next_offset": log_start_offset, "ledgers": [], "producers": {}, "trash": []}


class ManagedLedger:
    """One partition's log. Safe to use from several processes at once; one instance per writer."""

    def __init__(
        self,
        name: str,
        key: str,
        data_dir: str,
        store: MetadataStore,
        fileio: FileIO,
        config: ManagedLedgerConfig = ManagedLedgerConfig(),
        writer_id: Optional[str] = None,
        stats: Optional[IOStats] = None,
    ):
        self.name = name  # for messages, e.g. "orders-0"
        self.key = key
        self.data_dir = data_dir
        self.store = store
        self.fileio = fileio
        self.config = config
        self.writer_id = writer_id or uuid.uuid4().hex
        self.stats = stats if stats is not None else IOStats()
        self._state: Optional[Versioned] = None
        self._writer: Optional[LedgerWriter] = None
        self._rows: List[EntryInfo] = []  # every row written to our open ledger, confirmed or not

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
        store.put(key, meta, current.version)

    def delete(self) -> None:
        """Drop every ledger; files go to the trash and are deleted after the grace period."""

        def change(meta: dict, now: int) -> dict:
            trash = meta.get("trash", []) + [
                {"file": l["file"], "delete_after_ms": now + self.config.file_delete_delay_ms} for l in meta["ledgers"]
            ]
            return {"deleted": True, "trash": trash}

        self._retry(change)
        self._drop_writer()

    def close(self) -> None:
        """Seal this writer's open ledger so readers get its entry table and nobody must fence it."""
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
        self._retry(lambda meta, now: meta, allow_deleted=True)
        value = self._state.value if self._state else None
        return bool(value and value.get("deleted") and not value.get("trash"))

    def _retry(self, change, *, allow_deleted: bool = False) -> None:
        for _ in range(_MAX_ATTEMPTS):
            try:
                return self._update(change, allow_deleted=allow_deleted)
            except BadVersionError:
                continue
        raise StorageError(f"{self.name}: gave up after {_MAX_ATTEMPTS} lost compare-and-sets")

    def _drop_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._rows = []

    # -- reads -----------------------------------------------------------------------------

    def _load(self, allow_deleted: bool = False) -> Versioned:
        state = self.store.get(self.key)
        self._state = state
        if state.value is None or (state.value.get("deleted") and not allow_deleted):
            raise ManagedLedgerDeletedError(self.key)
        return state

    def snapshot(self) -> Snapshot:
        """The current state, read fresh from the metadata store."""
        state = self._load()
        return Snapshot.of(state.value, state.version)

    def reader(self, ledger: LedgerInfo) -> LedgerReader:
        return LedgerReader(self.fileio, ledger.file, ledger.length, ledger.state == SEALED, self.stats)

    def read(self, snapshot: Snapshot, offset: int, max_bytes: int, max_records: Optional[int] = None) -> List[ReadEntry]:
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

    def entry_for_timestamp(self, snapshot: Snapshot, timestamp: int) -> Optional[ReadEntry]:
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
        idempotence_key: Optional[Tuple[str, int]] = None,
        broker_timestamp: Optional[int] = None,
    ) -> AppendResult:
        """Append record batches as consecutive entries, atomically; return the first offset."""
        if not batches:
            raise ValueError("nothing to append")
        count = sum(RecordBatch(b).offset_span for b in batches)
        result: List[AppendResult] = []

        def change(meta: dict, now: int) -> Optional[dict]:
            result.clear()  # from an attempt whose CAS lost
            if idempotence_key is not None:
                seen = meta["producers"].get(idempotence_key[0])
                if seen is not None and idempotence_key[1] <= seen["seq"]:
                    if idempotence_key[1] == seen["seq"]:
                        result.append(AppendResult(seen["base_offset"], seen["count"], True))
                    else:
                        result.append(AppendResult(-1, count, True))
                    return None
            ledger = self._writable_tail(meta, now)
            base = meta["next_offset"]
            rel = ledger["records"]
            rows = self._writer.append(batches, rel, broker_timestamp if broker_timestamp is not None else now)
            self._writer.sync()
            self._rows.extend(rows)
            ledger["entries"] += len(rows)
            ledger["records"] += count
            ledger["length"] = self._writer.position
            ledger["max_timestamp"] = max([ledger["max_timestamp"]] + [r.max_timestamp for r in rows])
            meta["next_offset"] = base + count
            if idempotence_key is not None:
                meta["producers"][idempotence_key[0]] = {"seq": idempotence_key[1], "base_offset": base, "count": count, "ts": now}
            result.append(AppendResult(base, count))
            return meta

        self._retry(change)
        return result[-1]

    def append_ledgers(self, staged: Sequence[StagedLedger], sink_key: Tuple[str, int]) -> AppendResult:
        """Append staged ledgers whole, as the partition's next ledgers, in one CAS that gives them
        offsets: an exactly-once sink's commit. ``sink_key`` = (writer, batch): a batch the writer
        already appended (or an older one) is not appended again."""
        staged = [s for s in staged if s.records]
        moved = [(s, f"{self.data_dir}/{s.ledger_id:016x}.ledger") for s in staged]
        for s, path in moved:
            self.fileio.rename(s.file, path)
        result: List[AppendResult] = []

        def change(meta: dict, now: int) -> Optional[dict]:
            result.clear()
            sinks = meta.setdefault("sinks", {})
            seen = sinks.get(sink_key[0])
            if seen is not None and sink_key[1] <= seen["batch"]:
                result.append(AppendResult(seen["base_offset"] if sink_key[1] == seen["batch"] else -1, seen["count"], True))
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
                ledgers.append({
                    "id": s.ledger_id, "file": path, "base_offset": offset, "entries": s.entries, "records": s.records,
                    "length": s.length, "max_timestamp": s.max_timestamp, "created_ms": now, "state": SEALED, "owner": None,
                })
                offset += s.records
            meta["next_offset"] = offset
            sinks[sink_key[0]] = {"batch": sink_key[1], "base_offset": base, "count": offset - base, "ts": now}
            if len(sinks) > _MAX_SINKS:  # bounded; a running query refreshes its own entry every batch
                for writer in sorted(sinks, key=lambda w: sinks[w]["ts"])[: len(sinks) - _MAX_SINKS]:
                    del sinks[writer]
            result.append(AppendResult(base, offset - base))
            return meta

        # Should the CAS fail, the moved files stay unreferenced until maintenance removes them:
        # deleting them here could race a CAS that did go through.
        self._retry(change)
        if result[-1].duplicate:
            for _, path in moved:
                self.fileio.delete(path)
        return result[-1]

    def _writable_tail(self, meta: dict, now: int) -> dict:
        """Make sure the tail ledger is our own open one, with room, positioned at its confirmed end."""
        ledgers = meta["ledgers"]
        tail = ledgers[-1] if ledgers else None
        mine = (
            tail is not None
            and tail["state"] == OPEN
            and tail["owner"] == self.writer_id
            and self._writer is not None
            and self._writer.ledger_id == tail["id"]
        )
        if mine:
            del self._rows[tail["entries"] :]  # forget rows of appends that were never confirmed
            if self._writer.position != tail["length"]:
                self._writer.truncate(tail["length"])
            cfg = self.config
            if (
                tail["entries"] >= cfg.max_entries_per_ledger
                or tail["length"] >= cfg.max_bytes_per_ledger
                or now - tail["created_ms"] >= cfg.max_ledger_age_ms
            ):
                self._seal_own_tail(meta, now)
            else:
                return tail
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
        elif own is None and not any(t["file"] == self._writer.path for t in meta.get("trash", [])):
            path = self._writer.path
            self._drop_writer()
            self.fileio.delete(path)  # created by an attempt whose CAS lost: nobody refers to it
        else:
            self._drop_writer()

    def _seal_own_tail(self, meta: dict, now: int) -> dict:
        tail = meta["ledgers"][-1] if meta["ledgers"] else None
        if self._writer is None or tail is None or tail["id"] != self._writer.ledger_id or tail["state"] != OPEN:
            self._finish_fenced(meta)
            return meta
        self._seal(tail)
        return meta

    def _seal(self, ledger: dict) -> None:
        """Seal our ledger file at its confirmed length (dropping any unconfirmed tail)."""
        self._writer.truncate(ledger["length"])
        ledger["length"] = self._writer.seal(self._rows[: ledger["entries"]], ledger["records"])
        ledger["state"], ledger["owner"] = SEALED, None
        self._drop_writer()

    def _create_ledger_file(self) -> LedgerWriter:
        ledger_id = uuid.uuid4().int >> 65
        return LedgerWriter.create(self.fileio, f"{self.data_dir}/{ledger_id:016x}.ledger", ledger_id)

    def _new_ledger(self, meta: dict, now: int) -> dict:
        self._writer = self._create_ledger_file()
        self._rows = []
        ledger = {
            "id": self._writer.ledger_id,
            "file": self._writer.path,
            "base_offset": meta["next_offset"],
            "entries": 0,
            "records": 0,
            "length": FILE_HEADER.size,
            "max_timestamp": -1,
            "created_ms": now,
            "state": OPEN,
            "owner": self.writer_id,
        }
        meta["ledgers"].append(ledger)
        return ledger

    def compact(self) -> Optional[int]:
        """Keep only the latest record of each key (and tombstones younger than
        ``delete_retention_ms``), as Kafka's log cleaner does, without changing any offset.

        The whole log is rewritten into one sealed ledger that keeps the offsets of the records it
        keeps; the offsets in between simply hold nothing any more. The open tail is sealed (or
        fenced) first so that it is compacted too. Returns the records kept, or None when the log
        changed under the compaction (another compaction or retention won; nothing is lost).
        """

        def close_tail(meta: dict, now: int) -> Optional[dict]:
            tail = meta["ledgers"][-1] if meta["ledgers"] else None
            if tail is None or tail["state"] != OPEN:
                return None
            if self._writer is not None and tail["id"] == self._writer.ledger_id:
                return self._seal_own_tail(meta, now)
            tail["state"] = CLOSED
            return meta

        self._retry(close_tail)
        snap = self.snapshot()
        if not snap.ledgers:
            return 0
        contents = []
        latest: Dict[bytes, int] = {}
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
        now = now_ms()
        base = snap.ledgers[0].base_offset
        end = snap.ledgers[-1].end_offset
        writer = self._create_ledger_file()
        path = writer.path
        rows: List[EntryInfo] = []
        kept = 0
        for e, batch, records in contents:
            survivors = [
                r for r in records
                if r.key is not None and latest[r.key] == r.offset
                and (r.value is not None or r.timestamp_ms >= now - self.config.delete_retention_ms)
            ]
            if not survivors:
                continue
            rebuilt = build_record_batch(
                [Record(r.value, r.key, r.timestamp_ms, r.headers) for r in survivors],
                compression=batch.compression,
                timestamp_type=batch.timestamp_type,
                log_append_time_ms=batch.max_timestamp,
                offset_deltas=[r.offset - batch.base_offset for r in survivors],
                last_offset_delta=batch.last_offset_delta,
            )
            rows += writer.append([rebuilt], batch.base_offset - base, e.broker_timestamp)
            kept += len(survivors)
        writer.sync()
        new = {
            "id": writer.ledger_id, "file": path, "base_offset": base, "entries": len(rows), "records": end - base,
            "length": writer.seal(rows, end - base), "max_timestamp": max((r.max_timestamp for r in rows), default=-1),
            "created_ms": now, "state": SEALED, "owner": None,
        }
        writer.close()
        replaced = [(l.id, l.length, l.state) for l in snap.ledgers]

        class Stale(Exception):
            pass

        def swap(meta: dict, now: int) -> dict:
            head = meta["ledgers"][: len(replaced)]
            if [(l["id"], l["length"], l["state"]) for l in head] != replaced:
                raise Stale()
            meta["trash"] = meta.get("trash", []) + [
                {"file": l["file"], "delete_after_ms": now + self.config.file_delete_delay_ms} for l in head
            ]
            meta["ledgers"][: len(replaced)] = [new] if rows else []
            if not rows:  # nothing left of these offsets at all
                meta["log_start_offset"] = end
            return meta

        try:
            self._retry(swap)
        except Stale:
            self.fileio.delete(path)
            return None
        if not rows:
            self.fileio.delete(path)
        return kept

    def merge_ledgers(self, target_bytes: int) -> int:
        """Rewrite runs of adjacent small ledgers as one ledger per run of up to ``target_bytes``,
        without changing any offset: entries keep their batches byte for byte, only their relative
        indexes move to the new ledger's base. Ledgers of ``target_bytes / 2`` or more are left as
        they are, so a ledger is rewritten a few times at most. Closed ledgers that were never
        sealed (their writer died) come out sealed. Returns how many ledgers went away."""
        runs: List[List[LedgerInfo]] = [[]]
        for ledger in self.snapshot().ledgers:
            small = ledger.state != OPEN and ledger.length < target_bytes // 2
            if not small or sum(l.length for l in runs[-1]) + ledger.length > target_bytes:
                runs.append([])
            if small:
                runs[-1].append(ledger)
        return sum(len(run) - 1 for run in runs if len(run) > 1 and self._merge(run))

    def _merge(self, run: List[LedgerInfo]) -> bool:
        base = run[0].base_offset
        writer = self._create_ledger_file()
        rows: List[EntryInfo] = []
        for ledger in run:
            reader = self.reader(ledger)
            k, n = 0, len(reader.table())
            while k < n:
                entries = reader.read(k, 8 << 20)
                for e in entries:
                    rows += writer.append([e.batch], ledger.base_offset - base + e.relative_index, e.broker_timestamp)
                k += len(entries)
        records = run[-1].end_offset - base
        new = {
            "id": writer.ledger_id, "file": writer.path, "base_offset": base, "entries": len(rows), "records": records,
            "length": writer.seal(rows, records), "max_timestamp": max(l.max_timestamp for l in run),
            "created_ms": now_ms(), "state": SEALED, "owner": None,
        }
        writer.close()
        replaced = [(l.id, l.length, l.state) for l in run]

        class Stale(Exception):
            pass

        def swap(meta: dict, now: int) -> dict:
            ids = [l["id"] for l in meta["ledgers"]]
            at = ids.index(run[0].id) if run[0].id in ids else -1
            current = meta["ledgers"][at : at + len(run)] if at >= 0 else []
            if [(l["id"], l["length"], l["state"]) for l in current] != replaced:
                raise Stale()  # retention, compaction or a fenced writer's seal got there first
            meta["trash"] = meta.get("trash", []) + [
                {"file": l["file"], "delete_after_ms": now + self.config.file_delete_delay_ms} for l in current
            ]
            meta["ledgers"][at : at + len(run)] = [new]
            return meta

        try:
            self._retry(swap)
        except Stale:
            self.fileio.delete(new["file"])
            return False
        return True

    def referenced_files(self) -> set:
        """Files this managed ledger refers to: its ledgers and its trash."""
        meta = self._load().value or {}
        return {l["file"] for l in meta.get("ledgers", [])} | {t["file"] for t in meta.get("trash", [])}

    def enforce_retention(self) -> None:
        """Apply retention and delete trashed files past their grace period, now."""
        self._update(lambda meta, now: meta)

    def _update(self, change, *, allow_deleted: bool = False) -> None:
        """Read-modify-CAS once, with retention and trash handling folded into the same CAS.

        ``change(meta, now)`` edits a copy of the metadata and returns it (or None for no change).
        Raises BadVersionError when another writer got there first; the caller decides to retry.
        """
        state = self._state if self._state is not None else self._load(allow_deleted)
        if state.value is None or (state.value.get("deleted") and not allow_deleted):
            raise ManagedLedgerDeletedError(self.key)
        now = now_ms()
        meta = copy.deepcopy(state.value)
        try:
            new = change(meta, now)
            if new is None:
                return
            if not new.get("deleted"):
                self._apply_retention(new, now)
                self._expire_producers(new, now)
            self._purge_trash(new, now)
            if new == state.value:
                return
            version = self.store.put(self.key, new, state.version)
        except BadVersionError:
            self._state = None  # re-read on the next attempt
            raise
        self._state = Versioned(new, version)

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
            too_old = cfg.retention_ms >= 0 and l["max_timestamp"] < now - cfg.retention_ms
            # Kafka drops a segment only while the log stays at or above retention.bytes without it.
            too_big = cfg.retention_bytes >= 0 and size - l["length"] >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            size -= l["length"]
            dropped += 1
        if dropped:
            meta["trash"] = meta.get("trash", []) + [
                {"file": l["file"], "delete_after_ms": now + cfg.file_delete_delay_ms} for l in ledgers[:dropped]
            ]
            del ledgers[:dropped]
            meta["log_start_offset"] = ledgers[0]["base_offset"] if ledgers else meta["next_offset"]

    def _expire_producers(self, meta: dict, now: int) -> None:
        horizon = now - self.config.producer_expiration_ms
        producers = meta["producers"]
        for writer in [w for w, p in producers.items() if p["ts"] < horizon]:
            del producers[writer]

    def _purge_trash(self, meta: dict, now: int) -> None:
        trash = meta.get("trash", [])
        due = [t for t in trash if t["delete_after_ms"] <= now]
        # Files go before their trash records: a crash in between leaves a record of a missing
        # file (harmless), never an unrecorded file.
        for t in due:
            self.fileio.delete(t["file"])
        if due:
            meta["trash"] = [t for t in trash if t["delete_after_ms"] > now]
