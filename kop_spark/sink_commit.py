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
last batch. A batch job (a new writer every time; Spark never reruns one) leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from .errors import BadVersionError, StorageError
from .faults import crash_point
from .storage.managed_ledger import StagedLedger, now_ms

if TYPE_CHECKING:
    from .broker import Broker

COMMITTING, DONE = "committing", "done"
_ATTEMPTS = 1000
TopicPartition = tuple[str, int]


class SinkBatch(NamedTuple):
    """A writer's batch record."""

    writer: str
    batch: int
    state: str
    streaming: bool
    updated_ms: int
    partitions: dict[TopicPartition, tuple[StagedLedger, ...]]

    def to_json(self) -> dict:
        return {
            "batch": self.batch,
            "state": self.state,
            "streaming": self.streaming,
            "updated_ms": self.updated_ms,
            "partitions": [
                {"topic": t, "partition": p, "ledgers": [list(l) for l in ledgers]}
                for (t, p), ledgers in sorted(self.partitions.items())
            ],
        }

    @classmethod
    def from_json(cls, writer: str, value: dict) -> SinkBatch:
        partitions = {
            (e["topic"], e["partition"]): tuple(StagedLedger(*l) for l in e["ledgers"]) for e in value["partitions"]
        }
        return cls(writer, value["batch"], value["state"], value["streaming"], value["updated_ms"], partitions)

    @property
    def staged_files(self) -> list[str]:
        return [l.file for ledgers in self.partitions.values() for l in ledgers]


def sink_key(writer: str) -> str:
    return f"sinks/{writer}"


class SinkCommits:
    """The batch records of a store, and the commits that apply them."""

    def __init__(self, broker: Broker):
        self._broker = broker
        self._store = broker.store

    def commit(
        self, writer: str, batch: int, staged: Mapping[TopicPartition, Sequence[StagedLedger]], *, streaming: bool
    ) -> SinkBatch | None:
        """Commit ``staged`` as ``writer``'s ``batch``, or complete the record of that batch if an
        earlier run made one. Returns the batch applied, or None if it was complete already (this
        run's ``staged`` output is then not used: the caller deletes it)."""
        record = self._begin(writer, batch, staged, streaming)
        if record is not None:
            self.complete(record)
        return record

    def _begin(
        self, writer: str, batch: int, staged: Mapping[TopicPartition, Sequence[StagedLedger]], streaming: bool
    ) -> SinkBatch | None:
        for _ in range(_ATTEMPTS):
            current = self._store.get(sink_key(writer))
            if current.value is not None:
                recorded = SinkBatch.from_json(writer, current.value)
                if recorded.batch > batch or (recorded.batch == batch and recorded.state == DONE):
                    return None
                if recorded.batch == batch:
                    return recorded  # a rerun: the first run's output is the batch
                if recorded.state == COMMITTING:
                    self.complete(recorded)  # an older batch left half done
                    continue
            record = SinkBatch(
                writer,
                batch,
                COMMITTING,
                streaming,
                now_ms(),
                {tp: tuple(ls) for tp, ls in staged.items() if any(l.records for l in ls)},
            )
            try:
                self._store.put(sink_key(writer), record.to_json(), current.version)
                return record
            except BadVersionError:
                continue
        raise StorageError(f"sink batch record of {writer}: gave up after {_ATTEMPTS} lost compare-and-sets")

    def complete(self, record: SinkBatch) -> None:
        """Append every partition of the batch that is not appended yet, then mark it done (a batch
        job's traces go instead)."""
        key = (f"spark:{record.writer}", record.batch)
        for applied, ((topic, partition), ledgers) in enumerate(sorted(record.partitions.items())):
            crash_point(self._broker.fileio, "sink-commit", applied)
            self._broker.append_staged(topic, partition, ledgers, key)
        if not record.streaming:
            for topic, partition in sorted(record.partitions):
                self._broker.forget_sink(topic, partition, key[0])
        self._set_state(record, DONE if record.streaming else None)

    def _set_state(self, record: SinkBatch, state: str | None) -> None:
        for _ in range(_ATTEMPTS):
            current = self._store.get(sink_key(record.writer))
            if current.value is None or SinkBatch.from_json(record.writer, current.value).batch != record.batch:
                return  # completed and moved on by another applier
            value = None if state is None else {**current.value, "state": state, "updated_ms": now_ms()}
            try:
                self._store.put(sink_key(record.writer), value, current.version)
                return
            except BadVersionError:
                continue

    def record(self, writer: str) -> SinkBatch | None:
        value = self._store.get(sink_key(writer)).value
        return None if value is None else SinkBatch.from_json(writer, value)

    def pending(self) -> list[SinkBatch]:
        """Batches recorded but not completed yet."""
        out = []
        for key in self._store.list_keys("sinks"):
            value = self._store.get(key).value
            if value is not None and value["state"] == COMMITTING:
                out.append(SinkBatch.from_json(key.split("/", 1)[1], value))
        return out

    def expire(self, older_than_ms: int) -> int:
        """Drop the records of streaming queries whose last batch is older than ``older_than_ms``."""
        dropped = 0
        for key in self._store.list_keys("sinks"):
            current = self._store.get(key)
            if (
                current.value is not None
                and current.value["state"] == DONE
                and current.value["updated_ms"] < older_than_ms
            ):
                try:
                    self._store.put(key, None, current.version)
                    dropped += 1
                except BadVersionError:
                    pass
        return dropped
