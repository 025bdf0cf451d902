"""Kafka transactions under the wire protocol: the transaction coordinator of ``kop serve`` over a
real store. A transaction's records are invisible until it commits, then all there, each once,
at continuous offsets, with the group offsets sent with it; an abort, a timeout, a newer producer
instance or a server that lost the transaction leaves nothing; and an exception at any step of a
commit leaves it all or nothing, completed exactly once when the client sends EndTxn again."""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import threading
import time

import pytest

from kop_spark import Broker, Record, layout
from kop_spark.broker import SINK_LEASE_MS, OffsetAndMetadata
from kop_spark.broker.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING, TransactionPartition
from kop_spark.clock import SYSTEM_CLOCK, Clock, ManualClock
from kop_spark.errors import (
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    OrphanRemovedError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StorageError,
    UnknownProducerIdError,
)
from kop_spark.kafka.transaction_coordinator import TransactionCoordinator
from kop_spark.record import build_record_batch

from .conftest import read_partition
from .faults import FAULTS, Injector, injected

TID = "orders-tx"


def _batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    records = [Record(v, key=v) for v in values]  # stamped now: within retention and the broker's bounds
    return build_record_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def _values(b: Broker, topic: str, partition: int) -> list[bytes]:
    start, end, records = read_partition(b, topic, partition)
    assert [r.offset for r in records] == list(range(start, end))
    return [r.value for r in records]


def _staged_files(root: str) -> list[str]:
    staging = os.path.join(root, layout.STAGING_DIR)
    return [os.path.join(d, f) for d, _, files in os.walk(staging) for f in files]


def _open_files() -> set[str]:
    """The files this process has open."""
    fds = "/proc/self/fd"
    return {os.path.realpath(os.path.join(fds, fd)) for fd in os.listdir(fds)}


def _store(root: str, clock: Clock = SYSTEM_CLOCK) -> Broker:
    """A store with the topics the transactions write ("out") and read ("in")."""
    b = Broker(root, clock=clock)
    b.create_topic("out", 2)
    b.create_topic("in", 1)
    return b


@pytest.fixture
def broker(tmp_path):
    b = _store(str(tmp_path / "store"), ManualClock())
    yield b
    b.close()


def _restarted(broker: Broker) -> TransactionCoordinator:
    """The coordinator of a server started over the same store (the first one killed)."""
    return TransactionCoordinator(Broker(broker.root, clock=broker.clock))


def _open(c: TransactionCoordinator, timeout_ms: int = 60_000) -> tuple[int, int]:
    pid, epoch = c.init_producer_id(TID, timeout_ms)
    c.add_partitions(TID, pid, epoch, [("out", 0), ("out", 1)])
    c.add_offsets(TID, pid, epoch, "g")
    return pid, epoch


def test_a_transaction_appears_whole_at_its_commit_with_its_offsets(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    broker.produce("out", [Record(b"plain")], 0)  # another producer's record, before the commit
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a", b"b"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"c"))
    c.produce(TID, "out", 0, _batch(pid, epoch, 2, b"d"))
    c.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(7)})
    assert _values(broker, "out", 0) == [b"plain"] and _values(broker, "out", 1) == []
    assert broker.fetch_offsets("g") == {}
    c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"plain", b"a", b"b", b"d"] and _values(broker, "out", 1) == [b"c"]
    assert broker.fetch_offsets("g")[("in", 0)].offset == 7
    assert broker.transactions.get(TID).state == COMPLETE_COMMIT
    c.end(TID, pid, epoch, commit=True)  # EndTxn sent again (its answer was lost): succeeds, nothing twice
    assert _values(broker, "out", 0) == [b"plain", b"a", b"b", b"d"]
    with pytest.raises(InvalidTxnStateError, match="abort with no transaction"):
        c.end(TID, pid, epoch, commit=False)
    assert _staged_files(broker.root) == []
    # The next transaction goes on with the producer's sequences.
    c.add_partitions(TID, pid, epoch, [("out", 1)])
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 5, expected 1"):
        c.produce(TID, "out", 1, _batch(pid, epoch, 5, b"e"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 1, b"e"))
    c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 1) == [b"c", b"e"]


def test_each_partition_of_a_transactional_produce_gets_its_own_answer(broker):
    """A PRODUCE's partitions are checked and staged together: one refused (not in the
    transaction, its topic gone, a batch not transactional, a sequence out of order) leaves the
    others staged, and each answer is its own."""
    broker.create_topic("gone", 1)
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.add_partitions(TID, pid, epoch, [("gone", 0)])
    broker.delete_topic("gone")
    answers = c.produce_each(
        TID,
        [
            ("gone", 0, _batch(pid, epoch, 0, b"y")),
            ("in", 0, _batch(pid, epoch, 0, b"x")),
            ("out", 1, _batch(pid, epoch, 0, b"b")),
            ("out", 0, build_record_batch([Record(b"plain")])),
            ("out", 0, _batch(pid, epoch, 0, b"a")),
            ("out", 0, _batch(pid, epoch, 5, b"gap")),  # refused as it is staged
        ],
    )
    assert [type(a).__name__ for a in answers] == [
        "TopicNotFoundError", "InvalidTxnStateError", "NoneType", "InvalidRecordError", "NoneType",
        "OutOfOrderSequenceError",
    ]  # fmt: skip
    c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a"] and _values(broker, "out", 1) == [b"b"]


def test_a_partition_named_twice_in_a_produce_is_staged_in_turn(broker, monkeypatch):
    """Partitions are staged at once where the store writes many at once; a partition's staging
    takes one append at a time, so one a request names twice is staged in turn."""
    broker.fileio.write_parallelism = 4  # as on an object store
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    lock, active, most = threading.Lock(), collections.Counter(), collections.Counter()
    append = TransactionPartition.append

    def watched(self, *args):
        with lock:
            active[self.partition] += 1
            most[self.partition] = max(most[self.partition], active[self.partition])
        threading.Event().wait(0.2)  # an append still under way when another could begin
        try:
            return append(self, *args)
        finally:
            with lock:
                active[self.partition] -= 1

    monkeypatch.setattr(TransactionPartition, "append", watched)
    wanted = [("out", 0, _batch(pid, epoch, 0, b"a")), ("out", 0, _batch(pid, epoch, 1, b"b"))]
    assert c.produce_each(TID, [*wanted, ("out", 1, _batch(pid, epoch, 0, b"c"))]) == [None] * 3
    c.end(TID, pid, epoch, commit=True)
    assert most == {0: 1, 1: 1} and _values(broker, "out", 0) == [b"a", b"b"]


@pytest.mark.parametrize("restarts", [False, True], ids=["one server", "a restart after each produce"])
def test_an_abort_leaves_nothing_and_the_next_transaction_commits(broker, restarts):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    for seq, value in enumerate([b"x", b"y"]):
        c.produce(TID, "out", 0, _batch(pid, epoch, seq, value))
        c = _restarted(broker) if restarts else c
    c.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(3)})
    recorded = broker.transactions.get(TID)
    assert (recorded.partitions, recorded.groups) == ((("out", 0), ("out", 1)), ("g",))
    assert _staged_files(broker.root) != []
    c.end(TID, pid, epoch, commit=False)
    assert _values(broker, "out", 0) == [] and broker.fetch_offsets("g") == {}
    assert _staged_files(broker.root) == [] and broker.transactions.get(TID).state == COMPLETE_ABORT
    c.add_partitions(TID, pid, epoch, [("out", 0)])
    c.produce(TID, "out", 0, _batch(pid, epoch, 2, b"z"))
    c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"z"]


@pytest.mark.parametrize("restart", [False, True], ids=["same server", "restarted server"])
def test_a_retried_batch_is_staged_once_and_a_gap_is_refused(broker, restart):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    first, second = _batch(pid, epoch, 0, b"a", b"b"), _batch(pid, epoch, 2, b"c")
    c.produce(TID, "out", 0, first)  # staged, but their answers are lost (or the server killed before them)
    c.produce(TID, "out", 0, second)
    c = _restarted(broker) if restart else c
    c.produce(TID, "out", 0, first)  # the client's retries: of an earlier batch (within the last five) too
    c.produce(TID, "out", 0, second)
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 5, expected 3"):
        c.produce(TID, "out", 0, _batch(pid, epoch, 5, b"d"))
    c.produce(TID, "out", 0, _batch(pid, epoch, 3, b"d"))
    c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a", b"b", b"c", b"d"]


def test_requests_the_transaction_does_not_allow_are_refused(broker):
    c = TransactionCoordinator(broker)
    with pytest.raises(InvalidProducerIdMappingError, match="InitProducerId first"):
        c.add_partitions(TID, 1, 0, [("out", 0)])
    with pytest.raises(InvalidTransactionTimeoutError, match=r"transaction\.max\.timeout\.ms=900000"):
        c.init_producer_id(TID, 900_001)
    pid, epoch = c.init_producer_id(TID, 60_000)
    with pytest.raises(InvalidTxnStateError, match="out-1: the partition was not added"):
        c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"a"))
    with pytest.raises(InvalidTxnStateError, match="before AddOffsetsToTxn"):
        c.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(1)})
    with pytest.raises(InvalidProducerIdMappingError, match=f"belongs to producer {pid}"):
        c.add_partitions(TID, pid + 1, epoch, [("out", 0)])
    with pytest.raises(Exception, match="out"):
        c.add_partitions(TID, pid, epoch, [("out", 0), ("out", 9)])  # none added when one cannot be
    assert broker.transactions.get(TID).state != ONGOING
    c.add_partitions(TID, pid, epoch, [("out", 0)])
    plain = build_record_batch([Record(b"a")], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    with pytest.raises(Exception, match="without the transactional flag"):
        c.produce(TID, "out", 0, plain)


def test_a_newer_instance_fences_the_older_and_aborts_its_transaction(broker):
    c = TransactionCoordinator(broker)
    pid, old = _open(c)
    c.produce(TID, "out", 0, _batch(pid, old, 0, b"zombie"))
    same_pid, new = c.init_producer_id(TID, 60_000)
    assert (same_pid, new) == (pid, old + 1)
    for call in (
        lambda: c.end(TID, pid, old, commit=True),
        lambda: c.produce(TID, "out", 0, _batch(pid, old, 1, b"late")),
        lambda: c.add_partitions(TID, pid, old, [("out", 0)]),
    ):
        with pytest.raises(ProducerFencedError, match="a newer instance"):
            call()
    c.add_partitions(TID, pid, new, [("out", 0)])
    c.produce(TID, "out", 0, _batch(pid, new, 0, b"new"))
    c.end(TID, pid, new, commit=True)
    assert _values(broker, "out", 0) == [b"new"]


def test_a_recovering_producer_must_name_the_current_epoch(broker):
    c = TransactionCoordinator(broker)
    pid, stale = c.init_producer_id(TID, 60_000)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    with pytest.raises(ProducerFencedError):  # a stale instance recovering (KIP-360) ...
        c.init_producer_id(TID, 60_000, (pid, stale))
    c.end(TID, pid, epoch, commit=True)  # ... leaves the current one's transaction alone
    assert _values(broker, "out", 0) == [b"a"]
    assert c.init_producer_id(TID, 60_000, (pid, epoch)) == (pid, epoch + 1)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c, timeout_ms=5_000)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"slow"))
    broker.clock.advance(5_000)
    assert c.expire() == 0
    broker.clock.advance(1)
    assert c.expire() == 1
    assert broker.transactions.get(TID).state == COMPLETE_ABORT
    with pytest.raises(ProducerFencedError):
        c.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [] and _staged_files(broker.root) == []


def test_a_transaction_past_its_timeout_is_fenced_at_its_next_request(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c, timeout_ms=5_000)
    broker.clock.advance(5_001)
    with pytest.raises(ProducerFencedError):
        c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"slow"))
    assert _values(broker, "out", 0) == []


def _staged_ledgers(root: str) -> list[str]:
    return [f for f in _staged_files(root) if f.endswith(layout.LEDGER_SUFFIX)]


@pytest.mark.parametrize("first", ["produce", "add_partitions", "add_offsets", "commit_offsets", "end"])
def test_a_transaction_goes_on_through_a_server_restart(broker, first):
    """Whatever its producer's next request, the restarted server takes the transaction up: what
    was produced, the partitions and groups added and the offsets sent all commit with it."""
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"b"))
    c.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(4, "m")})
    restarted = _restarted(broker)
    steps = {
        "produce": lambda: restarted.produce(TID, "out", 0, _batch(pid, epoch, 1, b"c")),
        "add_partitions": lambda: restarted.add_partitions(TID, pid, epoch, [("in", 0)]),
        "add_offsets": lambda: restarted.add_offsets(TID, pid, epoch, "h"),
        "commit_offsets": lambda: restarted.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(5)}),
        "end": lambda: restarted.end(TID, pid, epoch, commit=True),
    }
    steps[first]()
    if first != "end":
        restarted.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == ([b"a", b"c"] if first == "produce" else [b"a"])
    assert _values(broker, "out", 1) == [b"b"]
    committed = broker.fetch_offsets("g")[("in", 0)]
    assert (committed.offset, committed.metadata) == ((5, "") if first == "commit_offsets" else (4, "m"))
    assert broker.transactions.get(TID).state == COMPLETE_COMMIT and _staged_files(broker.root) == []


def test_a_write_the_server_was_killed_in_is_cut_and_sent_again(broker):
    """A produce torn by a kill -9 was never answered: the restarted server cuts it from the staged
    ledger, and the client's retry stages it."""
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    (ledger,) = _staged_ledgers(broker.root)
    torn = _batch(pid, epoch, 1, b"b")
    with open(ledger, "ab") as f:
        f.write(torn[: len(torn) // 2])
    restarted = _restarted(broker)
    restarted.produce(TID, "out", 0, torn)
    restarted.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a", b"b"]


def _damage_staged_ledger(root: str) -> None:
    (ledger,) = _staged_ledgers(root)
    with open(ledger, "r+b") as f:
        f.write(b"XXXX")  # its header's magic


def test_a_transaction_a_restarted_server_cannot_take_up_is_aborted_and_its_producer_told_so(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"lost"))
    _damage_staged_ledger(broker.root)
    restarted = _restarted(broker)
    for call in (
        lambda: restarted.end(TID, pid, epoch, commit=True),
        lambda: restarted.produce(TID, "out", 0, _batch(pid, epoch, 1, b"more")),
        lambda: restarted.add_partitions(TID, pid, epoch, [("in", 0)]),
        lambda: restarted.add_offsets(TID, pid, epoch, "g"),
        lambda: restarted.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(1)}),
        lambda: restarted.end(TID, pid, epoch, commit=False),
    ):
        with pytest.raises(UnknownProducerIdError, match="lost when the server restarted"):
            call()
    assert _values(broker, "out", 0) == [] and _staged_files(broker.root) == []
    assert broker.fetch_offsets("g") == {}
    # The producer recovers (KIP-360): its epoch is bumped again, and it goes on.
    assert restarted.init_producer_id(TID, 60_000, (pid, epoch)) == (pid, epoch + 2)
    restarted.add_partitions(TID, pid, epoch + 2, [("out", 0)])
    restarted.produce(TID, "out", 0, _batch(pid, epoch + 2, 0, b"after"))
    restarted.end(TID, pid, epoch + 2, commit=True)
    assert _values(broker, "out", 0) == [b"after"]
    with pytest.raises(ProducerFencedError):  # recovered once, the lost epoch is a zombie's
        restarted.add_partitions(TID, pid, epoch, [("out", 0)])


def test_a_newer_instance_fences_a_producer_whose_transaction_was_lost(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"lost"))
    _damage_staged_ledger(broker.root)
    restarted = _restarted(broker)
    with pytest.raises(UnknownProducerIdError):
        restarted.end(TID, pid, epoch, commit=True)
    assert restarted.init_producer_id(TID, 60_000) == (pid, epoch + 2)  # no current producer named: a newer instance
    for call in (
        lambda: restarted.init_producer_id(TID, 60_000, (pid, epoch)),
        lambda: restarted.end(TID, pid, epoch, commit=False),
    ):
        with pytest.raises(ProducerFencedError):
            call()


def test_a_newer_instance_aborts_a_transaction_a_stopped_server_held(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"zombie's"))
    restarted = _restarted(broker)
    assert restarted.init_producer_id(TID, 60_000) == (pid, epoch + 1)
    assert _values(broker, "out", 0) == [] and _staged_files(broker.root) == []
    with pytest.raises(ProducerFencedError):
        restarted.end(TID, pid, epoch, commit=True)


def test_a_server_restart_between_transactions_goes_unnoticed(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    c.end(TID, pid, epoch, commit=True)
    restarted = TransactionCoordinator(Broker(broker.root, clock=broker.clock))
    restarted.end(TID, pid, epoch, commit=True)  # a retry reaching the restarted server
    restarted.add_partitions(TID, pid, epoch, [("out", 0)])
    restarted.produce(TID, "out", 0, _batch(pid, epoch, 1, b"b"))
    restarted.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a", b"b"]


def _commit_with_fault(root: str, monkeypatch, at: int | None, fault) -> tuple[Injector, bool]:
    """Stage a transaction and commit it with a fault at step ``at``: each partition has its part
    or nothing. Then the client sends EndTxn again, and the transaction is all there, once, with
    its offsets (its commit was recorded before the fault), or not at all (the fault came before:
    the transaction was aborted, and the client's abort succeeds). Returns whether it committed."""
    b = _store(root)
    c = TransactionCoordinator(b)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a", b"b"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"c"))
    c.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(5)})
    injector = Injector(at, fault)
    try:
        with injected(monkeypatch, injector):
            c.end(TID, pid, epoch, commit=True)
    except (KeyboardInterrupt, Exception):
        pass
    fresh = Broker(root)
    after_fault = [_values(fresh, "out", 0), _values(fresh, "out", 1)]
    # Partitions are appended one by one: until EndTxn comes again, each has its part or nothing.
    assert after_fault[0] in ([], [b"a", b"b"]) and after_fault[1] in ([], [b"c"])
    try:
        c.end(TID, pid, epoch, commit=True)
        committed = True
    except InvalidTxnStateError:
        c.end(TID, pid, epoch, commit=False)
        committed = False
    assert fresh.transactions.get(TID).state == (COMPLETE_COMMIT if committed else COMPLETE_ABORT)
    final = [_values(fresh, "out", 0), _values(fresh, "out", 1)]
    assert final == ([[b"a", b"b"], [b"c"]] if committed else [[], []])
    offsets = {tp: o.offset for tp, o in fresh.fetch_offsets("g").items()}
    assert offsets == ({("in", 0): 5} if committed else {})
    assert _staged_files(root) == [] and fresh.verify() == {}
    b.close()
    return injector, committed


def test_an_exception_at_every_step_of_a_commit_leaves_it_all_or_nothing(tmp_path, monkeypatch):
    injector, committed = _commit_with_fault(str(tmp_path / "count"), monkeypatch, None, None)
    assert injector.steps > 0 and committed
    outcomes = set()
    for at in range(1, injector.steps + 1):
        fault = FAULTS[at % len(FAULTS)]  # each kind of fault at every sixth step: all at each took minutes
        injector, committed = _commit_with_fault(str(tmp_path / str(at)), monkeypatch, at, fault)
        assert injector.fired
        outcomes.add(committed)
    assert outcomes == {True, False}


def test_a_commit_recorded_before_its_server_stopped_is_completed_by_the_next_instance(tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    b = _store(root)
    c = TransactionCoordinator(b)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"b"))
    # The server stops with the commit recorded and one partition appended.
    monkeypatch.setattr(b, "append_staged", _fail_after(b.append_staged, 1))
    with pytest.raises(OSError, match="stopped"):
        c.end(TID, pid, epoch, commit=True)
    restarted = TransactionCoordinator(Broker(root))
    restarted.init_producer_id(TID, 60_000)
    fresh = Broker(root)
    assert [_values(fresh, "out", 0), _values(fresh, "out", 1)] == [[b"a"], [b"b"]]
    assert fresh.transactions.get(TID).state == COMPLETE_COMMIT


def _fail_after(call, n: int):
    calls = itertools.count()

    def failing(*args, **kwargs):
        if next(calls) >= n:  # counted before the call: partitions are appended concurrently
            raise OSError("the server stopped")
        return call(*args, **kwargs)

    return failing


def test_maintenance_forgets_idle_transactional_ids(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    other = "still-open"
    p2, e2 = c.init_producer_id(other, 60_000)
    c.add_partitions(other, p2, e2, [("out", 1)])
    c.end(TID, pid, epoch, commit=False)
    expiration = broker.config["transactional.id.expiration.ms"]
    broker.clock.advance(expiration + 1)
    broker.maintenance()
    assert broker.transactions.get(TID) is None
    assert broker.transactions.get(other).state == COMPLETE_ABORT  # left Ongoing past its timeout: ended first
    broker.clock.advance(expiration + 1)
    broker.maintenance()
    assert broker.transactions.states() == []


def test_an_abort_after_a_commit_was_recorded_completes_the_commit(broker, monkeypatch):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"b"))
    monkeypatch.setattr(broker, "append_staged", _fail_after(broker.append_staged, 1))
    with pytest.raises(OSError, match="stopped"):
        c.end(TID, pid, epoch, commit=True)
    monkeypatch.undo()
    # librdkafka aborts after a failed commit; but this one's commit was recorded, so it commits.
    with pytest.raises(InvalidTxnStateError, match="the commit is now complete"):
        c.end(TID, pid, epoch, commit=False)
    assert [_values(broker, "out", 0), _values(broker, "out", 1)] == [[b"a"], [b"b"]]
    assert broker.transactions.get(TID).state == COMPLETE_COMMIT


def test_a_commit_racing_a_newer_instance_at_another_server_fails_and_leaves_nothing(tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    first = _store(root)
    a = TransactionCoordinator(first)
    pid, epoch = _open(a)
    a.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    checked = first.transactions.get(TID)
    # A new producer instance reaches another server right after this one checked the producer's
    # epoch for its commit: it ends the transaction, its staged ledgers condemned.
    TransactionCoordinator(Broker(root)).init_producer_id(TID, 60_000)
    monkeypatch.setattr(first.transactions, "get", lambda tid: checked)
    with pytest.raises(OrphanRemovedError):
        a.end(TID, pid, epoch, commit=True)
    fresh = Broker(root)
    assert _values(fresh, "out", 0) == [] and fresh.sink_commits.pending() == []
    assert _staged_files(root) == [] and fresh.verify() == {}


@pytest.mark.parametrize("late", ["commit", "abort", "add_partitions", "commit_offsets"])
def test_a_server_whose_transaction_another_took_up_is_told_it_is_no_longer_its_coordinator(broker, late):
    """Two servers over one store: the producer moved to the second, which took its transaction up.
    A request reaching the first afterwards is told NOT_COORDINATOR and changes nothing."""
    first = TransactionCoordinator(broker)
    pid, epoch = _open(first)
    first.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    second = _restarted(broker)
    second.produce(TID, "out", 0, _batch(pid, epoch, 1, b"b"))
    requests = {
        "commit": lambda: first.end(TID, pid, epoch, commit=True),
        "abort": lambda: first.end(TID, pid, epoch, commit=False),
        "add_partitions": lambda: first.add_partitions(TID, pid, epoch, [("in", 0)]),
        "commit_offsets": lambda: first.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(9)}),
    }
    with pytest.raises(NotCoordinatorError, match="another server took its transaction up"):
        requests[late]()
    second.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(3)})
    second.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a", b"b"] and broker.fetch_offsets("g")[("in", 0)].offset == 3
    assert broker.transactions.get(TID).partitions == () and _staged_files(broker.root) == []


def test_a_server_that_let_a_transaction_go_takes_it_back_when_its_producer_returns(broker):
    first = TransactionCoordinator(broker)
    pid, epoch = _open(first)
    first.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    (staged,) = _open_files() & set(_staged_files(broker.root))
    second = _restarted(broker)
    second.produce(TID, "out", 0, _batch(pid, epoch, 1, b"b"))
    with pytest.raises(NotCoordinatorError):
        first.end(TID, pid, epoch, commit=True)
    assert staged not in _open_files()  # closed, as the second server left it
    first.produce(TID, "out", 0, _batch(pid, epoch, 2, b"c"))  # the producer is back at the first server
    first.end(TID, pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"a", b"b", b"c"] and _staged_files(broker.root) == []


def test_producers_not_heard_from_are_forgotten_their_state_kept_in_the_store(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = c.init_producer_id("idle", 60_000)
    broker.clock.advance(900_000)  # transaction.max.timeout.ms
    _open(c)  # a transaction begun now, and its producer heard from
    broker.clock.advance(1)
    assert (c.expire(), len(c)) == (0, 1)  # "idle" forgotten; its state is the store's
    c.add_partitions("idle", pid, epoch, [("out", 0)])
    c.produce("idle", "out", 0, _batch(pid, epoch, 0, b"after"))
    c.end("idle", pid, epoch, commit=True)
    assert _values(broker, "out", 0) == [b"after"]


def test_maintenance_ends_a_transaction_its_server_left_behind(broker):
    c = TransactionCoordinator(broker)
    pid, epoch = _open(c, timeout_ms=10_000)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"left"))
    # The server is killed, and the producer never comes back.
    survivor = Broker(broker.root, clock=broker.clock)
    broker.clock.advance(10_000 + SINK_LEASE_MS)
    survivor.maintenance()
    assert survivor.transactions.get(TID).state == ONGOING  # not past its timeout and a lease yet
    broker.clock.advance(1)
    survivor.maintenance()
    state = survivor.transactions.get(TID)
    assert (state.state, state.epoch, state.lost_epoch) == (COMPLETE_ABORT, epoch + 1, epoch)
    assert _values(survivor, "out", 0) == [] and _staged_files(broker.root) == []
    with pytest.raises(UnknownProducerIdError):  # the producer, back, is told, and may recover
        TransactionCoordinator(survivor).add_partitions(TID, pid, epoch, [("out", 0)])


def test_maintenance_keeps_the_staging_of_a_transaction_under_way_however_old(tmp_path):
    """A transaction's staged batches are its own until it ends, however long since the last write
    and whether or not its server is up: the server that takes it up commits them."""
    clock = ManualClock(int(time.time() * 1000))  # the staged files' times are the real clock's
    b = _store(str(tmp_path / "store"), clock)
    c = TransactionCoordinator(b)
    pid, epoch = _open(c, timeout_ms=900_000)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    clock.advance(SINK_LEASE_MS + 60_000)
    b.maintenance(orphan_grace_ms=0)
    restarted = _restarted(b)
    restarted.end(TID, pid, epoch, commit=True)
    assert _values(b, "out", 0) == [b"a"]


def _produce_with_fault(root: str, monkeypatch, at: int | None, fault, restart: bool) -> tuple[Injector, bool]:
    """A transaction's first produce to a partition, with a fault at step ``at``; the client sends it
    again, to the same server or to a restarted one, and commits. The transaction commits with each
    record once, or, its staging failed, the client's abort leaves nothing. Returns whether it
    committed."""
    b = _store(root)
    c = TransactionCoordinator(b)
    pid, epoch = _open(c)
    c.produce(TID, "out", 0, _batch(pid, epoch, 0, b"a"))
    injector = Injector(at, fault)
    with injected(monkeypatch, injector), contextlib.suppress(KeyboardInterrupt, Exception):
        c.produce(TID, "out", 1, _batch(pid, epoch, 0, b"b"))
    server = _restarted(b) if restart else c
    try:
        server.produce(TID, "out", 1, _batch(pid, epoch, 0, b"b"))  # the client's retry
        server.end(TID, pid, epoch, commit=True)
        committed = True
    except StorageError:
        assert not restart, "a restarted server takes up what was staged, whatever the fault"
        server.end(TID, pid, epoch, commit=False)
        committed = False
    fresh = Broker(root)
    assert [_values(fresh, "out", p) for p in (0, 1)] == ([[b"a"], [b"b"]] if committed else [[], []])
    assert _staged_files(root) == [] and fresh.verify() == {}
    b.close()
    return injector, committed


@pytest.mark.parametrize("restart", [False, True], ids=["same server", "restarted server"])
def test_an_exception_at_every_step_of_a_transactional_produce_loses_nothing_and_stages_nothing_twice(
    tmp_path, monkeypatch, restart
):
    injector, committed = _produce_with_fault(str(tmp_path / "count"), monkeypatch, None, None, restart)
    assert injector.steps > 0 and committed
    for at in range(1, injector.steps + 1):
        for fault in FAULTS:
            _produce_with_fault(str(tmp_path / f"{at}-{FAULTS.index(fault)}"), monkeypatch, at, fault, restart)


def test_a_transaction_of_offsets_only_goes_on_through_a_server_restart(broker):
    """Its first request (AddOffsetsToTxn) begins it, and the group is recorded with the beginning."""
    c = TransactionCoordinator(broker)
    pid, epoch = c.init_producer_id(TID, 60_000)
    c.add_offsets(TID, pid, epoch, "g")
    restarted = _restarted(broker)
    restarted.commit_offsets(TID, pid, epoch, "g", {("in", 0): OffsetAndMetadata(8)})
    restarted.end(TID, pid, epoch, commit=True)
    assert broker.fetch_offsets("g")[("in", 0)].offset == 8
