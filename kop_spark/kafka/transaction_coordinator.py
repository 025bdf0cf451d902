"""The transaction coordinator of ``kop serve`` (Kafka's ``TransactionCoordinator``): what a
transactional producer's requests do, over the durable states of ``broker.transactions``.

The server holds each transaction under way: the partitions added (each staging its batches),
the groups added and the offsets sent for them, when it began. Like group membership, that is the
server's own state: a transactional id is served by one ``kop serve`` at a time. A transaction
that outlives its ``transaction.timeout.ms`` is aborted and its producer fenced (its epoch bumped),
as Kafka does. One the server finds Ongoing that it does not hold, left by a server that stopped
(its staged batches may be incomplete), is aborted too, unless its commit was recorded, which then
completes; but its producer is told UNKNOWN_PRODUCER_ID, not fenced, since it did nothing wrong:
clients with KIP-360 abort, bump their epoch with InitProducerId and go on. Sequence numbers are checked per partition as for idempotent producers, within the
server's life: a batch sent again is not staged twice.

Produced batches get offsets only when the transaction commits, so a produce answers offset -1,
as Kafka answers ``acks=0``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..broker import Broker, OffsetAndMetadata
from ..broker.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    ProducerSequences,
    TransactionPartition,
    TransactionState,
)
from ..errors import (
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
)
from ..record import RecordBatch, split_batches
from ..topic_name import TopicPartition


class TransactionView(NamedTuple):
    """A transactional id as DescribeTransactions tells it."""

    state: TransactionState
    start_ms: int  # when its transaction under way began, else -1
    partitions: list[TopicPartition]  # that transaction's, as far as this server holds it


@dataclass
class _Producer:
    """What the server holds of a transactional id."""

    state: TransactionState
    lock: threading.Lock = field(default_factory=threading.Lock)
    sequences: dict[TopicPartition, ProducerSequences] = field(default_factory=dict)
    partitions: dict[TopicPartition, TransactionPartition] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    began_ms: int = 0
    used_ms: int = 0  # when its producer was last heard from

    def reset(self, state: TransactionState) -> None:
        """Take ``state``, holding no transaction's partitions or offsets."""
        self.state = state
        self.partitions, self.offsets = {}, {}


class TransactionCoordinator:
    def __init__(self, broker: Broker):
        self._broker = broker
        self._transactions = broker.transactions
        self._clock = broker.clock
        self._max_timeout_ms = broker.config["transaction.max.timeout.ms"]
        self._producers: dict[str, _Producer] = {}
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
            with held.lock:
                if current is not None:  # a stale instance's request changes nothing
                    held.state.check_owner(*current, recovering=True)
                if held.state.state == ONGOING and held.began_ms:  # else a lost one: ended below
                    held.reset(self._transactions.end(held.state))
        state = self._transactions.init_producer_id(transactional_id, timeout_ms, current)
        with self._lock:
            self._producers[transactional_id] = _Producer(state)
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
        """Check the producer's ownership, ending first a transaction this server lost or that timed out."""
        held.used_ms = self._clock.now_ms()
        state = held.state
        lost = not held.began_ms  # Ongoing in the store, but begun by a server that is gone
        if state.state == ONGOING and (lost or self._clock.now_ms() - held.began_ms > state.timeout_ms):
            held.reset(self._transactions.end(state, fence=True, lost=lost))
        held.state.check_owner(producer_id, epoch)

    def _begin(self, held: _Producer) -> None:
        if held.state.state != ONGOING:
            held.reset(self._transactions.begin(held.state.transactional_id, held.state.producer_id, held.state.epoch))
            held.began_ms = self._clock.now_ms()

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> None:
        """AddPartitionsToTxn: all the partitions, or none if one cannot be (the error says which)."""
        held = self._held(transactional_id)
        with held.lock:
            self._owned(held, producer_id, epoch)
            wanted = [tp for tp in dict.fromkeys(partitions) if tp not in held.partitions]
            admin = self._broker.admin
            metas = {topic: admin.metadata(topic)[1] for topic, _ in wanted}
            for topic, p in wanted:
                admin.check_partition(topic, p, metas[topic])
            self._begin(held)
            for topic, p in wanted:
                held.partitions[(topic, p)] = self._transactions.stage(held.state, topic, p)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> None:
        """AddOffsetsToTxn: the group's offsets may be sent with TxnOffsetCommit."""
        held = self._held(transactional_id)
        with held.lock:
            self._owned(held, producer_id, epoch)
            self._begin(held)
            held.offsets.setdefault(group, {})

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
        with held.lock:
            self._owned(held, producer_id, epoch)
            if held.state.state != ONGOING or group not in held.offsets:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: offsets of group {group!r} sent before AddOffsetsToTxn"
                )
            held.offsets[group].update(offsets)

    def produce(self, transactional_id: str, topic: str, partition: int, records: bytes) -> None:
        """A transactional produce to one partition: staged, or not again if it was a retry."""
        held = self._held(transactional_id)
        where = f"transactional produce to {topic}-{partition}"
        batches = [bytes(b) for b in split_batches(records)]
        views = [RecordBatch(b) for b in batches]
        if not views:
            raise InvalidRecordError(f"{where}: no record batches given")
        with held.lock:
            for v in views:
                if not v.is_transactional:
                    raise InvalidRecordError(f"{where}: a batch without the transactional flag")
                self._owned(held, v.producer_id, v.producer_epoch)
            staged = held.partitions.get((topic, partition))
            if held.state.state != ONGOING or staged is None:
                raise InvalidTxnStateError(f"{where}: the partition was not added to the transaction")
            staged.append(batches, held.sequences.setdefault((topic, partition), {}))

    def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort. Sent again after it succeeded, it succeeds again."""
        held = self._held(transactional_id)
        with held.lock:
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
            staged = {tp: p.finish() for tp, p in held.partitions.items()}
            held.reset(self._transactions.commit(state, staged, held.offsets))
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
            with held.lock:
                state = held.state
                if state.state == ONGOING and held.began_ms and now - held.began_ms > state.timeout_ms:
                    held.reset(self._transactions.end(state, fence=True))
                    aborted += 1
                elif state.state != ONGOING and now - held.used_ms > self._max_timeout_ms:
                    with self._lock:
                        if self._producers.get(transactional_id) is held:
                            del self._producers[transactional_id]
        return aborted

    def describe(self, transactional_ids: Iterable[str] | None = None) -> list[TransactionView]:
        """DescribeTransactions and ListTransactions: each id's state (all of them by default;
        those unknown left out), with what the server holds of its transaction under way."""
        with self._lock:
            held = dict(self._producers)
        if transactional_ids is None:
            states = self._transactions.states()
        else:  # read those asked for, not every id
            states = [s for s in map(self._transactions.get, dict.fromkeys(transactional_ids)) if s is not None]
        out = []
        for state in states:
            mine = held.get(state.transactional_id)
            if mine is not None and mine.state.epoch >= state.epoch:
                state = mine.state
            ongoing = state.state == ONGOING
            partitions = sorted(mine.partitions) if mine is not None and ongoing else []
            out.append(TransactionView(state, state.updated_ms if ongoing else -1, partitions))
        return out

    def __len__(self) -> int:
        """How many transactional ids the server holds."""
        return len(self._producers)
