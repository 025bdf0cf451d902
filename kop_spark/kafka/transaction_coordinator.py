"""The transaction coordinator of ``kop serve`` (Kafka's ``TransactionCoordinator``): what a
transactional producer's requests do, over the durable states of ``broker.transactions``.

A transaction's partitions, groups and offsets are recorded as they are added, and every produce
is durable before it is answered, so a transaction survives its server: the next server (this
one restarted, or another over the same store) takes it up at its producer's next request and
goes on, as a Kafka broker's successor does. Meanwhile the server holds each transaction under way
it began or took up: its partitions' staging and the producers' sequences there, so that a batch
sent again is not staged twice. A transactional id is served by one ``kop serve`` at a time. A
transaction that outlives its ``transaction.timeout.ms`` is aborted and its producer fenced (its
epoch bumped), as Kafka does. One that cannot be taken up (begun by an older version, or a staged
ledger damaged) is aborted too, unless its commit was recorded, which then completes; but its
producer is told UNKNOWN_PRODUCER_ID, not fenced, since it did nothing wrong: clients with KIP-360
abort, bump their epoch with InitProducerId and go on.

Produced batches get offsets only when the transaction commits, so a produce answers offset -1,
as Kafka answers ``acks=0``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..broker import Broker, OffsetAndMetadata
from ..broker.admin import TopicMeta
from ..broker.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    ProducerSequences,
    StagedAppend,
    TransactionPartition,
    TransactionState,
)
from ..broker.validation import topic_metadata
from ..errors import (
    CorruptRecordError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
)
from ..record import RecordBatch, split_batches
from ..topic_name import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class _Producer:
    """What the server holds of a transactional id."""

    state: TransactionState
    lock: threading.Lock = field(default_factory=threading.Lock)
    sequences: dict[TopicPartition, ProducerSequences] = field(default_factory=dict)
    staging: dict[TopicPartition, TransactionPartition] = field(default_factory=dict)
    holds: bool = False  # whether its transaction under way, if any, was begun or taken up here
    used_ms: int = 0  # when its producer was last heard from

    def reset(self, state: TransactionState) -> None:
        """Take ``state``, holding no transaction's partitions (the producer's sequences go on)."""
        self.state = state
        self.staging, self.holds = {}, True

    def take_up(self, staging: dict[TopicPartition, TransactionPartition]) -> None:
        self.staging, self.holds = staging, True
        self.sequences = {tp: p.sequences() for tp, p in staging.items()}

    def let_go(self, state: TransactionState) -> None:
        """Take ``state``, whose transaction under way another server holds: nothing of it here."""
        for p in self.staging.values():
            p.abandon()
        self.state = state
        self.staging, self.sequences, self.holds = {}, {}, False


class TransactionCoordinator:
    def __init__(self, broker: Broker):
        self._broker = broker
        self._transactions = broker.transactions
        self._clock = broker.clock
        self._max_timeout_ms = broker.config["transaction.max.timeout.ms"]
        self._producers: dict[str, _Producer] = {}
        self._holder = uuid.uuid4().hex  # who holds the transactions this server begins or takes up
        self._lock = threading.Lock()

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, current: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        """InitProducerId: the id's producer id and its new epoch."""
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transactional id {transactional_id!r}: transaction.timeout.ms={timeout_ms} is not within "
                f"1 to transaction.max.timeout.ms={self._max_timeout_ms}"
            )
        with self._lock:
            held = self._producers.get(transactional_id)
        if held is not None:
            with self._holding(held):
                if current is not None:  # a stale instance's request changes nothing
                    held.state.check_owner(*current, recovering=True)
                if held.state.state == ONGOING and held.holds:  # else ended below
                    held.reset(self._transactions.end(held.state))
        state = self._transactions.init_producer_id(transactional_id, timeout_ms, current)
        with self._lock:
            self._producers[transactional_id] = _Producer(state, holds=True)
        return state.producer_id, state.epoch

    def _held(self, transactional_id: str) -> _Producer:
        with self._lock:
            held = self._producers.get(transactional_id)
        if held is not None:
            return held
        state = self._transactions.get(transactional_id)  # read outside the lock every id shares
        if state is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer: InitProducerId first"
            )
        with self._lock:
            return self._producers.setdefault(transactional_id, _Producer(state))

    def _owned(self, held: _Producer, producer_id: int, epoch: int) -> None:
        """Check the producer's ownership, first taking up a transaction a server that stopped
        held, and ending one past its timeout."""
        held.used_ms = now = self._clock.now_ms()
        if held.state.state == ONGOING and not held.holds:
            self._take_up(held)
        state = held.state
        if state.state == ONGOING and now - state.began_ms > state.timeout_ms:
            held.reset(self._transactions.end(state, fence=True))
        held.state.check_owner(producer_id, epoch)

    def _take_up(self, held: _Producer) -> None:
        """Go on with a transaction the store has Ongoing that no server here began: its server
        stopped, having made every produce it answered durable. One it cannot go on with (begun
        by an older version, or a staged ledger damaged) is lost: aborted, its producer told so;
        one whose commit was recorded is completed."""
        taken = self._transactions.take_up(held.state, self._holder)
        if taken is not None:
            held.state = taken
            try:
                held.take_up(self._transactions.stage(taken, taken.partitions, resume=True))
                return
            except CorruptRecordError as e:
                log.error("transactional id %r: its transaction is lost, and aborted: %s", taken.transactional_id, e)
        held.reset(self._transactions.end(held.state, fence=True, lost=True))

    def _add(self, held: _Producer, partitions: Sequence[TopicPartition] = (), group: str | None = None) -> None:
        """Record partitions or a group in the transaction under way, beginning it if there is none
        (in the same write: a transaction's first request costs one)."""
        state = held.state
        if state.state == ONGOING:
            held.state = self._transactions.add(state, partitions, group)
        else:
            begun = self._transactions.begin(
                state.transactional_id, state.producer_id, state.epoch, self._holder, partitions, group
            )
            held.reset(begun)

    @contextlib.contextmanager
    def _holding(self, held: _Producer) -> Iterator[None]:
        """Serve a request of ``held``'s producer; if another server took the transaction up
        meanwhile, this one lets it go, to read it again at the next request."""
        with held.lock:
            try:
                yield
            except NotCoordinatorError:
                held.let_go(self._transactions.get(held.state.transactional_id) or held.state)
                raise

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> None:
        """AddPartitionsToTxn: all the partitions, or none if one cannot be (the error says which)."""
        held = self._held(transactional_id)
        with self._holding(held):
            self._owned(held, producer_id, epoch)
            wanted = [tp for tp in dict.fromkeys(partitions) if tp not in held.staging]
            metas: dict[str, TopicMeta] = {}
            for topic, meta in topic_metadata(self._broker, wanted).items():
                if isinstance(meta, Exception):
                    raise meta
                metas[topic] = meta
            for topic, p in wanted:
                self._broker.admin.check_partition(topic, p, metas[topic])
            self._add(held, partitions=wanted)
            # An internal topic is refused here, once the transaction has begun, as Kafka refuses
            # its produce: the client can abort it and go on.
            held.staging.update(self._transactions.stage(held.state, wanted, metas=metas))

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> None:
        """AddOffsetsToTxn: the group's offsets may be sent with TxnOffsetCommit."""
        held = self._held(transactional_id)
        with self._holding(held):
            self._owned(held, producer_id, epoch)
            self._add(held, group=group)

    def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
        """TxnOffsetCommit: offsets the group gets if the transaction commits."""
        held = self._held(transactional_id)
        with self._holding(held):
            self._owned(held, producer_id, epoch)
            if held.state.state != ONGOING or group not in held.state.groups:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: offsets of group {group!r} sent before AddOffsetsToTxn"
                )
            held.state = self._transactions.add(held.state, group=group, offsets=offsets)

    def produce(self, transactional_id: str, topic: str, partition: int, records: bytes) -> None:
        """A transactional produce to one partition: staged, or not again if it was a retry."""
        (refused,) = self.produce_each(transactional_id, [(topic, partition, records)])
        if refused is not None:
            raise refused

    def produce_each(self, transactional_id: str, wanted: Sequence[tuple[str, int, bytes]]) -> list[Exception | None]:
        """A transactional PRODUCE: each partition's records staged (or not again, if a retry), or
        why not. The partitions are staged at once and each topic is read once: on an object
        store each staging is a write and each read a round trip, which a request of a hundred
        partitions made in turn."""
        held = self._held(transactional_id)
        with self._holding(held):
            answers: list[StagedAppend | Exception] = []
            for topic, partition, records in wanted:
                try:
                    answers.append(self._append_of(held, topic, partition, records))
                except Exception as e:  # that partition's answer; the others go on
                    answers.append(e)
            return self._transactions.append_each(answers)

    def _append_of(self, held: _Producer, topic: str, partition: int, records: bytes) -> StagedAppend:
        """A partition's produced records, to be staged: they are transactional, their producer
        owns the transaction, and it has the partition."""
        where = f"transactional produce to {topic}-{partition}"
        batches = [bytes(b) for b in split_batches(records)]
        if not batches:
            raise InvalidRecordError(f"{where}: no record batches given")
        for v in map(RecordBatch, batches):
            if not v.is_transactional:
                raise InvalidRecordError(f"{where}: a batch without the transactional flag")
            self._owned(held, v.producer_id, v.producer_epoch)
        staged = held.staging.get((topic, partition))
        if held.state.state != ONGOING or staged is None:
            raise InvalidTxnStateError(f"{where}: the partition was not added to the transaction")
        return StagedAppend(staged, batches, held.sequences.setdefault((topic, partition), {}))

    def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort. Sent again after it succeeded, it succeeds again."""
        held = self._held(transactional_id)
        with self._holding(held):
            self._owned(held, producer_id, epoch)
            state = held.state
            if state.state != ONGOING:
                if state.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                    return
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: {'commit' if commit else 'abort'} with no transaction "
                    f"under way (state {state.state})"
                )
            if commit:
                self._commit(held)
                return
            held.reset(self._transactions.end(state))
            if held.state.state == COMPLETE_COMMIT:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: abort of a transaction whose commit was recorded by an "
                    f"EndTxn that failed part way: the commit is now complete"
                )

    def _commit(self, held: _Producer) -> None:
        state = held.state
        try:
            held.reset(self._transactions.commit(state, held.staging))
        except NotCoordinatorError:
            raise  # the transaction is another server's now
        except BaseException:
            # Not recorded, nothing is decided, and a staged ledger may be half sealed: the
            # transaction can only be aborted (the client is told the error, and aborts).
            with contextlib.suppress(Exception):
                if not self._transactions.recorded(state):
                    held.reset(self._transactions.end(state))
            raise

    def expire(self) -> int:
        """Abort the transactions past their timeout, fencing their producers, and forget the
        producers with none under way that were not heard from for ``transaction.max.timeout.ms``
        (their state is the store's; held, they would pile up with every id ever used). Returns
        how many transactions were aborted."""
        with self._lock:
            producers = list(self._producers.items())
        aborted = 0
        now = self._clock.now_ms()
        for transactional_id, held in producers:
            with contextlib.suppress(NotCoordinatorError), self._holding(held):
                state = held.state
                if state.state == ONGOING and held.holds and now - state.began_ms > state.timeout_ms:
                    held.reset(self._transactions.end(state, fence=True))
                    aborted += 1
                elif state.state != ONGOING and now - held.used_ms > self._max_timeout_ms:
                    with self._lock:
                        if self._producers.get(transactional_id) is held:
                            del self._producers[transactional_id]
        return aborted

    def describe(self, transactional_ids: Iterable[str] | None = None) -> list[TransactionState]:
        """DescribeTransactions and ListTransactions: each id's state (all of them by default;
        those unknown left out)."""
        if transactional_ids is None:
            return self._transactions.states()
        # read those asked for, not every id
        return [s for s in map(self._transactions.get, dict.fromkeys(transactional_ids)) if s is not None]

    def __len__(self) -> int:
        """How many transactional ids the server holds."""
        return len(self._producers)
