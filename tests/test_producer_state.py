"""Kafka's idempotent producers, checked where batches are appended (``storage.producer_state``):
a retried batch gets its original offsets, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
is fenced; all of it kept in the partition's metadata, so it holds for a new Broker (a restart)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kop_spark import Broker, Record
from kop_spark.clock import ManualClock
from kop_spark.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kop_spark.record import build_record_batch
from kop_spark.storage.retention import FORGETTABLE_AFTER_MS


def batch(pid: int, epoch: int, seq: int, n: int = 2, tag: str = "") -> bytes:
    records = [Record(value=f"{pid}-{epoch}-{seq + i}{tag}".encode()) for i in range(n)]
    return build_record_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def b(root: str) -> Broker:
    broker = Broker(root)
    broker.create_topic("t", 1)
    return broker


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_written_again(b: Broker, root: str) -> None:
    first = b.produce_batches("t", 0, [batch(7, 0, 0)])
    second = b.produce_batches("t", 0, [batch(7, 0, 2)])
    assert (first, second) == (0, 2)
    assert b.produce_batches("t", 0, [batch(7, 0, 0)]) == 0  # the retry of an earlier one, still in the window
    assert Broker(root).produce_batches("t", 0, [batch(7, 0, 2)]) == 2  # after a restart too
    assert b.list_offsets("t", 0, "latest") == 4


def test_a_gap_in_the_sequence_is_refused_and_nothing_is_written(b: Broker, root: str) -> None:
    b.produce_batches("t", 0, [batch(7, 0, 0)])
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 5, expected 2"):
        b.produce_batches("t", 0, [batch(7, 0, 5)])
    with pytest.raises(OutOfOrderSequenceError):
        Broker(root).produce_batches("t", 0, [batch(7, 0, 5)])
    assert b.list_offsets("t", 0, "latest") == 2
    assert b.produce_batches("t", 0, [batch(7, 0, 2)]) == 2


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_sequence_zero(b: Broker) -> None:
    b.produce_batches("t", 0, [batch(7, 1, 0)])
    with pytest.raises(InvalidProducerEpochError, match="older than its current epoch 1"):
        b.produce_batches("t", 0, [batch(7, 0, 2)])
    with pytest.raises(OutOfOrderSequenceError):
        b.produce_batches("t", 0, [batch(7, 2, 4)])
    assert b.produce_batches("t", 0, [batch(7, 2, 0)]) == 2


def test_only_the_last_five_batches_are_remembered_as_retries(b: Broker) -> None:
    for i in range(6):
        b.produce_batches("t", 0, [batch(7, 0, 2 * i)])
    assert b.produce_batches("t", 0, [batch(7, 0, 2)]) == 2  # the 2nd of 6: in the window of 5
    with pytest.raises(OutOfOrderSequenceError):
        b.produce_batches("t", 0, [batch(7, 0, 0)])  # the 1st: out of it, so not a retry


def test_producers_are_independent_and_plain_batches_are_unchecked(b: Broker) -> None:
    b.produce_batches("t", 0, [batch(1, 0, 0)])
    b.produce_batches("t", 0, [batch(2, 0, 40)])  # unknown producer: starts anywhere
    b.produce("t", [Record(value=b"plain")], 0)
    assert b.produce_batches("t", 0, [batch(1, 0, 2), batch(1, 0, 4)]) == 5


def test_a_producer_forgotten_after_its_expiry_may_start_anywhere(root: str) -> None:
    clock = ManualClock()
    b = Broker(root, {"producer.id.expiration.ms": 1000}, clock=clock)
    b.create_topic("t", 1, config={"retention.ms": -1})
    b.produce_batches("t", 0, [batch(7, 0, 0)])
    b.enforce_retention()
    with pytest.raises(OutOfOrderSequenceError):  # still known
        b.produce_batches("t", 0, [batch(7, 0, 9)])
    (known,) = b.admin.producers("t", 0).values()  # what DescribeProducers tells
    assert (known.epoch, known.batches[-1].last_seq) == (0, 1)
    clock.advance(1001)
    assert b.admin.producers("t", 0) == {}  # expired, though maintenance has not yet forgotten it
    b.enforce_retention()
    b.produce_batches("t", 0, [batch(7, 0, 9)])
    assert b.list_offsets("t", 0, "latest") == 4


def test_past_the_most_a_partition_keeps_producers_idle_long_are_forgotten_longest_idle_first(root: str) -> None:
    """Every append rewrites a partition's producers, so one that short-lived producers wrote to
    (each instance of a Java client is a new idempotent producer) appended ever slower, for a day."""
    clock = ManualClock()
    b = Broker(root, {"kafkaMaxProducersPerPartition": 3}, clock=clock)
    b.create_topic("t", 1, config={"retention.ms": -1})
    for pid in (1, 2, 3, 4):
        b.produce_batches("t", 0, [batch(pid, 0, 0)])
        clock.advance(1000)
    assert set(b.admin.producers("t", 0)) == {1, 2, 3, 4}  # none idle long: a retry may yet come
    clock.advance(FORGETTABLE_AFTER_MS - 2000)  # 1, 2 and 3 idle that long
    b.produce_batches("t", 0, [batch(5, 0, 0)])
    assert set(b.admin.producers("t", 0)) == {3, 4, 5}
    with pytest.raises(OutOfOrderSequenceError):
        b.produce_batches("t", 0, [batch(3, 0, 9)])  # still known
    b.produce_batches("t", 0, [batch(1, 0, 9)])  # forgotten: may start anywhere, as after its expiry
    assert b.list_offsets("t", 0, "latest") == 12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=12))
def test_sends_and_retries_in_any_order_store_each_batch_once_in_sequence(tmp_path_factory, sends) -> None:
    """A producer sending batch i (sequences 2i, 2i+1), and retrying any other: every batch accepted
    is stored once, in sequence order; a retry within the last five gets its first write's offset;
    anything else is out of order."""
    b = Broker(str(tmp_path_factory.mktemp("store")))
    b.create_topic("t", 1)
    start: int | None = None  # a producer the partition does not know may start anywhere
    offsets: dict[int, int] = {}  # sequence -> offset of its batch
    for seq in (2 * which for which in sends):
        expected = None if start is None else start + 2 * len(offsets)
        try:
            offset = b.produce_batches("t", 0, [batch(3, 0, seq)])
        except OutOfOrderSequenceError:
            assert expected is not None and seq != expected and (seq not in offsets or seq < expected - 10)
            continue
        if seq in offsets:
            assert offset == offsets[seq] and expected is not None and seq >= expected - 10
            continue
        assert expected in (None, seq) and offset == 2 * len(offsets)
        start = seq if start is None else start
        offsets[seq] = offset
    assert start is not None
    values = [r.value for r in b.fetch("t", 0, 0, max_records=1000)]
    assert values == [f"3-0-{s}".encode() for s in range(start, start + 2 * len(offsets))]
