"""Kafka transactions, their durable side (Kafka's transaction log): each transactional id's
producer id and epoch, its timeout, and the state of its current transaction, in one metadata key
(``kafka/transactions/txn-<digest>``) changed by CAS. The transaction under way is recorded there
as it grows (its partitions, groups and offsets, and the server that holds it), and each produce
is durable before it is answered, so the transaction outlives its server: the next takes it up.

A transaction's batches are staged (``_staging/txn-<digest>/<n>/``), never appended to a
partition before the transaction commits. Offsets so stay continuous, and every reader, whatever
its isolation level, sees committed records only: the log stable offset is the high watermark and
no fetch has aborted transactions to skip. Commit is a sink commit (``SinkCommits``) of batch
``n`` under the id's writer: every partition's staged ledgers and the consumer offsets sent with
TxnOffsetCommit, all or nothing, exactly once. Abort deletes what was staged.

States, as Kafka's coordinator names them: Empty, then Ongoing from the first partition or group
added, then CompleteCommit or CompleteAbort, then Ongoing with the next transaction. A new
InitProducerId bumps the epoch, fencing the older instance, and first ends a transaction left
Ongoing: rolled forward if its commit was recorded, aborted if not. Once its commit is recorded,
a transaction commits, whatever fails after: whoever comes next completes it. A transaction a
restarted server cannot take up is aborted with its epoch bumped, but the lost epoch is kept: its
producer is told so (UNKNOWN_PRODUCER_ID) rather than fenced, and may recover with InitProducerId
naming it (KIP-360).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import layout
from ..errors import (
    BadVersionError,
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from ..group.coordinator import OffsetAndMetadata
from ..storage.at_once import all_at_once, each_at_once
from ..storage.metadata_store import Unchanged, update
from ..storage.producer_state import BATCHES_RETAINED, ProducerEntry, check_producers
from ..storage.staging import StagedLedger, last_batches
from ..topic_name import TopicPartition
from .admin import TopicMeta
from .producer_batches import next_producer_id
from .sink_commits import (
    COMMITTING,
    SINK_LEASE_MS,
    GroupOffsets,
    offsets_from_json,
    offsets_to_json,
)
from .validation import StagedPartition, checked_batches, topic_metadata

if TYPE_CHECKING:
    from .broker import Broker

EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT = "Empty", "Ongoing", "CompleteCommit", "CompleteAbort"
# Kafka's states (ListTransactions filters by them); kop's transactions pass through no others.
STATES = frozenset({EMPTY, ONGOING, "PrepareCommit", "PrepareAbort", COMPLETE_COMMIT, COMPLETE_ABORT, "Dead"})
ProducerSequences = dict[int, ProducerEntry]  # a partition's producers' last batches (``producer_state``)
_MAX_EPOCH = 32767  # an int16: past it, the id gets a new producer id at epoch 0, as in Kafka


class TransactionState(NamedTuple):
    """A transactional id's durable state, and its transaction under way: when it began, the
    partitions and groups added to it, the offsets sent for them (Kafka's transaction log)."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str
    transaction: int  # the current transaction's number, or the last one's
    updated_ms: int
    lost_epoch: int = -1  # the epoch whose transaction a server could not take up: its producer may recover
    began_ms: int = -1  # when the transaction under way began; -1 where an older version wrote it
    partitions: tuple[TopicPartition, ...] = ()
    groups: tuple[str, ...] = ()
    offsets: GroupOffsets = MappingProxyType({})
    holder: str = ""  # the server (its transaction coordinator) that holds the transaction under way

    def to_json(self) -> dict[str, Any]:
        out = self._asdict()
        out["partitions"] = [list(tp) for tp in self.partitions]
        out["groups"] = list(self.groups)
        out["offsets"] = offsets_to_json(self.offsets)
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TransactionState:
        fields = {**value, "offsets": offsets_from_json(value.get("offsets", ()))}
        fields["partitions"] = tuple((t, p) for t, p in value.get("partitions", ()))
        fields["groups"] = tuple(value.get("groups", ()))
        return cls(**fields)

    @property
    def writer(self) -> str:
        return layout.transaction_writer(self.transactional_id)

    def check_owner(self, producer_id: int, epoch: int, *, recovering: bool = False) -> None:
        """Refuse a request from a producer that is not this id's current one. The producer whose
        transaction a server lost is told so, and may ``recover`` with InitProducerId (KIP-360)."""
        if producer_id != self.producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {self.transactional_id!r} belongs to producer {self.producer_id}, not {producer_id}"
            )
        lost = epoch == self.lost_epoch >= 0
        if lost and not recovering:
            raise UnknownProducerIdError(
                f"transactional id {self.transactional_id!r}: producer {producer_id}'s transaction under way at epoch "
                f"{epoch} was lost when the server restarted, and aborted: abort it, and begin the next"
            )
        if epoch != self.epoch and not lost:
            raise ProducerFencedError(
                f"transactional id {self.transactional_id!r}: producer {producer_id} has epoch {epoch}, but the "
                f"current epoch is {self.epoch}: a newer instance took the id over, or its transaction was aborted"
            )


class StagedAppend(NamedTuple):
    """A produce's batches for a partition of a transaction, and its producers' sequences there."""

    partition: TransactionPartition
    batches: Sequence[bytes]
    sequences: ProducerSequences


class TransactionPartition:
    """A partition's share of a transaction: produced batches, checked as a produce checks them,
    staged until the transaction ends."""

    def __init__(self, broker: Broker, topic: str, partition: int, staged: StagedPartition):
        self._broker = broker
        self.topic = topic
        self.partition = partition
        self._staged = staged

    def append(self, batches: Sequence[bytes], sequences: ProducerSequences, meta: TopicMeta | None = None) -> None:
        """Stage a produce's record batches, refused whole if one fails the broker's checks, and
        not again if they are a retry of batches staged already. ``sequences``: the producers'
        last batches in this partition, as an idempotent partition keeps them (checked, updated);
        ``meta``: the topic's, as the request read it (read here if not given)."""
        where = f"transactional produce to {self.topic}-{self.partition}"
        followed = dict(sequences)
        if check_producers(followed, batches, where, -1, self._broker.clock.now_ms()) is not None:
            return  # a retry
        checked = checked_batches(self._broker, self.topic, self.partition, batches, meta)
        self._staged.append_checked(checked.batches, checked.now)
        sequences.update(followed)

    def sequences(self) -> ProducerSequences:
        """The producers' last batches as staged here (by a server that stopped, when taken up)."""
        sequences: ProducerSequences = {}
        batches = last_batches(self._broker.fileio, self._staged.sealed, BATCHES_RETAINED)
        check_producers(sequences, batches, f"{self.topic}-{self.partition}", -1, self._broker.clock.now_ms())
        return sequences

    def finish(self) -> tuple[StagedLedger, ...]:
        return self._staged.finish()

    def abandon(self) -> None:
        """Leave what is staged to the server that took the transaction up."""
        self._staged.abandon()


class Transactions:
    def __init__(self, broker: Broker):
        self._broker = broker
        self._store = broker.store
        self._clock = broker.clock

    def get(self, transactional_id: str) -> TransactionState | None:
        value = self._store.get(layout.transaction_key(transactional_id)).value
        return None if value is None else TransactionState.from_json(value)

    def _change(
        self, transactional_id: str, change: Callable[[TransactionState | None], TransactionState]
    ) -> TransactionState:
        """CAS the id's state to ``change(current)``, which may raise ``Unchanged``; returns the
        state the id is left in."""
        result: list[TransactionState] = []

        def apply(value: dict | None) -> dict:
            old = None if value is None else TransactionState.from_json(value)
            try:
                new = change(old)._replace(updated_ms=self._clock.now_ms())
            except Unchanged:
                result[:] = [old] if old is not None else []
                raise
            result[:] = [new]
            return new.to_json()

        update(self._store, layout.transaction_key(transactional_id), apply)
        return result[0]

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, current: tuple[int, int] | None = None
    ) -> TransactionState:
        """The id's producer with its epoch bumped (a new producer id at first use), fencing any
        older instance; a transaction it left Ongoing is ended first. ``current`` (a producer
        recovering, KIP-360) must be the id's producer and epoch."""
        found = self.get(transactional_id)
        if found is not None and found.state == ONGOING:
            if current is not None:
                found.check_owner(*current, recovering=True)
            self.end(found, lost=True)
        fresh: list[int] = []

        def bump(old: TransactionState | None) -> TransactionState:
            if old is not None and current is not None:
                old.check_owner(*current, recovering=True)
            if old is not None and old.state == ONGOING:
                raise ConcurrentTransactionsError(
                    f"transactional id {transactional_id!r}: another process began a transaction meanwhile"
                )
            if old is None or old.epoch >= _MAX_EPOCH - 1:
                fresh[:] = fresh or [next_producer_id(self._store)]
                producer, epoch = fresh[0], 0
            else:
                producer, epoch = old.producer_id, old.epoch + 1
            state, transaction = (EMPTY, 0) if old is None else (old.state, old.transaction)
            return TransactionState(transactional_id, producer, epoch, timeout_ms, state, transaction, 0)

        return self._change(transactional_id, bump)

    def begin(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        holder: str,
        partitions: Sequence[TopicPartition] = (),
        group: str | None = None,
    ) -> TransactionState:
        """Start the id's next transaction (Ongoing), held by ``holder``, with its first partitions
        or group; the state as it is if one is under way."""

        def begin(old: TransactionState | None) -> TransactionState:
            owner = _owned(transactional_id, old, producer_id, epoch)
            if owner.state == ONGOING:
                raise Unchanged
            now = self._clock.now_ms()
            begun = owner._replace(state=ONGOING, transaction=owner.transaction + 1, began_ms=now, holder=holder)
            return _with_added(begun, partitions, group)

        return self._change(transactional_id, begin)

    def add(
        self,
        state: TransactionState,
        partitions: Sequence[TopicPartition] = (),
        group: str | None = None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
    ) -> TransactionState:
        """Record partitions, a group, or offsets of a group sent (TxnOffsetCommit) in the Ongoing
        transaction of ``state``, so that a server taking it up knows them."""

        def add(old: TransactionState | None) -> TransactionState:
            owner = _ongoing(state, old)
            added = _with_added(owner, partitions, group, offsets)
            if added == owner:
                raise Unchanged
            return added

        return self._change(state.transactional_id, add)

    def commit(
        self, state: TransactionState, staging: Mapping[TopicPartition, TransactionPartition]
    ) -> TransactionState:
        """Commit the Ongoing transaction of ``state``: what ``staging`` staged and the offsets sent
        for its groups, all or nothing; run again after a failure, it completes what the first run
        recorded."""
        found = _owned(state.transactional_id, self.get(state.transactional_id), state.producer_id, state.epoch)
        _check_holder(state, found)
        offsets = found.offsets  # none once complete: a run again after that records nothing
        staged = {tp: p.finish() for tp, p in staging.items()}
        sinks = self._broker.sink_commits
        sinks.commit(state.writer, state.transaction, staged, streaming=True, offsets=offsets)
        sinks.remove_staged(state.writer, state.transaction)
        return self._complete(state, COMPLETE_COMMIT, fence=False)

    def recorded(self, state: TransactionState) -> bool:
        """Whether the commit of ``state``'s transaction was recorded, so it is decided."""
        record = self._broker.sink_commits.record(state.writer)
        return record is not None and record.batch == state.transaction

    def end(self, state: TransactionState, *, fence: bool = False, lost: bool = False) -> TransactionState:
        """Abort the Ongoing transaction of ``state``, deleting what it staged; ``fence`` bumps the
        epoch (a timeout, a transaction the server lost), so its producer is fenced. A transaction
        whose commit was recorded (by an EndTxn that failed part way) cannot be aborted: its commit
        is completed instead. Returns the outcome, CompleteAbort or CompleteCommit.

        A ``lost`` transaction (left Ongoing by a server that is gone) has its staged ledgers
        condemned first, so that a commit still in flight somewhere fails rather than record
        ledgers that are being deleted; a server holding the transaction needs no such guard."""
        sinks = self._broker.sink_commits
        found = self.get(state.transactional_id)
        if found is not None:
            _check_holder(state, found)
        if lost:
            staged = self._broker.fileio.walk_files(layout.staging_dir(state.writer, state.transaction))
            sinks.condemn(state.writer, {i for i in (layout.staged_ledger_id(p) for p, _ in staged) if i is not None})
        record = sinks.record(state.writer)
        committed = record is not None and record.batch == state.transaction
        if record is not None and committed and record.state == COMMITTING:
            sinks.complete(record)
        sinks.remove_staged(state.writer, state.transaction)
        fence = fence and not committed
        return self._complete(state, COMPLETE_COMMIT if committed else COMPLETE_ABORT, fence=fence, lost=lost)

    def _complete(self, state: TransactionState, outcome: str, *, fence: bool, lost: bool = False) -> TransactionState:
        def complete(old: TransactionState | None) -> TransactionState:
            owner = _owned(state.transactional_id, old, state.producer_id, state.epoch)
            _check_holder(state, owner)
            if (owner.state, owner.transaction) != (ONGOING, state.transaction):
                raise Unchanged
            done = owner._replace(state=outcome, began_ms=-1, partitions=(), groups=(), offsets={})
            if not fence or owner.epoch >= _MAX_EPOCH:
                return done
            # A lost transaction is no fault of its producer's: it is told so, not fenced.
            return done._replace(epoch=owner.epoch + 1, lost_epoch=owner.epoch if lost else -1)

        return self._change(state.transactional_id, complete)

    def stage(
        self,
        state: TransactionState,
        partitions: Iterable[TopicPartition],
        *,
        resume: bool = False,
        metas: Mapping[str, TopicMeta] | None = None,
    ) -> dict[TopicPartition, TransactionPartition]:
        """Start staging partitions' batches for the Ongoing transaction of ``state``, each produce
        durable before it is answered; ``resume``: go on from what a server that stopped staged.
        Each topic is read once, unless ``metas`` has it already."""
        sinks = self._broker.sink_commits
        task_dir = layout.staging_task_dir(state.writer, state.transaction, "producer")
        wanted, metas = list(partitions), metas or {}
        topics = {t: sinks.staging_topic(t, metas.get(t)) for t in dict.fromkeys(t for t, _ in wanted)}
        calls = [
            partial(
                sinks.stage, topics[t], p, task_dir, partial(_ledger_id, state, (t, p)), durable=True, resume=resume
            )
            for t, p in wanted
        ]
        # Taken up, each partition's staged ledgers are found and resealed: reads, at once where
        # the store serves many, as a restarted server's first answer to the producer waits on them.
        staged = all_at_once(calls, self._broker.fileio.read_parallelism if resume else 1)
        return {(t, p): TransactionPartition(self._broker, t, p, s) for (t, p), s in zip(wanted, staged, strict=True)}

    def append_each(self, appends: Sequence[StagedAppend | Exception]) -> list[Exception | None]:
        """Stage each partition's produced batches (``TransactionPartition.append``), or why not
        (one refused before, given as its error, is answered with it): at once, with each topic
        read once; on an object store each is a write, and each read a round trip, which a produce
        of a hundred partitions made in turn."""
        staging = [a for a in appends if isinstance(a, StagedAppend)]
        metas = topic_metadata(self._broker, [(a.partition.topic, a.partition.partition) for a in staging])
        calls: list[Callable[[], None] | Exception] = []
        for a in appends:
            if isinstance(a, Exception):
                calls.append(a)
                continue
            meta = metas[a.partition.topic]
            calls.append(
                meta if isinstance(meta, Exception) else partial(a.partition.append, a.batches, a.sequences, meta)
            )
        # A partition named twice in a request is staged in turn: its staging takes one append at a time.
        apart = len({id(a.partition) for a in staging}) == len(staging)
        parallelism = self._broker.fileio.write_parallelism if apart else 1
        staged = iter(each_at_once([c for c in calls if callable(c)], parallelism))
        return [next(staged) if callable(c) else c for c in calls]

    def take_up(self, state: TransactionState, holder: str) -> TransactionState | None:
        """The Ongoing transaction of ``state``, which the server that held it left, now held by
        ``holder`` to go on with (``stage`` each partition with ``resume``). None if it is not to
        go on: begun by an older version, which did not record it so, or its commit recorded."""
        if state.began_ms < 0 or self.recorded(state):
            return None

        def take(old: TransactionState | None) -> TransactionState:
            return _ongoing(state, old)._replace(holder=holder)

        return self._change(state.transactional_id, take)

    def staging_in_use(self) -> set[str]:
        """The staging directories of the transactions under way, which are theirs however long
        since their last write, until they end (``expire`` ends those their servers left)."""
        return {layout.staging_dir(s.writer, s.transaction) for s in self.states() if s.state == ONGOING}

    def states(self) -> list[TransactionState]:
        """Every transactional id's state (``kop transactions list``)."""
        values = (self._store.get(key).value for key in self._store.list_keys(layout.TRANSACTIONS))
        return sorted(
            (TransactionState.from_json(v) for v in values if v is not None), key=lambda s: s.transactional_id
        )

    def expire(self, older_than_ms: int) -> None:
        """End the transactions left Ongoing past their timeout (and a lease more): the server that
        held them is gone, or it would have aborted them. Forget the ids with none under way whose
        last change is older than ``older_than_ms`` (``transactional.id.expiration.ms``), as Kafka does."""
        now = self._clock.now_ms()
        for state in self.states():
            if state.state == ONGOING and now - state.updated_ms > state.timeout_ms + SINK_LEASE_MS:
                self.end(state, fence=True, lost=True)
            elif state.state != ONGOING and state.updated_ms < older_than_ms:
                key = layout.transaction_key(state.transactional_id)
                current = self._store.get(key)
                if current.value == state.to_json():
                    try:
                        self._store.put(key, None, current.version)
                    except BadVersionError:
                        pass  # changed meanwhile: in use


def _ledger_id(state: TransactionState, tp: TopicPartition, n: int) -> int:
    """The n-th ledger a transaction stages for a partition: named after the transaction, so that a
    server taking the transaction up finds it. A producer id is never given twice, so no other
    ledger is ever named so (63 bits, as ``new_ledger_id``'s)."""
    name = f"{state.writer}/{state.producer_id}/{state.epoch}/{state.transaction}/{tp[0]}/{tp[1]}/{n}"
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


def _with_added(
    state: TransactionState,
    partitions: Sequence[TopicPartition],
    group: str | None,
    offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
) -> TransactionState:
    """``state`` with partitions, a group, or offsets sent for a group added to its transaction."""
    groups, sent = state.groups, state.offsets
    if group is not None:
        groups = tuple(dict.fromkeys((*groups, group)))
        if offsets:
            sent = {**sent, group: {**sent.get(group, {}), **offsets}}
    return state._replace(
        partitions=tuple(dict.fromkeys((*state.partitions, *partitions))), groups=groups, offsets=sent
    )


def _ongoing(state: TransactionState, found: TransactionState | None) -> TransactionState:
    """``found``, the id's state in the store, if it is still ``state``'s transaction under way, held
    by the same server."""
    owner = _owned(state.transactional_id, found, state.producer_id, state.epoch)
    if (owner.state, owner.transaction) != (ONGOING, state.transaction):
        raise InvalidTxnStateError(
            f"transactional id {state.transactional_id!r}: transaction {state.transaction} is no longer under way"
        )
    _check_holder(state, owner)
    return owner


def _check_holder(state: TransactionState, found: TransactionState) -> None:
    """Refuse a change to ``state``'s transaction under way by its server once another server took
    it up (``found``: the id's state in the store)."""
    if (found.state, found.transaction) == (ONGOING, state.transaction) and found.holder != state.holder:
        raise NotCoordinatorError(
            f"transactional id {state.transactional_id!r}: another server took its transaction up; find the "
            f"coordinator again"
        )


def _owned(transactional_id: str, state: TransactionState | None, producer_id: int, epoch: int) -> TransactionState:
    if state is None:
        raise InvalidProducerIdMappingError(
            f"transactional id {transactional_id!r} has no producer: InitProducerId first"
        )
    state.check_owner(producer_id, epoch)
    return state
