"""Time-driven behaviour run on a manual clock: retention, grace periods, producer expiry and
trigger delays move when the test moves time, not when the wall clock does."""

from __future__ import annotations

import os

from kop_spark import Broker, Record, layout
from kop_spark.clock import ManualClock
from kop_spark.record import build_record_batch
from kop_spark.spark._compat import ReadMinRows
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions

MINUTE = 60_000


def _records(clock: ManualClock, n: int) -> list[Record]:
    return [Record(value=f"v{i}".encode(), timestamp_ms=clock.now_ms()) for i in range(n)]


def test_retention_and_the_grace_period_follow_the_clock(root):
    clock = ManualClock()
    with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1}, clock=clock) as b:
        b.create_topic("t", 1, config={"retention.ms": MINUTE, "file.delete.delay.ms": MINUTE})
        b.produce("t", _records(clock, 2), partition=0)
        clock.advance(MINUTE // 2)
        b.produce("t", _records(clock, 2), partition=0)  # rolls the first ledger over, sealed
        files = os.path.join(root, layout.data_dir(b.topic_name("t"), 0))
        b.enforce_retention("t")
        assert b.list_offsets("t", 0, "earliest") == 0  # the records are a moment old
        clock.advance(MINUTE // 2 + 1)
        b.enforce_retention("t")
        assert b.list_offsets("t", 0, "earliest") == 2  # the first ledger is past retention.ms
        assert len(os.listdir(files)) == 2  # but readers keep the file for file.delete.delay.ms
        clock.advance(MINUTE)
        b.enforce_retention("t")
        assert b.list_offsets("t", 0, "earliest") == 4  # the second too, though open
        assert len(os.listdir(files)) == 1  # the first's file gone, the second's in its grace


def test_a_log_nobody_writes_to_loses_its_open_ledger_once_past_retention(root):
    """As Kafka rolls an active segment whose records are all past retention.ms, so it can go."""
    clock = ManualClock()
    with Broker(root, clock=clock) as b:
        b.create_topic("t", 1, config={"retention.ms": MINUTE})
        b.create_topic("kept", 1, config={"retention.ms": MINUTE, "cleanup.policy": "compact"})
        for topic in ("t", "kept"):
            b.produce(topic, [Record(b"v", key=b"k", timestamp_ms=clock.now_ms())] * 3, partition=0)
        b.enforce_retention()
        assert b.list_offsets("t", 0, "earliest") == 0  # one ledger, open, and young
        clock.advance(MINUTE + 1)
        b.enforce_retention()
        assert (b.list_offsets("t", 0, "earliest"), b.list_offsets("t", 0, "latest")) == (3, 3)
        assert b.list_offsets("kept", 0, "earliest") == 0  # compact only: retention.ms does not delete,
        assert b.managed_ledger("kept", 0).view().ledgers[-1].state == "open"  # nor close its writer's ledger
        assert b.produce("t", _records(clock, 1), partition=0) == [(0, 3, 1)]  # the writer goes on
        assert [r.offset for r in b.fetch("t", 0, 3)] == [3]


def test_an_idempotent_producer_is_forgotten_after_its_expiration(root):
    clock = ManualClock()
    with Broker(root, conf={"producer.id.expiration.ms": MINUTE}, clock=clock) as b:
        b.create_topic("t", 1)
        batch = build_record_batch(_records(clock, 1))
        assert b.produce_batches("t", 0, [batch], idempotence_key=("p", 1)) == 0
        clock.advance(MINUTE - 1)
        assert b.produce_batches("t", 0, [batch], idempotence_key=("p", 1)) == 0  # a retry: not applied again
        clock.advance(2)
        b.enforce_retention("t")
        assert b.produce_batches("t", 0, [batch], idempotence_key=("p", 1)) == 1  # forgotten: a new append


def test_max_trigger_delay_follows_the_clock(root):
    clock = ManualClock()
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", _records(clock, 3), partition=0)
    options = {"kop.root": root, "subscribe": "t", "startingOffsets": "earliest"}
    stream = KopMicroBatchStream(
        SourceOptions.parse({**options, "minOffsetsPerTrigger": "1000", "maxTriggerDelay": "1m"}, streaming=True),
        clock=clock,
    )
    start = stream.initialOffset()
    limit = ReadMinRows(1000)
    first = stream.latestOffset(start, limit)  # the first trigger does not wait
    assert first == {"t": {"0": 3}}
    with Broker(root) as b:
        b.produce("t", _records(clock, 2), partition=0)
    clock.advance(MINUTE - 1)
    assert stream.latestOffset(first, limit) == first  # 2 records < 1000, and less than a minute since
    clock.advance(1)
    assert stream.latestOffset(first, limit) == {"t": {"0": 5}}  # the delay is over: what there is
    stream.stop()
