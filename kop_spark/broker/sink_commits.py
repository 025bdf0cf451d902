"""Exactly-once sink commits, all or nothing across partitions and topics.

A Spark write stages one sealed ledger per task attempt and target partition. Its commit first
records the whole batch — every staged ledger of every partition — in one CAS of the writer's
*batch record* (metadata key ``sinks/<writer>``), then appends it partition by partition; each
partition remembers the writer's last batch, so an append is never made twice. A commit that is
interrupted part way leaves the record ``committing``: whoever comes next — Spark's rerun of the
batch, or ``kop maintenance`` for a writer that is gone — completes *that record*, and a rerun's
own output is dropped, whatever its routing (new partitions, another ``minPartitions``).

Readers can see part of a batch only while a commit is being applied (between its first and last
partition's append, normally milliseconds), or after a driver died in between, until the batch's
rerun or ``kop maintenance`` completes it.

A streaming query (writer = its query id, stable across restarts) keeps its record, ``done`` after
each batch, and its batch in each partition, until ``transactional.id.expiration.ms`` after its
last batch (a partition of many such writers forgets finished ones sooner: ``sink_traces``). A
batch job (a new writer every time; Spark never reruns one) leaves nothing behind.

Maintenance removes the staged output of jobs that look gone (no task alive for ``SINK_LEASE_MS``).
A driver that was only slow may still come to commit it, so the ledgers are first *condemned* in the
writer's key, by a CAS that spares what a record names; a commit that would record a condemned
ledger fails instead (``OrphanRemovedError``), where it would have recorded a batch nobody can
append. Condemnations expire with ``transactional.id.expiration.ms``.

Spark aborts a failed batch job before it stops the job's other tasks, so a task may still be
writing, where the abort has already deleted the job's staged output. A batch job's abort is marked
in its key first (``aborted``, expiring as condemnations do), and a task looks for the mark once it
has written everything: found, it discards its own output; not found, the abort comes after and
finds it all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import layout
from ..errors import (
    BadVersionError,
    ManagedLedgerDeletedError,
    OrphanRemovedError,
    TopicNotFoundError,
    UnknownTopicOrPartitionError,
)
from ..faults import crash_point
from ..group.coordinator import OffsetAndMetadata
from ..storage.at_once import all_at_once
from ..storage.metadata_store import Unchanged, update
from ..storage.staging import LedgerStager, StagedLedger, staged_run, task_stager
from ..topic_name import TopicPartition
from .admin import TopicMeta
from .validation import StagedPartition

if TYPE_CHECKING:
    from .broker import Broker

COMMITTING, DONE = "committing", "done"
TRACE_PREFIX = "spark:"  # before a writer's name where partitions keep its last batch
CONDEMNED = "condemned"  # in a writer's key beside its record: {ledger id: when it was condemned, ms}
ABORTED = "aborted"  # in a batch job's key: when Spark aborted it, ms
_MARKS = (CONDEMNED, ABORTED)
SINK_HEARTBEAT_MS = 10_000  # a task writing staged ledgers touches its directory this often
SINK_LEASE_MS = 60_000  # staged output with no heartbeat this long belongs to a job that is gone


GroupOffsets = Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]]  # by group


def offsets_to_json(offsets: GroupOffsets) -> list[dict]:
    return [
        {"group": g, "topic": t, "partition": p, "offset": o.offset, "metadata": o.metadata}
        for g, by_partition in sorted(offsets.items())
        for (t, p), o in sorted(by_partition.items())
    ]


def offsets_from_json(entries: Iterable[dict]) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    for e in entries:
        offsets.setdefault(e["group"], {})[(e["topic"], e["partition"])] = OffsetAndMetadata(e["offset"], e["metadata"])
    return offsets


class SinkBatch(NamedTuple):
    """A writer's batch record: the staged ledgers of each partition, and the consumer offsets
    committed with them (a Kafka transaction's ``TxnOffsetCommit``), by group."""

    writer: str
    batch: int
    state: str
    streaming: bool
    updated_ms: int
    partitions: dict[TopicPartition, tuple[StagedLedger, ...]]
    offsets: GroupOffsets = MappingProxyType({})

    def to_json(self) -> dict:
        out = {
            "batch": self.batch,
            "state": self.state,
            "streaming": self.streaming,
            "updated_ms": self.updated_ms,
            "partitions": [
                {"topic": t, "partition": p, "ledgers": [list(l) for l in ledgers]}
                for (t, p), ledgers in sorted(self.partitions.items())
            ],
        }
        if self.offsets:
            out["offsets"] = offsets_to_json(self.offsets)
        return out

    @classmethod
    def from_json(cls, writer: str, value: dict) -> SinkBatch:
        partitions = {
            (e["topic"], e["partition"]): tuple(StagedLedger(*l) for l in e["ledgers"]) for e in value["partitions"]
        }
        state = (value["batch"], value["state"], value["streaming"], value["updated_ms"])
        return cls(writer, *state, partitions, offsets_from_json(value.get("offsets", ())))

    @property
    def ledgers(self) -> list[StagedLedger]:
        return [l for ledgers in self.partitions.values() for l in ledgers]

    @property
    def staged_files(self) -> list[str]:
        return [l.file for l in self.ledgers]


def _record_of(writer: str, value: dict | None) -> SinkBatch | None:
    return None if value is None or "batch" not in value else SinkBatch.from_json(writer, value)


def _marks(value: dict | None) -> dict:
    """What a writer's key holds beside its batch record."""
    return {k: v for k, v in (value or {}).items() if k in _MARKS}


def _condemned(value: dict | None) -> dict[str, int]:
    return dict((value or {}).get(CONDEMNED, {}))


def _record_part(value: dict | None) -> dict:
    return {k: v for k, v in (value or {}).items() if k not in _MARKS}


def _value(record: dict | None, marks: dict) -> dict | None:
    """A writer's key: its batch record and its marks, or None for neither."""
    out = {**(record or {}), **{k: v for k, v in marks.items() if v}}
    return out or None


def _unexpired(marks: dict, older_than_ms: int) -> dict:
    """The marks made at ``older_than_ms`` or after; none left empty."""
    out: dict = {}
    condemned = {i: ms for i, ms in marks.get(CONDEMNED, {}).items() if ms >= older_than_ms}
    if condemned:
        out[CONDEMNED] = condemned
    if marks.get(ABORTED, -1) >= older_than_ms:
        out[ABORTED] = marks[ABORTED]
    return out


class StagingTopic(NamedTuple):
    """A topic as a writer stages output for it: its metadata, read once for all its partitions
    (on an object store each read is a round trip, which a task writing a hundred partitions
    made a hundred times, in turn)."""

    name: str
    partitions: int
    config: Mapping[str, Any]  # the settings in effect
    meta: TopicMeta


class SinkCommits:
    """The batch records of a store, and the commits that apply them."""

    def __init__(self, broker: Broker):
        self._broker = broker
        self._store = broker.store
        self._clock = broker.clock

    def staging_topic(self, topic: str, meta: TopicMeta | None = None) -> StagingTopic:
        """``topic``, to stage output for (not an internal one); ``meta``: its metadata, read here
        if not given."""
        admin = self._broker.admin
        admin.refuse_internal(topic, "write to")
        meta = admin.metadata(topic)[1] if meta is None else meta
        return StagingTopic(topic, meta["partitions"], self._broker.config.topic_config(meta.get("config")), meta)

    def stage(
        self,
        topic: str | StagingTopic,
        partition: int,
        task_dir: str,
        ledger_id: Callable[[int], int] | None = None,
        *,
        durable: bool = False,
        resume: bool = False,
    ) -> StagedPartition:
        """Start staging ledgers for one partition, in ``task_dir`` (under the root), that no reader
        sees until a commit appends them. A Spark task stages its output this way. ``topic``: its
        name, or ``staging_topic``'s look at it; ``ledger_id(n)`` names the n-th ledger (random by
        default); ``resume`` takes up those staged before under the same names (``staged_run``);
        ``durable`` as ``StagedPartition``'s."""
        b = self._broker
        target = self.staging_topic(topic) if isinstance(topic, str) else topic
        log = b.admin.log(target.name, partition, target.meta)  # checks the partition
        roll_mb = b.config["managedLedgerMaxSizePerLedgerMbytes"]
        if not b.fileio.supports_append:  # built in memory before they are written
            roll_mb = min(roll_mb, b.config["wholeLedgerMaxSizeMbytes"])
        sealed = staged_run(b.fileio, log.ledger_path, task_dir, ledger_id) if resume and ledger_id else []
        names = itertools.count(len(sealed))

        def stager() -> LedgerStager:
            named = None if ledger_id is None else ledger_id(next(names))
            return task_stager(b.fileio, log.ledger_path, task_dir, named)

        return StagedPartition(
            target.name,
            partition,
            stager,
            roll_mb << 20,
            target.config,
            self._clock,
            b.fileio.delete,
            durable=durable,
            sealed=sealed,
        )

    def finish_each(self, staged: Sequence[StagedPartition]) -> list[tuple[StagedLedger, ...]]:
        """Each partition's staged ledgers, sealed (``StagedPartition.finish``): at once where
        ledgers are written whole when sealed, each a round trip; raises the first failure."""
        return all_at_once([s.finish for s in staged], self._broker.fileio.write_parallelism)

    def commit(
        self,
        writer: str,
        batch: int,
        staged: Mapping[TopicPartition, Sequence[StagedLedger]],
        *,
        streaming: bool,
        offsets: GroupOffsets | None = None,
    ) -> SinkBatch | None:
        """Commit ``staged`` as ``writer``'s ``batch``, with groups' ``offsets``, or complete the
        record of that batch if an earlier run made one. Returns the batch applied, or None if it
        was complete already (this run's ``staged`` output is then not used: the caller deletes it)."""
        record = self._begin(writer, batch, staged, streaming, offsets or {})
        if record is not None:
            self.complete(record)
        return record

    def _begin(
        self,
        writer: str,
        batch: int,
        staged: Mapping[TopicPartition, Sequence[StagedLedger]],
        streaming: bool,
        offsets: GroupOffsets,
    ) -> SinkBatch | None:
        partitions = {tp: tuple(ls) for tp, ls in staged.items() if any(l.records for l in ls)}
        record = SinkBatch(writer, batch, COMMITTING, streaming, self._clock.now_ms(), partitions, offsets)
        found: list[SinkBatch | None] = []

        def begin(value: dict | None) -> dict | None:
            found.clear()
            recorded = _record_of(writer, value)
            if recorded is not None:
                if recorded.batch > batch or (recorded.batch == batch and recorded.state == DONE):
                    found.append(None)
                    raise Unchanged
                if recorded.batch == batch:
                    found.append(recorded)  # a rerun: the first run's output is the batch
                    raise Unchanged
                if recorded.state == COMMITTING:
                    self.complete(recorded)  # an older batch left half done
                    raise BadVersionError("read the record again")
            condemned = _condemned(value)
            lost = [l for l in record.ledgers if str(l.ledger_id) in condemned]
            if lost:
                raise OrphanRemovedError(
                    f"batch {batch} of sink writer {writer!r}: maintenance removed its staged ledger "
                    f"{lost[0].file}, taking the job for gone (no task alive for {SINK_LEASE_MS // 1000} s); "
                    f"nothing was written, run the batch again"
                )
            found.append(record)
            return _value(record.to_json(), _marks(value))

        update(self._store, layout.sink_key(writer), begin)
        return found[-1]

    def complete(self, record: SinkBatch) -> None:
        """Append every partition of the batch that is not appended yet, commit its offsets, then
        mark it done (a batch job's record goes instead, then its traces in the partitions)."""
        key = (f"{TRACE_PREFIX}{record.writer}", record.batch)
        partitions = sorted(record.partitions.items())
        broker = self._broker
        appends = [partial(broker.append_staged, t, p, ledgers, key) for (t, p), ledgers in partitions]
        self._each_partition(appends, "sink-commit")
        for group, offsets in record.offsets.items():
            try:
                broker.commit_offsets(group, offsets)
            except UnknownTopicOrPartitionError:
                pass  # a topic deleted since: its offsets went with it
        self._set_state(record, DONE if record.streaming else None)
        if not record.streaming:
            # Only once the record is gone: a partition that has forgotten the batch would take it
            # again from whoever completed the record next. A crash in between leaves traces that
            # expire with transactional.id.expiration.ms, as a streaming query's do.
            forgets = [partial(self._forget, t, p, key) for (t, p), _ in partitions]
            self._each_partition(forgets, "sink-forget")

    def _forget(self, topic: str, partition: int, key: tuple[str, int]) -> None:
        """Drop a writer's record of its last batch in a partition: ``key`` = (writer, batch)."""
        try:
            self._broker.admin.log(topic, partition).forget_sinks(dict([key]))
        except (ManagedLedgerDeletedError, TopicNotFoundError):
            pass  # the topic is gone, and the record with it

    def _each_partition(self, steps: Sequence[Callable[[], object]], point: str) -> None:
        """Run one step a partition, as many at once as the metadata store takes (each is a CAS of its
        own partition's metadata: one after another, 32 partitions took 4.5 s where each request was
        a 10 ms round trip, and 1.3 s sixteen at once). A failure stops the steps not yet started
        and is raised once those under way have ended: the record stays ``committing`` for whoever
        completes it. A test's crash at ``point`` N dies once the N steps before it have ended,
        before its own."""
        futures: list[Future[object]] = []

        def step(i: int) -> object:
            crash_point(self._broker.fileio, point, i, lambda: wait(futures[:i]))
            return steps[i]()

        threads = min(self._store.update_parallelism, len(steps)) or 1
        pool = ThreadPoolExecutor(threads, thread_name_prefix="kop-sink-commit")
        try:
            for i in range(len(steps)):
                futures.append(pool.submit(step, i))
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            pool.shutdown(cancel_futures=True)
        for future in futures:
            if not future.cancelled():
                future.result()

    def _set_state(self, record: SinkBatch, state: str | None) -> None:
        def change(value: dict | None) -> dict | None:
            recorded = _record_of(record.writer, value)
            if recorded is None or recorded.batch != record.batch:
                raise Unchanged  # completed and moved on by another applier
            changed = (
                None if state is None else {**_record_part(value), "state": state, "updated_ms": self._clock.now_ms()}
            )
            return _value(changed, _marks(value))

        update(self._store, layout.sink_key(record.writer), change)

    def record(self, writer: str) -> SinkBatch | None:
        return _record_of(writer, self._store.get(layout.sink_key(writer)).value)

    def pending(self) -> list[SinkBatch]:
        """Batches recorded but not completed yet."""
        out = []
        for key in self._store.list_keys(layout.SINKS):
            record = _record_of(layout.writer_of_sink_key(key), self._store.get(key).value)
            if record is not None and record.state == COMMITTING:
                out.append(record)
        return out

    def expire(self, older_than_ms: int) -> int:
        """Drop the records of streaming queries whose last batch is older than ``older_than_ms``,
        and condemnations and aborts made before it."""
        dropped = 0
        for key in self._store.list_keys(layout.SINKS):
            current = self._store.get(key)
            record = _record_of(layout.writer_of_sink_key(key), current.value)
            old = record is not None and record.state == DONE and record.updated_ms < older_than_ms
            marks = _unexpired(_marks(current.value), older_than_ms)
            if old or marks != _marks(current.value):
                new = _value(None if old else _record_part(current.value), marks)
                try:
                    self._store.put(key, new, current.version)
                    dropped += old
                except BadVersionError:
                    pass
        return dropped

    def condemn(self, writer: str, ledger_ids: Collection[int]) -> set[int]:
        """Condemn staged ledgers of ``writer`` that maintenance is about to delete, its job taken
        for gone; spared are those its batch record names, which a commit is applying. Returns
        those condemned, which are safe to delete: no commit will record them (see the module)."""
        spared: set[int] = set()

        def change(value: dict | None) -> dict | None:
            spared.clear()
            record = _record_of(writer, value)
            if record is not None and record.state == COMMITTING:
                spared.update(l.ledger_id for l in record.ledgers)
            condemned = _condemned(value)
            new = {str(i) for i in ledger_ids if i not in spared} - condemned.keys()
            if not new:
                raise Unchanged
            now = self._clock.now_ms()
            return _value(_record_part(value), {**_marks(value), CONDEMNED: {**condemned, **dict.fromkeys(new, now)}})

        update(self._store, layout.sink_key(writer), change)
        return set(ledger_ids) - spared

    def abort(self, writer: str, batch: int, *, batch_job: bool) -> None:
        """Spark gave the batch up: delete what its tasks staged, except what a record of it needs.
        A batch job is first marked aborted. Spark stops its other tasks only after this, so one may
        still be writing, in a directory made again after it was deleted: it discards its output
        itself when it ends (``aborted``). A streaming query's batch cannot be marked, as Spark
        runs it again as the same writer; what its late tasks leave goes with the rerun's commit."""
        if batch_job:

            def mark(value: dict | None) -> dict | None:
                return _value(_record_part(value), {**_marks(value), ABORTED: self._clock.now_ms()})

            update(self._store, layout.sink_key(writer), mark)
        self.remove_staged(writer, batch)

    def aborted(self, writer: str) -> bool:
        """Whether the batch job ``writer`` was aborted."""
        return ABORTED in (self._store.get(layout.sink_key(writer)).value or {})

    def remove_staged(self, writer: str, batch: int) -> None:
        """Delete what a writer staged for a batch, except what its batch record still needs."""
        fileio = self._broker.fileio
        record = self.record(writer)
        needed = record is not None and record.batch == batch and record.state == COMMITTING
        keep = set(record.staged_files) if record is not None and needed else set()
        directory = layout.staging_dir(writer, batch)
        if not keep:
            fileio.delete_tree(directory)
        else:
            for path, _ in fileio.walk_files(directory):
                if path not in keep:
                    fileio.delete(path)
        fileio.delete_dir_if_empty(layout.staging_dir(writer))

    # -- what a task stages ----------------------------------------------------------------

    @staticmethod
    def task_dir(writer: str, batch: int, task: str) -> str:
        """The staging directory of one task attempt (``task`` names the attempt uniquely)."""
        return layout.staging_task_dir(writer, batch, task)

    def heartbeat(self, task_dir: str) -> None:
        """Say the task writing ``task_dir`` is alive (maintenance leaves live jobs' output alone)."""
        self._broker.fileio.touch(layout.heartbeat_file(task_dir))

    def discard_task(self, task_dir: str, *, job_aborted: bool = False) -> None:
        """Delete what a failed task attempt staged; once its job was aborted, also the directories
        it made again (no task of the job starts after the abort, to be making them too)."""
        fileio = self._broker.fileio
        fileio.delete_tree(task_dir)
        if job_aborted:
            fileio.delete_dir_if_empty(layout.staging_batch_of(task_dir))
            fileio.delete_dir_if_empty(layout.staging_dir(layout.staging_writer_of(task_dir)))
