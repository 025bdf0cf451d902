"""A managed ledger's metadata, typed, and the changes made to it.

The metadata store holds it as JSON under the partition's key (``layout.managed_ledger_key``)::

    {"log_start_offset": int, "next_offset": int,             the start: the first ledger's base, or in it
     "ledgers":   [LedgerRecord, ...],                        oldest first, offsets contiguous
     "producers": {writer: {"seq", "base_offset", "count", "ts"}},   idempotent appends
     "sinks":     {writer: {"batch", "base_offset", "count", "ts"}}, exactly-once sinks' batches
     "kafka_producers": {producer id: ...},                   Kafka's idempotent producers (producer_state)
     "trash":     [{"file", "delete_after_ms"}, ...],          files no longer referred to
     "condemned": [file, ...],                                 orphans being removed
     "cleaning":  {"cleaner", "end_offset", "renewed_ms"},     a compaction under way
     "created_ms": int,                                        when the log was made (a topic made again)
     "deleted":   true}                                        only once the log is deleted

Every change is made to a ``LogMetadata`` read from one version and written back by
compare-and-set on that version (``ManagedLedger.apply``); the methods here only edit the copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple, TypedDict

from .producer_state import ProducerEntry

OPEN, CLOSED, SEALED = "open", "closed", "sealed"


class LedgerRecord(NamedTuple):
    """One ledger as the managed ledger records it; writers and readers share this one type.
    (A named tuple: every metadata read builds one per ledger, and tuples build fastest.)"""

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

    @classmethod
    def new(
        cls,
        ledger_id: int,
        file: str,
        base_offset: int,
        now: int,
        *,
        entries: int = 0,
        records: int = 0,
        length: int = 0,
        max_timestamp: int = -1,
        state: str = SEALED,
        owner: str | None = None,
        modified_ms: int = -1,
    ) -> LedgerRecord:
        """A ledger made at ``now``; it last grew at ``modified_ms`` (by default ``now``)."""
        modified = modified_ms if modified_ms >= 0 else now
        return cls(ledger_id, file, base_offset, entries, records, length, max_timestamp, now, state, owner, modified)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> LedgerRecord:
        # A cold reader builds one per ledger: by position, which takes a third of the time keywords
        # do. Any other set of fields goes by keyword: one an earlier version lacked takes its
        # default, and one this version does not know is refused rather than dropped on a rewrite.
        if len(value) == len(cls._fields):
            try:
                return tuple.__new__(cls, _LEDGER_FIELDS(value))
            except KeyError:
                pass
        return cls(**value)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "file": self.file,
            "base_offset": self.base_offset,
            "entries": self.entries,
            "records": self.records,
            "length": self.length,
            "max_timestamp": self.max_timestamp,
            "created_ms": self.created_ms,
            "modified_ms": self.modified_ms,
            "state": self.state,
            "owner": self.owner,
        }

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.records

    @property
    def sealed(self) -> bool:
        return self.state == SEALED

    @property
    def retention_time(self) -> int:
        """What time-based retention compares: the newest record's time, as Kafka; when no record
        has one, the time the ledger last grew (Kafka: the segment's modification time)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.modified_ms if self.modified_ms >= 0 else self.created_ms

    def contents(self) -> tuple[int, int, int, int]:
        """What identifies the records this ledger holds. A seal adds only its table (a closed
        ledger sealed by its writer holds what it held), where a rewrite makes a new ledger."""
        return self.id, self.base_offset, self.entries, self.records


_LEDGER_FIELDS = itemgetter(*LedgerRecord._fields)


class WriterRecord(NamedTuple):
    """An idempotent producer's last append (``seq``) or an exactly-once sink's last batch."""

    seq: int
    base_offset: int
    record_count: int
    ts: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.record_count


class CleaningMark(NamedTuple):
    """A compaction under way, as Kafka's cleaner marks a partition in progress: merges leave the
    ledgers before ``end_offset`` to it, so that it does not lose its swap to each of them. The
    compaction renews the mark as it reads; one not renewed for ``CLEANING_LEASE_MS`` is a killed
    compaction's, and nothing honours it."""

    cleaner: str
    end_offset: int
    renewed_ms: int

    def live(self, now: int) -> bool:
        return now - self.renewed_ms < CLEANING_LEASE_MS


CLEANING_LEASE_MS = 60_000


class TrashEntry(TypedDict):
    """A file no version refers to any more, and when it may go. Kept as the stored dict: a busy
    log's trash holds many entries, and every read of the metadata would otherwise rebuild them."""

    file: str
    delete_after_ms: int


def _writers(table: dict[str, dict[str, int]], seq: str) -> dict[str, WriterRecord]:
    return {w: WriterRecord(p[seq], p["base_offset"], p["count"], p["ts"]) for w, p in table.items()}


def _writers_json(table: dict[str, WriterRecord], seq: str) -> dict[str, dict[str, int]]:
    return {
        w: {seq: r.seq, "base_offset": r.base_offset, "count": r.record_count, "ts": r.ts} for w, r in table.items()
    }


@dataclass
class LogMetadata:
    """The metadata of one managed ledger, as one version of it reads."""

    log_start_offset: int = 0
    next_offset: int = 0
    ledgers: list[LedgerRecord] = field(default_factory=list)
    producers: dict[str, WriterRecord] = field(default_factory=dict)
    sinks: dict[str, WriterRecord] = field(default_factory=dict)  # ``seq`` is the batch id
    trash: list[TrashEntry] = field(default_factory=list)
    condemned: list[str] = field(default_factory=list)
    deleted: bool = False
    kafka_producers: dict[int, ProducerEntry] = field(default_factory=dict)  # see ``producer_state``
    cleaned_offset: int = 0  # where the last compaction reached (Kafka's cleaner checkpoint)
    cleaning: CleaningMark | None = None
    created_ms: int = 0  # when the log was made (0: by a kop that did not say), see ManagedLedgerConfig

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> LogMetadata:
        trash: list[TrashEntry] = value.get("trash", [])
        condemned = list(value.get("condemned", []))
        if value.get("deleted"):
            return cls(trash=trash, condemned=condemned, deleted=True)
        return cls(
            value["log_start_offset"],
            value["next_offset"],
            [LedgerRecord.from_json(l) for l in value["ledgers"]],
            _writers(value.get("producers", {}), "seq"),
            _writers(value.get("sinks", {}), "batch"),
            trash,
            condemned,
            kafka_producers={int(p): ProducerEntry.from_json(e) for p, e in value.get("kafka_producers", {}).items()},
            cleaned_offset=value.get("cleaned_offset", 0),
            cleaning=CleaningMark(**value["cleaning"]) if "cleaning" in value else None,
            created_ms=value.get("created_ms", 0),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any]
        if self.deleted:
            out = {"deleted": True}
        else:
            out = {
                "log_start_offset": self.log_start_offset,
                "next_offset": self.next_offset,
                "ledgers": [l.to_json() for l in self.ledgers],
                "producers": _writers_json(self.producers, "seq"),
            }
            if self.sinks:
                out["sinks"] = _writers_json(self.sinks, "batch")
            if self.kafka_producers:
                out["kafka_producers"] = {str(p): e.to_json() for p, e in self.kafka_producers.items()}
            if self.cleaned_offset:
                out["cleaned_offset"] = self.cleaned_offset
            if self.cleaning is not None:
                out["cleaning"] = self.cleaning._asdict()
            if self.created_ms:
                out["created_ms"] = self.created_ms
        out["trash"] = self.trash
        if self.condemned:
            out["condemned"] = self.condemned
        return out

    def copy(self) -> LogMetadata:
        """A copy to change (ledger and writer records are immutable; only the lists are copied)."""
        return LogMetadata(
            self.log_start_offset,
            self.next_offset,
            list(self.ledgers),
            dict(self.producers),
            dict(self.sinks),
            list(self.trash),
            list(self.condemned),
            self.deleted,
            dict(self.kafka_producers),
            self.cleaned_offset,
            self.cleaning,
            self.created_ms,
        )

    # -- what it says ------------------------------------------------------------------------

    @property
    def tail(self) -> LedgerRecord | None:
        return self.ledgers[-1] if self.ledgers else None

    def find(self, ledger_id: int) -> int:
        """Index of the ledger with ``ledger_id``; -1 if there is none."""
        return next((i for i, l in enumerate(self.ledgers) if l.id == ledger_id), -1)

    def referenced(self) -> set[str]:
        """Every file this version refers to: its ledgers and its trash."""
        return {l.file for l in self.ledgers} | {t["file"] for t in self.trash}

    # -- changes -----------------------------------------------------------------------------

    def add_ledger(self, ledger: LedgerRecord) -> None:
        """Append a ledger at the log end; its records join the log."""
        self.ledgers.append(ledger)
        self.next_offset = ledger.end_offset

    def confirm(self, entries: int, records: int, length: int, max_timestamp: int, now: int) -> None:
        """Confirm entries written to the open tail ledger: they become part of the log."""
        tail = self.ledgers[-1]
        self.ledgers[-1] = tail._replace(
            entries=tail.entries + entries,
            records=tail.records + records,
            length=length,
            max_timestamp=max(tail.max_timestamp, max_timestamp),
            modified_ms=now,
        )
        self.next_offset += records

    def fence_tail(self) -> None:
        """Close an open tail at its confirmed length: its writer's next change fails."""
        tail = self.tail
        if tail is not None and tail.state == OPEN:
            self.ledgers[-1] = tail._replace(state=CLOSED)

    def seal(self, at: int, length: int) -> None:
        """Record that the ledger at ``at`` was sealed (its file now ``length`` bytes, with its table)."""
        self.ledgers[at] = self.ledgers[at]._replace(length=length, state=SEALED, owner=None)

    def trash_files(self, files: Iterable[str], delete_after_ms: int) -> None:
        """Files this version stops referring to, deleted once readers' grace has passed."""
        self.trash = self.trash + [TrashEntry(file=f, delete_after_ms=delete_after_ms) for f in files]

    def replace_run(self, at: int, count: int, new: Sequence[LedgerRecord], delete_after_ms: int) -> None:
        """Replace ``count`` ledgers from ``at`` by ``new``, spanning the same offsets (none: their
        offsets hold nothing any more), trashing their files. Offsets do not change; dropping the
        head moves the log start."""
        run = self.ledgers[at : at + count]
        self.trash_files([l.file for l in run], delete_after_ms)
        self.ledgers[at : at + count] = list(new)
        if not new and at == 0 and run:
            self.log_start_offset = max(self.log_start_offset, run[-1].end_offset)

    def drop_head(self, count: int, delete_after_ms: int) -> None:
        """Retention: drop the ``count`` oldest ledgers; the log starts after them."""
        self.trash_files([l.file for l in self.ledgers[:count]], delete_after_ms)
        del self.ledgers[:count]
        head = self.ledgers[0].base_offset if self.ledgers else self.next_offset
        self.log_start_offset = max(self.log_start_offset, head)  # may be inside the head (delete_before)

    def delete_before(self, offset: int | None, delete_after_ms: int) -> bool:
        """Kafka's DeleteRecords: the log starts at ``offset`` (None: the log end), which may be
        inside a ledger, unless it starts later already (then False: no change). The closed ledgers
        wholly before it go; an open one stays, its writer's."""
        offset = self.next_offset if offset is None else offset
        if offset <= self.log_start_offset:
            return False
        count = 0
        for l in self.ledgers:
            if l.state == OPEN or l.end_offset > offset:
                break
            count += 1
        if count:
            self.drop_head(count, delete_after_ms)
        self.log_start_offset = max(self.log_start_offset, offset)
        return True

    def truncate(self, at: int, new: LedgerRecord | None, end: int, delete_after_ms: int) -> None:
        """Repair: replace the ledgers from ``at`` by ``new`` and end the log at ``end``; appends
        remembered past the new end are forgotten, so their writers' retries append again."""
        self.trash_files([l.file for l in self.ledgers[at:]], delete_after_ms)
        self.ledgers[at:] = [new] if new is not None else []
        self.next_offset = end
        self.log_start_offset = min(self.log_start_offset, end)
        self.cleaning = None  # a compaction under way loses its swap, and the offsets it held come again
        for table in (self.producers, self.sinks):
            for writer in [w for w, r in table.items() if r.end_offset > end]:
                del table[writer]
        for producer in [p for p, e in self.kafka_producers.items() if e.end_offset > end]:
            del self.kafka_producers[producer]

    def mark_deleted(self, delete_after_ms: int) -> None:
        """The log is deleted: every ledger goes to the trash; only trash and orphans are kept."""
        self.trash_files([l.file for l in self.ledgers], delete_after_ms)
        self.ledgers, self.producers, self.sinks, self.deleted = [], {}, {}, True
        self.kafka_producers = {}
