"""Kafka semantics of the Broker: offsets, lookups, rollover, retention, idempotence, admin."""

import os
import random
import time
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatch as KBatch

from kop_spark import AlterConfigOp, Broker, Record, layout
from kop_spark.broker import SINK_LEASE_MS, PartitionViews
from kop_spark.broker.partition_views import SWEEP_S
from kop_spark.clock import ManualClock
from kop_spark.errors import (
    ConfigError,
    CorruptRecordError,
    FileMissingError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionNotFoundError,
    RecordTooLargeError,
    StorageError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
)
from kop_spark.partitioner import partition_for_key
from kop_spark.record import CompressionType, RecordBatch, TimestampType, build_record_batch
from kop_spark.storage.metadata.file import FileMetadataStore
from kop_spark.storage.read_plan import PartitionView
from kop_spark.storage.retention import FORGETTABLE_AFTER_MS

from . import servers

NOW = int(time.time() * 1000)


def recs(n, start=0, ts=None):
    return [
        Record(value=f"v{i}".encode(), key=f"k{i}".encode(), timestamp_ms=(ts if ts is not None else NOW) + i)
        for i in range(start, start + n)
    ]


def all_records(b, topic, p):
    out, off = [], b.list_offsets(topic, p, "earliest")
    end = b.list_offsets(topic, p, "latest")
    while off < end:
        got = b.fetch(topic, p, off, max_records=1000)
        out += got
        off = got[-1].offset + 1
    return out


def test_offsets_are_continuous_across_rollovers_and_restart(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 3})
    b.create_topic("t", 1)
    expected = []
    for i in range(20):
        batch = recs(i % 4 + 1, start=len(expected))
        _p, base, n = b.produce("t", batch, partition=0)[0]
        assert base == len(expected) and n == len(batch)
        expected += batch
    assert b.describe_topic("t").partitions[0].ledgers == 7
    b.close()
    b2 = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 3})
    got = all_records(b2, "t", 0)
    assert [r.offset for r in got] == list(range(len(expected)))
    assert [(r.key, r.value, r.timestamp_ms) for r in got] == [(r.key, r.value, r.timestamp_ms) for r in expected]
    b2.produce("t", recs(1, start=999), partition=0)
    assert b2.list_offsets("t", 0, "latest") == len(expected) + 1


def test_fetch_from_every_offset_returns_exactly_that_offset_on(broker):
    broker.create_topic("t", 1)
    for i in range(6):
        broker.produce("t", recs(3, start=3 * i), partition=0)
    for off in range(18):
        got = broker.fetch("t", 0, off, max_records=4)
        assert [r.offset for r in got] == list(range(off, min(off + 4, 18)))
        assert got[0].value == f"v{off}".encode()
    assert broker.fetch("t", 0, 18) == []  # the log end is a valid position with nothing yet


def test_offset_out_of_range_names_both_bounds(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1})
    b.create_topic("t", 1, config={"retention.bytes": 0, "file.delete.delay.ms": 0})
    for i in range(4):
        b.produce("t", recs(2, start=2 * i), partition=0)
    b.enforce_retention("t")
    start, end = b.list_offsets("t", 0, "earliest"), b.list_offsets("t", 0, "latest")
    assert start == 6 and end == 8
    for bad in (start - 1, 0, end + 1):
        with pytest.raises(OffsetOutOfRangeError) as e:
            b.fetch("t", 0, bad)
        assert (e.value.log_start_offset, e.value.log_end_offset) == (6, 8)
        assert f"offset {bad}" in str(e.value) and "6" in str(e.value) and "8" in str(e.value) and "t-0" in str(e.value)
    with pytest.raises(OffsetOutOfRangeError):
        b.fetch_batches("t", 0, 5)


def test_list_offsets_by_timestamp(broker):
    broker.create_topic("t", 1)
    # Timestamps need not grow: lookups use the running maximum, like Kafka's time index.
    stamps = [100, 300, 200, 400, 400, 500]
    broker.produce("t", [Record(b"a", timestamp_ms=NOW + s) for s in stamps[:3]], partition=0)
    broker.produce("t", [Record(b"b", timestamp_ms=NOW + s) for s in stamps[3:]], partition=0)
    assert broker.list_offsets("t", 0, NOW) == 0
    assert broker.list_offsets("t", 0, NOW + 150) == 1
    assert broker.list_offsets("t", 0, NOW + 300) == 1
    assert broker.list_offsets("t", 0, NOW + 301) == 3
    assert broker.list_offsets("t", 0, NOW + 500) == 5
    assert broker.list_offsets("t", 0, NOW + 501) == -1
    assert broker.list_offsets("t", 0, -2) == 0 and broker.list_offsets("t", 0, -1) == 6


def test_list_offsets_by_timestamp_across_ledgers(root):
    """A ledger may hold only older records than the one before it: the running maximum still finds
    the first record at or after the time, with its timestamp."""
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1})
    b.create_topic("t", 1)
    for s in (300, 100, 200, 500):
        b.produce("t", [Record(b"x", timestamp_ms=NOW + s)], partition=0)
    assert [b.list_offsets("t", 0, NOW + s) for s in (0, 150, 250, 300, 301, 500, 501)] == [0, 0, 0, 0, 3, 3, -1]
    assert b.offsets_and_timestamps([("t", 0, NOW + 150)]) == [(0, NOW + 300)]
    assert b.offsets_and_timestamps([("t", 0, NOW + 301)]) == [(3, NOW + 500)]
    b.close()


def test_list_offsets_on_empty_partition(broker):
    broker.create_topic("t", 2)
    assert [broker.list_offsets("t", 1, s) for s in ("earliest", "latest", 0)] == [0, 0, -1]


def test_rollover_by_bytes_and_by_age(root):
    from kop_spark.storage.managed_ledger import ManagedLedger, ManagedLedgerConfig

    b = Broker(root, conf={"managedLedgerMaxSizePerLedgerMbytes": 1})
    b.create_topic("t", 1)
    big = [Record(value=os.urandom(400_000), timestamp_ms=NOW)]
    for _ in range(5):
        b.produce("t", big, partition=0)
    assert b.describe_topic("t").partitions[0].ledgers == 2  # 3 x 400 kB pass 1 MiB, then a new ledger

    name = b.topic_name("t")
    ml = ManagedLedger(
        "t-0",
        layout.managed_ledger_key(name, 0),
        layout.data_dir(name, 0),
        b.store,
        b.fileio,
        ManagedLedgerConfig(max_ledger_age_ms=0),
    )
    batch = build_record_batch(recs(1))
    before = len(ml.view().ledgers)
    ml.append([batch])
    ml.append([batch])
    assert len(ml.view().ledgers) == before + 2  # every append finds its ledger too old


def test_retention_by_time_and_size_with_grace_period(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1}, clock=ManualClock(NOW))
    b.create_topic("old", 1, config={"retention.ms": 60_000, "file.delete.delay.ms": 3_600_000})
    b.produce("old", recs(2, ts=NOW - 120_000), partition=0)  # expired
    b.produce("old", recs(2, ts=NOW), partition=0)
    b.produce("old", recs(2, ts=NOW), partition=0)
    b.enforce_retention()
    assert b.list_offsets("old", 0, "earliest") == 2
    ledger_dir = os.path.join(root, layout.data_dir(b.topic_name("old"), 0))
    # The dropped ledger's file stays for readers that planned on it, until the grace period ends.
    assert len(os.listdir(ledger_dir)) == 3
    b.close()

    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1})
    b.create_topic("big", 1, config={"retention.bytes": 1, "file.delete.delay.ms": 0})
    for i in range(4):
        b.produce("big", recs(1, start=i), partition=0)
    b.enforce_retention("big")
    # Kafka keeps deleting the oldest while the log stays >= retention.bytes without it.
    d = b.describe_topic("big").partitions[0]
    assert d.log_start_offset == 3 and d.log_end_offset == 4 and d.ledgers == 1
    assert len(os.listdir(os.path.join(root, layout.data_dir(b.topic_name("big"), 0)))) == 1
    assert [r.value for r in b.fetch("big", 0, 3)] == [b"v3"]


def test_a_produce_on_a_local_root_applies_the_settings_another_process_gave_a_moment_ago(tmp_path):
    """A produce may take topic settings read within a second where the store has no cheap probe;
    on a local root that stood in too while a probe could not tell a change from a moment ago
    (file times), and a produce applied retention by the settings before another process's
    change, or before it made the topic again: records the new settings keep were deleted."""
    root, conf = str(tmp_path / "store"), {"managedLedgerMaxEntriesPerLedger": 1}
    with Broker(root, conf) as a, Broker(root, conf) as b:
        a.create_topic("t", 1, {"retention.bytes": 1})
        b.produce("t", [Record(b"x")], 0)  # b reads the settings: keep one byte
        a.alter_topic_config("t", [AlterConfigOp("retention.bytes", "delete")])
        for _ in range(3):
            b.produce("t", [Record(b"y")], 0)
        assert b.list_offsets("t", 0, "earliest") == 0
        a.delete_topic("t")
        a.create_topic("t", 1, {"retention.bytes": 1})
        b.produce("t", [Record(b"x")], 0)
        a.delete_topic("t")
        a.create_topic("t", 1)
        for _ in range(3):
            b.produce("t", [Record(b"y")], 0)
        assert b.list_offsets("t", 0, "earliest") == 0


def test_a_produce_on_settings_read_before_the_topic_was_made_again_applies_none_of_their_retention(tmp_path):
    """Settings read before another process deleted the topic and made it again are the old
    topic's. A produce may act on such a read: on an object store for up to a second, and on any
    store when the topic is made again between its read and its append. It applied the old
    topic's retention to the new topic's log, deleting records the new settings keep."""
    root, conf = str(tmp_path / "store"), {"managedLedgerMaxEntriesPerLedger": 1}
    clock_a, clock_b = ManualClock(NOW - 1000), ManualClock(NOW)
    with Broker(root, conf, clock=clock_a) as a, Broker(root, conf, clock=clock_b) as b:
        a.create_topic("t", 1, {"retention.bytes": 1})
        b.produce("t", [Record(b"x")], 0)
        _, old = b.admin.metadata("t")  # read at NOW: keep one byte
        clock_a.advance(2000)
        a.delete_topic("t")
        a.create_topic("t", 1)  # at NOW + 1000, keeping everything
        for i in range(3):
            b.produce_batches("t", 0, [build_record_batch(recs(1, start=i))], _meta=old)
        assert b.list_offsets("t", 0, "earliest") == 0
        clock_b.advance(2000)  # settings read from now on are the new topic's
        b.produce("t", [Record(b"y")], 0)
        assert b.list_offsets("t", 0, "earliest") == 0 and b.list_offsets("t", 0, "latest") == 4
        assert b.verify() == {}


def test_a_retention_pass_never_seals_this_writers_ledger_on_a_view_older_than_its_append(root):
    """A retention pass probes the partitions first, then takes each log in turn: an append of this
    writer may come between. On what a view read, older than that append, the expired tail it
    showed would have been sealed at the length it had then, cutting the append off the ledger."""
    b = Broker(root, clock=ManualClock(NOW))
    b.create_topic("t", 1, config={"retention.ms": 60_000})
    b.produce("t", recs(1, ts=NOW - 120_000), partition=0)  # the open tail, expired
    ml = b.admin.log("t", 0)
    view = ml.view()
    b.produce("t", recs(1, start=1, ts=NOW), partition=0)  # no longer expired
    ml.enforce_retention(view)
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"v0", b"v1"]
    assert b.verify() == {}


def _idempotent(seq: int) -> bytes:
    """A Kafka producer's batch of one record, its sequence ``seq``."""
    return build_record_batch(recs(1, start=seq), producer_id=7, producer_epoch=0, base_sequence=seq)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_retention_pass_on_a_view_older_than_this_writers_append_refuses_no_producer(root, kind, request):
    """A retention pass takes the log at the version its probe found, as this instance last read
    it there, to spare a read. Where this instance had appended since (and held no open ledger,
    as on an object store), it went back to that older state, and the next batch of the producer
    was refused as out of sequence against it, a fatal error for a Kafka producer (found by the
    soak of kop serve on S3)."""

    if kind == "s3":
        request.getfixturevalue("running")
        root = f"s3://{servers.BUCKET}/older-view-{uuid.uuid4().hex[:8]}"
    with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1}, clock=ManualClock(NOW)) as b:
        b.create_topic("t", 1, config={"retention.ms": 3_600_000})
        b.produce_batches("t", 0, [_idempotent(0)])
        ml = b.admin.log("t", 0)
        view = ml.view()
        b.produce_batches("t", 0, [_idempotent(1)])
        ml.enforce_retention(view)
        assert getattr(ml.last_known, "next_offset", None) == 2, "the log as this instance knows it went back"
        b.produce_batches("t", 0, [_idempotent(2)])
        assert [r.value for r in b.fetch("t", 0, 0)] == [b"v0", b"v1", b"v2"]
        assert b.verify() == {}


def test_a_producer_that_went_through_another_process_is_not_refused_on_what_this_one_last_knew(root):
    """A Kafka producer's connection may move between two kop serve over one store (a load
    balancer, a reconnect). The first server decided its next batch on the log as its own last
    write left it, where the batch the other server took was missing, and refused it as out of
    sequence, a fatal error to the producer; a refusal is decided on the log as it stands."""

    with Broker(root) as a, Broker(root) as b:
        a.create_topic("t", 1)
        a.produce_batches("t", 0, [_idempotent(0)])
        b.produce_batches("t", 0, [_idempotent(1)])
        a.produce_batches("t", 0, [_idempotent(2)])
        with pytest.raises(OutOfOrderSequenceError, match="sent sequence 4, expected 3"):
            a.produce_batches("t", 0, [_idempotent(4)])  # a refusal still stands on the log as it is
        assert [r.value for r in a.fetch("t", 0, 0)] == [b"v0", b"v1", b"v2"]


def test_everything_expired_keeps_next_offset(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1})
    b.create_topic("t", 1, config={"retention.ms": 1000})
    b.produce("t", recs(3, ts=NOW - 10_000), partition=0)
    b.close()  # seals the tail, so it may expire too
    b = Broker(root)
    b.enforce_retention("t")
    assert (b.list_offsets("t", 0, "earliest"), b.list_offsets("t", 0, "latest")) == (3, 3)
    assert b.produce("t", recs(1), partition=0) == [(0, 3, 1)]


def test_altered_settings_apply_to_a_log_already_open_here_and_in_another_process(root):
    clock = ManualClock(NOW)
    conf = {"managedLedgerMaxEntriesPerLedger": 1}
    serving = Broker(root, conf=conf, clock=clock)  # as kop serve: its log stays open throughout
    serving.create_topic("t", 1, config={"retention.ms": 3_600_000, "file.delete.delay.ms": 0})
    serving.produce("t", recs(2, ts=NOW - 120_000), partition=0)
    serving.produce("t", recs(2, ts=NOW), partition=0)
    serving.enforce_retention("t")
    assert serving.list_offsets("t", 0, "earliest") == 0
    with Broker(root) as admin:  # as kop topics alter, from another process
        settings = admin.alter_topic_config("t", [AlterConfigOp("retention.ms", "set", 60_000)])
        assert settings["retention.ms"] == 60_000 and settings["file.delete.delay.ms"] == 0
    serving.enforce_retention("t")
    assert serving.list_offsets("t", 0, "earliest") == 2
    # ...and once more the other way: the default back, and a limit the next produce meets
    serving.alter_topic_config(
        "t", [AlterConfigOp("retention.ms", "delete"), AlterConfigOp("max.message.bytes", "set", 100)]
    )
    with pytest.raises(RecordTooLargeError):
        serving.produce("t", [Record(b"x" * 200)], partition=0)
    assert serving.topic_config("t", own=True) == {"file.delete.delay.ms": 0, "max.message.bytes": 100}
    serving.close()


def test_altering_settings_is_all_or_none_and_names_what_is_wrong(broker):
    broker.create_topic("t", 1, config={"retention.ms": 60_000, "cleanup.policy": "delete"})
    bad_ops = (
        (
            [AlterConfigOp("retention.ms", "set", 1), AlterConfigOp("retention.days", "set", 1)],
            "'retention.days' is not a topic",
        ),
        ([AlterConfigOp("retention.ms", "set", 1), AlterConfigOp("retention.bytes", "set", "x")], "'retention.bytes'"),
        ([AlterConfigOp("retention.ms", "append", 1)], "'retention.ms' is not a list"),
        ([AlterConfigOp("cleanup.policy", "subtract", "delete")], "'cleanup.policy'"),  # nothing left
        ([AlterConfigOp("retention.ms", "reset")], "unknown operation 'reset'"),
        (  # each valid alone, as Kafka's LogConfig refuses them together
            [AlterConfigOp("min.compaction.lag.ms", "set", 2), AlterConfigOp("max.compaction.lag.ms", "set", 1)],
            r"conflicting settings min.compaction.lag.ms \(2\) > max.compaction.lag.ms \(1\)",
        ),
    )
    for ops, message in bad_ops:
        with pytest.raises(ConfigError, match=f"topic 't': .*{message}"):
            broker.alter_topic_config("t", ops)
    broker.alter_topic_config("t", [AlterConfigOp("retention.ms", "set", 5)], validate_only=True)
    assert broker.topic_config("t", own=True) == {"retention.ms": 60_000, "cleanup.policy": "delete"}
    with pytest.raises(TopicNotFoundError, match="'nope'"):
        broker.alter_topic_config("nope", [AlterConfigOp("retention.ms", "set", 5)])
    with pytest.raises(ConfigError, match=r"topic 'u': conflicting settings min.compaction.lag.ms \(2\) >"):
        broker.create_topic("u", 1, config={"min.compaction.lag.ms": 2, "max.compaction.lag.ms": 1})
    assert "u" not in broker.list_topics()

    broker.alter_topic_config("t", [AlterConfigOp("cleanup.policy", "append", "compact")])
    assert broker.topic_config("t")["cleanup.policy"] == "compact,delete"
    broker.alter_topic_config("t", [AlterConfigOp("max.message.bytes", "set", "2000")], replace=True)
    assert broker.topic_config("t", own=True) == {"max.message.bytes": 2000}
    assert broker.topic_config("t")["cleanup.policy"] == "delete"  # the default again


def test_delete_records_moves_the_log_start_into_a_ledger_and_drops_the_closed_ones_before_it(root):
    clock = ManualClock(NOW)
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 2}, clock=clock)
    b.create_topic("t", 1, config={"file.delete.delay.ms": 60_000})
    for i in range(5):  # ledgers [0, 6), [6, 12) sealed and [12, 15) open: 3 records a batch
        b.produce("t", recs(3, start=3 * i, ts=NOW + 100 * i), partition=0)
    files = [l.file for l in b.view("t", 0).ledgers]
    assert len(files) == 3

    assert b.delete_records("t", 0, 7) == 7  # inside the second ledger, mid-batch
    view = b.view("t", 0)
    assert (view.log_start_offset, [l.file for l in view.ledgers]) == (7, files[1:])
    assert b.list_offsets("t", 0, "earliest") == 7
    assert [r.offset for r in b.fetch("t", 0, 7)] == list(range(7, 15))
    with pytest.raises(OffsetOutOfRangeError, match="valid offsets are 7"):
        b.fetch("t", 0, 6)
    # the batch holding 6 and 7 was stamped at NOW + 200 + 6 and + 7: a time before 7's finds 7
    assert b.offsets_and_timestamps([("t", 0, NOW + 200 + 6)]) == [(7, NOW + 200 + 7)]
    assert b.offsets_and_timestamps([("t", 0, 0)]) == [(7, NOW + 200 + 7)]

    assert b.delete_records("t", 0, 3) == 7  # before the log start: nothing changes
    assert b.delete_records("t", 0, 10) == 10  # the batch of 6 to 8 is wholly before it now
    assert b.offsets_and_timestamps([("t", 0, 0)]) == [(10, NOW + 300 + 10)]
    with pytest.raises(OffsetOutOfRangeError, match="offset 16 is out of range"):
        b.delete_records("t", 0, 16)
    b.commit_offsets("g", {("t", 0): 3})
    with pytest.raises(InvalidTopicError, match="internal topic"):  # the groups' offsets live there
        b.delete_records("public/__kafka/__consumer_offsets", 0, -1)
    assert b.fetch_offsets("g")[("t", 0)].offset == 3
    assert b.delete_records("t", 0, -1) == 15  # the log end: the open ledger stays, its writer's
    assert [l.file for l in b.view("t", 0).ledgers] == files[2:]
    assert b.fetch("t", 0, 15) == [] and b.produce("t", recs(1), partition=0) == [(0, 15, 1)]
    assert [r.offset for r in b.fetch("t", 0, 15)] == [15]

    # the dropped ledgers' files go once readers' grace is over
    assert all(b.fileio.exists(f) for f in files[:2])
    clock.advance(60_001)
    b.enforce_retention("t")
    assert not any(b.fileio.exists(f) for f in files[:2])
    assert b.list_offsets("t", 0, "earliest") == 15 and not b.verify("t")
    b.close()


def test_idempotent_produce_applies_once(broker):
    broker.create_topic("t", 1)
    first = broker.produce("t", recs(3), partition=0, idempotence_key=("query-1", 7))
    again = broker.produce("t", recs(3), partition=0, idempotence_key=("query-1", 7))
    assert first == again == [(0, 0, 3)]
    older = broker.produce_batches("t", 0, [build_record_batch(recs(1))], idempotence_key=("query-1", 3))
    assert older == -1  # a duplicate whose offsets are not remembered, as Kafka answers it
    assert broker.produce("t", recs(2), partition=0, idempotence_key=("query-1", 8)) == [(0, 3, 2)]
    assert broker.produce("t", recs(1), partition=0, idempotence_key=("query-2", 7)) == [(0, 5, 1)]
    assert broker.list_offsets("t", 0, "latest") == 6


def test_default_partitioner(broker):
    broker.create_topic("t", 5)
    keys = [f"key-{i}".encode() for i in range(40)]
    result = broker.produce("t", [Record(b"v", key=k) for k in keys])
    by_partition = {p: n for p, _, n in result}
    for p in range(5):
        expected = sum(1 for k in keys if partition_for_key(k, 5) == p)
        assert by_partition.get(p, 0) == expected
    # Records without a key go together to one partition per call, spreading across calls.
    used = {broker.produce("t", [Record(b"x"), Record(b"y")])[0][0] for _ in range(5)}
    assert len(used) == 5


def test_a_broker_leaves_its_users_random_generator_alone(tmp_path):
    # A program that seeds ``random`` for its own reproducibility must get the same sequence
    # whether or not it opened a broker in between.
    random.seed(7)
    expected = random.random()
    random.seed(7)
    with Broker(str(tmp_path / "root")) as b:
        b.create_topic("t", 3)
        b.produce("t", [Record(b"x")])
    assert random.random() == expected


def test_produce_batches_and_fetch_batches_are_kafka_bytes(broker):
    broker.create_topic("t", 1)
    broker.produce("t", recs(2), partition=0)
    for codec in CompressionType:
        broker.produce_batches("t", 0, [build_record_batch(recs(3, ts=NOW), compression=codec)])
    batches = broker.fetch_batches("t", 0, 3)
    assert [KBatch(b).base_offset for b in batches] == [2, 5, 8, 11, 14]  # from the batch holding 3
    seen = []
    for raw in batches:
        kb = KBatch(raw)
        assert kb.validate_crc()
        seen += [(m.offset, m.value) for m in kb]
    assert seen == [(i, f"v{(i - 2) % 3}".encode()) for i in range(2, 17)]
    assert len(broker.fetch_batches("t", 0, 0, max_bytes=1)) == 1  # at least one batch


def test_produce_splits_many_records_into_batches_as_a_producer_does(broker):
    broker.create_topic("t", 2)
    values = [os.urandom(100) for _ in range(10_000)]
    versions = [broker.view("t", p).version for p in (0, 1)]
    written = broker.produce("t", [Record(v, key=b"k%d" % (i % 7)) for i, v in enumerate(values)])
    assert sum(n for _, _, n in written) == 10_000
    for p, base, _ in written:
        assert base == 0 and broker.view("t", p).version == versions[p] + 1  # one append per partition
        batches = [RecordBatch(b) for b in fetch_all_batches(broker, "t", p)]
        assert len(batches) > 1
        assert all(len(b.buffer) <= 16384 for b in batches), "batches keep to batch.size"
    # Each partition holds its records in the order they were given.
    for p in (0, 1):
        got = [r.value for r in all_records(broker, "t", p)]
        assert got == [v for i, v in enumerate(values) if partition_for_key(b"k%d" % (i % 7), 2) == p]


def test_produce_refuses_a_record_too_large_for_any_batch(broker):
    broker.create_topic("t", 1, config={"max.message.bytes": 2000})
    with pytest.raises(RecordTooLargeError, match=r"t-0.*max\.message\.bytes=2000"):
        broker.produce("t", [Record(b"small"), Record(os.urandom(3000)), Record(b"small")], partition=0)
    assert broker.list_offsets("t", 0, "latest") == 0  # refused whole: nothing written
    # A record bigger than batch.size but within max.message.bytes gets a batch of its own.
    assert broker.produce("t", [Record(b"a"), Record(os.urandom(1500)), Record(b"b")], partition=0, batch_size=500) == [
        (0, 0, 3)
    ]
    assert [len(RecordBatch(b).records()) for b in fetch_all_batches(broker, "t", 0)] == [1, 1, 1]


def fetch_all_batches(b, topic, p):
    out, off, end = [], b.list_offsets(topic, p, "earliest"), b.list_offsets(topic, p, "latest")
    while off < end:
        batches = b.fetch_batches(topic, p, off)
        out += batches
        off = RecordBatch(batches[-1]).last_offset + 1
    return out


def test_produce_batches_validated_like_kafka(broker):
    broker.create_topic("t", 1, config={"max.message.bytes": 2000})
    good = build_record_batch(recs(2))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="t-0"):
        broker.produce_batches("t", 0, [good, bytes(bad_crc)])
    with pytest.raises(InvalidRecordError, match="control"):
        broker.produce_batches("t", 0, [build_record_batch(recs(1), is_control=True)])
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        broker.produce_batches("t", 0, [build_record_batch([Record(os.urandom(3000))])])
    assert broker.list_offsets("t", 0, "latest") == 0  # refused whole: nothing written
    # Several batches in one call are one atomic append, like one PRODUCE request.
    assert broker.produce_batches("t", 0, [good + good]) == 0
    assert broker.list_offsets("t", 0, "latest") == 4


def test_log_append_time_topic(broker):
    broker.create_topic("t", 1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    broker.produce("t", [Record(b"a", timestamp_ms=5)], partition=0)
    r = broker.fetch("t", 0, 0)[0]
    assert r.timestamp_type == TimestampType.LOG_APPEND_TIME and r.timestamp_ms >= before


HOUR = 3_600_000


def test_records_stamped_too_far_from_the_brokers_time_are_refused_whole(root):
    """Kafka's KIP-937 bounds on CreateTime topics: by default (Kafka 4's) no earlier bound and an
    hour ahead of the broker's clock; a record without a timestamp (-1) passes."""
    b = Broker(root, clock=ManualClock(NOW))
    b.create_topic("t", 1, config={"message.timestamp.before.max.ms": 60_000})
    b.create_topic("default", 1)
    b.produce("t", [Record(b"a", timestamp_ms=NOW - 60_000), Record(b"b", timestamp_ms=NOW + HOUR)], partition=0)
    b.produce("t", [Record(b"c", timestamp_ms=-1)], partition=0)
    b.produce("default", [Record(b"old", timestamp_ms=0)], partition=0)
    late, early = Record(b"x", timestamp_ms=NOW + HOUR + 1), Record(b"y", timestamp_ms=NOW - 60_001)
    with pytest.raises(
        InvalidTimestampError, match=rf"t-0.*timestamp {NOW + HOUR + 1} is out of range.*after\.max\.ms"
    ):
        b.produce("t", [Record(b"ok", timestamp_ms=NOW), late], partition=0)
    with pytest.raises(
        InvalidTimestampError, match=rf"timestamp {NOW - 60_001} is out of range.*before\.max\.ms=60000"
    ) as refused:
        b.produce("t", [early, Record(b"ok", timestamp_ms=NOW), late, Record(b"-", timestamp_ms=-1)], partition=0)
    # which records, as Kafka's LogValidator names them (KIP-467)
    within = f"The timestamp should be within [{NOW - 60_000}, {NOW + HOUR}]"
    assert refused.value.record_errors == (
        (0, f"Timestamp {NOW - 60_001} of message with offset 0 is out of range. {within}"),
        (2, f"Timestamp {NOW + HOUR + 1} of message with offset 2 is out of range. {within}"),
    )
    with pytest.raises(InvalidTimestampError, match="default-0"):
        b.produce("default", [late], partition=0)
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"a", b"b", b"c"]  # nothing of a refused produce
    b.alter_topic_config("t", [AlterConfigOp("message.timestamp.after.max.ms", "set", 2 * HOUR)])
    b.produce("t", [late], partition=0)
    b.create_topic("stamped", 1, config={"message.timestamp.type": "LogAppendTime"})
    b.produce("stamped", [late, early], partition=0)  # the broker's time replaces theirs
    assert {r.timestamp_ms for r in b.fetch("stamped", 0, 0)} == {NOW}


def test_staged_output_is_refused_records_stamped_out_of_bounds(root):
    b = Broker(root, clock=ManualClock(NOW))
    b.create_topic("t", 1, config={"message.timestamp.before.max.ms": 1000})
    staged = b.sink_commits.stage("t", 0, "_staging/q/0/task")
    staged.append([build_record_batch([Record(b"a", timestamp_ms=NOW - 1000), Record(b"b", timestamp_ms=NOW)])])
    for stamp in (NOW - 1001, NOW + HOUR + 1):
        batch = build_record_batch([Record(b"a", timestamp_ms=NOW), Record(b"b", timestamp_ms=stamp)])
        with pytest.raises(InvalidTimestampError, match=f"t-0: timestamp {stamp} is out of range"):
            staged.append([batch])
    b.append_staged("t", 0, staged.finish(), ("spark:q", 0))
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"a", b"b"]


def test_control_batches_take_offsets_but_are_not_data(broker):
    broker.create_topic("t", 1)
    broker.produce("t", recs(2), partition=0)
    marker = build_record_batch(
        [Record(b"\x00" * 6, key=b"\x00\x00\x00\x01")],
        is_control=True,
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
    )
    broker.managed_ledger("t", 0).append([marker])  # as a transaction coordinator would write it
    broker.produce("t", recs(1, start=2), partition=0)
    assert [r.offset for r in broker.fetch("t", 0, 0)] == [0, 1, 3]
    assert broker.list_offsets("t", 0, "latest") == 4


def test_headers_and_null_keys_and_values(broker):
    broker.create_topic("t", 1)
    broker.produce("t", [Record(None, None, NOW, [("a", b"1"), ("b", None)])], partition=0)
    r = broker.fetch("t", 0, 0)[0]
    assert (r.key, r.value, r.headers) == (None, None, (("a", b"1"), ("b", None)))


def test_topic_administration(root):
    b = Broker(root)
    b.create_topic("a", 2)
    b.create_topic("tenant1/ns1/b", 1)
    b.create_topic("persistent://public/default/c")
    assert b.list_topics() == ["a", "c", "tenant1/ns1/b"]
    with pytest.raises(TopicAlreadyExistsError):
        b.create_topic("persistent://public/default/a", 3)
    with pytest.raises(InvalidPartitionsError):
        b.create_topic("z", 0)
    b.produce("a", recs(2), partition=1)
    b.create_partitions("a", 4)
    assert b.partitions_for("a") == 4
    b.produce("a", recs(1), partition=3)
    with pytest.raises(InvalidPartitionsError):
        b.create_partitions("a", 2)
    b.delete_topic("a")
    assert b.list_topics() == ["c", "tenant1/ns1/b"]
    with pytest.raises(TopicNotFoundError):
        b.fetch("a", 0, 0)
    b.create_topic("a", 1)  # recreated: empty, offsets from 0
    assert b.list_offsets("a", 0, "latest") == 0
    assert b.produce("a", recs(1)) == [(0, 0, 1)]


def test_deleted_topic_files_removed_after_grace(root):
    b = Broker(root)
    b.create_topic("gone", 1, config={"file.delete.delay.ms": 0})
    b.produce("gone", recs(3), partition=0)
    ledger_dir = os.path.join(root, layout.data_dir(b.topic_name("gone"), 0))
    assert os.listdir(ledger_dir)
    b.delete_topic("gone")
    assert not os.listdir(ledger_dir)


def test_a_deleted_topics_metric_name_claim_goes_with_it_unless_another_took_it(root):
    b = Broker(root)
    claims = layout.metric_name_key(b.topic_name("x")).rpartition("/")[0]

    def held() -> dict[str, dict]:
        return {k: v for k in b.store.list_keys(claims) if (v := b.store.get(k).value) is not None}

    for name in ("orders.eu", "a.b", "plain"):
        b.create_topic(name, 1)
    assert set(held()) == {layout.metric_name_key(b.topic_name(n)) for n in ("orders.eu", "a.b")}
    b.delete_topic("orders.eu")
    claim = layout.metric_name_key(b.topic_name("a.b"))  # taken over by a_b's creator, as it would be
    b.store.put(claim, {"topic": "a_b"}, b.store.get(claim).version)  # while a.b is being deleted
    b.delete_topic("a.b")
    b.delete_topic("plain")
    assert held() == {layout.metric_name_key(b.topic_name("a_b")): {"topic": "a_b"}}
    b.create_topic("orders_eu", 1)  # the name is free again, as before


def test_writer_of_deleted_topic_gets_topic_not_found(root):
    writer, admin = Broker(root), Broker(root)
    writer.create_topic("t", 1)
    writer.produce("t", recs(1), partition=0)
    admin.delete_topic("t")
    with pytest.raises(TopicNotFoundError):
        writer.produce("t", recs(1), partition=0)


def test_unknown_topic_partition_and_illegal_names(broker):
    broker.create_topic("t", 2)
    with pytest.raises(TopicNotFoundError, match="'nope'"):
        broker.fetch("nope", 0, 0)
    with pytest.raises(TopicNotFoundError, match="'nope'"):
        broker.produce("nope", recs(1))
    with pytest.raises(PartitionNotFoundError, match="partition 2"):
        broker.fetch("t", 2, 0)
    with pytest.raises(PartitionNotFoundError):
        broker.produce("t", recs(1), partition=-1)
    with pytest.raises(InvalidTopicError):
        broker.create_topic("../../escape", 1)
    assert not os.path.exists(os.path.join(os.path.dirname(broker.root), "escape"))


def test_corrupt_ledger_is_reported_with_its_file(root):
    b = Broker(root)
    b.create_topic("t", 1)
    b.produce("t", recs(5), partition=0)
    b.close()
    (ledger,) = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".ledger")]
    with open(ledger, "r+b") as f:
        f.seek(60)
        byte = f.read(1)[0]
        f.seek(60)
        f.write(bytes([byte ^ 0x40]))
    with pytest.raises(CorruptRecordError, match=os.path.basename(ledger)):
        Broker(root).fetch("t", 0, 0)


def test_root_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StorageError, match="not a directory"):
        Broker(str(f))


READ_ONLY_WRITER = r"""
import sys, kop_spark
try:
    b = kop_spark.Broker(sys.argv[1])
    b.produce("t", [kop_spark.Record(b"v")], partition=0)
except kop_spark.StorageError as e:
    print("StorageError:", e)
"""


def _without_root_powers():
    """Run a child as this user but without the capabilities that let root ignore permissions."""
    import shutil

    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv (util-linux): cannot drop CAP_DAC_OVERRIDE")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def test_read_only_and_unreadable_root(tmp_path):
    """Without write (or read) permission on the root, a StorageError names the path."""
    import subprocess

    from .conftest import PYTHON, python_subprocess_env

    store = tmp_path / "store"
    Broker(str(store)).create_topic("t", 1)
    prefix = _without_root_powers()
    for d, _, _ in os.walk(store):
        os.chmod(d, 0o555)
    try:
        out = subprocess.run(
            [*prefix, PYTHON, "-c", READ_ONLY_WRITER, str(store)],
            capture_output=True,
            text=True,
            env=python_subprocess_env(),
        )
        assert "StorageError: cannot" in out.stdout, out.stdout + out.stderr
        assert str(store) in out.stdout
        os.chmod(store, 0o000)
        out = subprocess.run(
            [*prefix, PYTHON, "-c", READ_ONLY_WRITER, str(store)],
            capture_output=True,
            text=True,
            env=python_subprocess_env(),
        )
        assert f"cannot read store root {store}" in out.stdout, out.stdout + out.stderr
    finally:
        for d, _, _ in os.walk(store):
            os.chmod(d, 0o755)
        os.chmod(store, 0o755)


def test_compaction_keeps_offsets_latest_values_and_young_tombstones(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 2}, clock=ManualClock(NOW))
    b.create_topic("c", 1, config={"cleanup.policy": "compact", "retention.ms": 1, "delete.retention.ms": 60_000})
    for i in range(12):
        b.produce("c", [Record(f"v{i}".encode(), key=f"k{i % 3}".encode(), timestamp_ms=NOW)], partition=0)
    b.produce("c", [Record(None, key=b"k0", timestamp_ms=NOW)], partition=0)  # young tombstone: kept
    b.produce("c", [Record(None, key=b"k1", timestamp_ms=NOW - 120_000)], partition=0)  # old tombstone: dropped
    b.compact("c")
    got = [(r.offset, r.key, r.value) for r in b.fetch("c", 0, 0)]
    assert got == [(11, b"k2", b"v11"), (12, b"k0", None)]
    assert (b.list_offsets("c", 0, "earliest"), b.list_offsets("c", 0, "latest")) == (0, 14)
    assert [r.offset for r in b.fetch("c", 0, 5)] == [11, 12]  # reads step over emptied offsets
    assert b.fetch("c", 0, 13) == []
    b.enforce_retention("c")  # compact-only: retention.ms does not delete
    assert b.list_offsets("c", 0, "earliest") == 0
    assert b.produce("c", [Record(b"new", key=b"k1")], partition=0) == [(0, 14, 1)]
    with pytest.raises(ConfigError, match=r"cleanup\.policy=delete"):
        b.create_topic("d", 1) or b.compact("d")


def test_the_log_cleaner_compacts_what_no_writer_holds_open_once_enough_of_it_is_new(root):
    """Kafka's log cleaner: the ledgers no writer holds open (its active segment) are compacted
    once ``min.cleanable.dirty.ratio`` of their bytes came after the last compaction; the open
    ledger's records stay, and shadow nothing before them until they are sealed."""
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 2})
    b.create_topic("c", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.6})
    b.create_topic("d", 1, config={"cleanup.policy": "delete"})

    def produce(topic: str, rounds: range) -> None:
        for i in rounds:
            b.produce(topic, [Record(f"v{i}".encode(), key=f"k{i % 2}".encode())], partition=0)

    produce("c", range(5))  # ledgers [0, 2) and [2, 4) sealed, 4 in the open one
    produce("d", range(5))
    assert b.clean_logs().partitions_compacted == ["c-0"]  # d is not compacted
    assert [(r.offset, r.value) for r in b.fetch("c", 0, 0)] == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
    assert len(b.fetch("d", 0, 0)) == 5
    assert b.clean_logs().partitions_compacted == []  # nothing new since
    produce("c", range(5, 7))  # seals 4-5: 2 records new beside the 2 compacted ones, short of 0.6
    assert b.clean_logs().partitions_compacted == []
    produce("c", range(7, 11))  # 6 records new beside 2
    assert b.clean_logs().partitions_compacted == ["c-0"]
    assert [(r.offset, r.value) for r in b.fetch("c", 0, 0)][:2] == [(8, b"v8"), (9, b"v9")]
    assert b.list_offsets("c", 0, "latest") == 11 and b.fetch("c", 0, 10)[0].value == b"v10"
    assert b.produce("c", [Record(b"more", key=b"k0")], partition=0) == [(0, 11, 1)]
    b.close()


@pytest.mark.parametrize("operation", ["merging", "cleaning"])
def test_background_rewrites_do_not_hold_up_a_writer_of_the_partition(root, operation):
    """kop serve merges and compacts on threads of its own, beside the threads serving produces to
    the same partition: a produce made while a rewrite is under way is confirmed at once, not after
    the rewrite, and the rewrite (of ledgers the produce did not touch) still lands."""
    import threading

    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0})
    b.create_topic("t", 1, config={"cleanup.policy": "compact"} if operation == "cleaning" else {})
    for i in range(4):
        b.produce("t", [Record(b"v%d" % i, key=b"k")], partition=0)
    produced, looks = [], []

    class ProduceMidway(threading.Event):
        def is_set(self) -> bool:  # looked at before the partition, then before each entry rewritten
            looks.append(1)
            if len(looks) == 2:
                writer = threading.Thread(
                    target=lambda: produced.append(b.produce("t", [Record(b"new", key=b"k2")], 0))
                )
                writer.start()
                writer.join(30)
                assert produced, "the produce waited for the rewrite"
            return False

    if operation == "merging":
        assert b.housekeeping.maintenance("t", stop=ProduceMidway()).ledgers_merged > 0
    else:
        assert b.housekeeping.clean_logs("t", ProduceMidway()).partitions_compacted == ["t-0"]
    assert produced == [[(0, 4, 1)]]
    assert [r.value for r in b.fetch("t", 0, 0)][-1] == b"new"
    b.close()


@pytest.mark.parametrize("operation", ["merging", "cleaning"])
def test_a_rewrite_whose_ledgers_another_process_replaced_and_deleted_gives_way(root, operation):
    """Another process replaces the ledgers a rewrite is reading (merges them; or, since merges
    leave a compaction's ledgers to it, drops them by DeleteRecords), and deletes their files (no
    file.delete.delay.ms): the rewrite finds a file gone, sees the log no longer holds what it read,
    and gives way, as when its swap finds the ledgers changed; nothing else is lost or reported."""
    import threading

    conf = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    b = Broker(root, conf=conf)
    config = {"file.delete.delay.ms": 0, **({"cleanup.policy": "compact"} if operation == "cleaning" else {})}
    b.create_topic("t", 1, config=config)
    for i in range(6):
        b.produce("t", [Record(b"v%d" % i, key=b"k%d" % i)], partition=0)
    b.close()  # every ledger sealed
    other, looks = Broker(root, conf=conf), []

    class OtherMergesMidway(threading.Event):
        def is_set(self) -> bool:  # looked at before the partition, then before each entry rewritten
            looks.append(1)
            if len(looks) == 3:
                if operation == "merging":
                    assert other.managed_ledger("t", 0).cleaner.merge_ledgers(1 << 20) == 5
                else:
                    assert other.delete_records("t", 0, 3) == 3
                other.enforce_retention("t")  # which deletes the trashed files past their delay
            return False

    keeper = Broker(root, conf=conf).housekeeping
    if operation == "merging":
        report = keeper.maintenance("t", target_ledger_bytes=1 << 20, orphan_grace_ms=0, stop=OtherMergesMidway())
        assert report.ledgers_merged == 0
    else:
        report = keeper.clean_logs("t", OtherMergesMidway())
        assert report.partitions_compacted == []
    assert report.errors == [] and len(looks) >= 3  # the merge came mid-rewrite
    fresh = Broker(root)
    assert fresh.verify() == {}
    start = 0 if operation == "merging" else 3
    assert [(r.offset, r.value) for r in fresh.fetch("t", 0, start)] == [(i, b"v%d" % i) for i in range(start, 6)]
    assert len(fresh.view("t", 0).ledgers) == (1 if operation == "merging" else 3)


@pytest.mark.parametrize("operation", ["merging", "cleaning"])
def test_a_rewrite_that_finds_a_ledger_of_the_log_missing_reports_the_damage(root, operation):
    """Not a race this time: the log still holds the ledger whose file is gone, so the rewrite says
    so, naming the file, rather than give way and try again at every pass."""
    conf = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    with Broker(root, conf=conf) as b:
        b.create_topic("t", 1, config={"cleanup.policy": "compact"} if operation == "cleaning" else {})
        for i in range(4):
            b.produce("t", [Record(b"v%d" % i, key=b"k%d" % i)], partition=0)
    b = Broker(root, conf=conf)
    lost = b.view("t", 0).ledgers[1].file
    os.remove(b.fileio.full_path(lost))
    report = b.maintenance("t", target_ledger_bytes=1 << 20) if operation == "merging" else b.clean_logs("t")
    ((where, error),) = report.errors
    assert where == "t-0" and isinstance(error, FileMissingError) and lost in str(error)


def test_wrong_types_at_the_api_name_the_argument(broker):
    with pytest.raises(TypeError, match="Record value must be bytes or None, not str"):
        Record(value="x")
    with pytest.raises(TypeError, match="Record key must be bytes"):
        Record(b"v", key="k")
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        Record(b"v", timestamp_ms="now")
    with pytest.raises(TypeError, match="headers must be"):
        Record(b"v", headers=[(b"h", b"x")])
    with pytest.raises(TypeError, match="partitions must be an int, not str"):
        broker.create_topic("t", partitions="4")
    assert broker.list_topics() == []


def test_a_sink_commit_syncs_a_partitions_directory_once_for_all_the_ledgers_it_moves_in(broker, monkeypatch):
    """Each Spark task stages a ledger per partition; syncing the directory after each move made a
    128-partition commit of 5 tasks 640 directory syncs."""
    from kop_spark.storage.local_fileio import LocalFileIO

    broker.create_topic("t", partitions=1)
    ledgers = []
    for task in range(5):
        staged = broker.sink_commits.stage("t", 0, f"_staging/q/0/{task}")
        staged.append([build_record_batch([Record(b"v%d" % task)])])
        ledgers += staged.finish()
    synced = []
    real = LocalFileIO.sync_dir
    monkeypatch.setattr(LocalFileIO, "sync_dir", lambda self, d: (synced.append(d), real(self, d)))
    broker.append_staged("t", 0, ledgers, ("spark:q", 0))
    log = broker.admin.log("t", 0)
    moved_into = {os.path.dirname(broker.fileio.full_path(log.ledger_path(s.ledger_id))) for s in ledgers}
    assert len(moved_into) == 1 and synced.count(moved_into.pop()) == 1
    assert [r.value for r in broker.fetch("t", 0, 0)] == [b"v%d" % task for task in range(5)]


def _stage_each_partition(broker, topic, partitions, writer="q"):
    """One staged ledger a partition, as a task of ``writer``'s batch 0 leaves them."""
    staged = {}
    for p in range(partitions):
        s = broker.sink_commits.stage(topic, p, f"_staging/{writer}/0/task")
        s.append([build_record_batch([Record(b"p%d-%d" % (p, i)) for i in range(3)])])
        staged[(topic, p)] = s.finish()
    return staged


def test_a_sink_commit_appends_its_partitions_at_once_and_each_once(broker, monkeypatch):
    """Each partition's append is a CAS that waits on fsyncs, or on an object store's round trips:
    one after another, 32 partitions took 4.5 s where a request took 10 ms."""
    import threading

    broker.create_topic("t", partitions=12)
    staged = _stage_each_partition(broker, "t", 12)
    overlap = threading.Barrier(2, timeout=10)  # broken unless two appends are under way together
    real = type(broker).append_staged

    def append_staged(self, topic, partition, ledgers, key):
        if partition < 2:
            overlap.wait()
        return real(self, topic, partition, ledgers, key)

    monkeypatch.setattr(type(broker), "append_staged", append_staged)
    broker.sink_commits.commit("q", 0, staged, streaming=False)
    assert [[r.value for r in broker.fetch("t", p, 0)] for p in range(12)] == [
        [b"p%d-%d" % (p, i) for i in range(3)] for p in range(12)
    ]
    assert broker.sink_commits.record("q") is None  # a batch job leaves nothing behind


def test_a_late_applier_of_a_batch_the_partitions_have_forgotten_appends_nothing(broker):
    """An applier that read the batch record before another completed it (and its partitions forgot
    the batch) finds the batch's ledgers in the partition, and does not append them again."""
    broker.create_topic("t", partitions=2)
    staged = _stage_each_partition(broker, "t", 2)
    broker.sink_commits.commit("q", 0, staged, streaming=False)
    late = [broker.append_staged("t", p, staged[("t", p)], ("spark:q", 0)) for p in range(2)]
    assert [r.duplicate for r in late] == [True, True]
    assert [[r.value for r in broker.fetch("t", p, 0)] for p in range(2)] == [
        [b"p%d-%d" % (p, i) for i in range(3)] for p in range(2)
    ]


def test_a_partition_that_fails_leaves_the_batch_for_its_completion_and_nothing_twice(broker):
    broker.create_topic("t", partitions=8)
    staged = _stage_each_partition(broker, "t", 8)
    (missing,) = staged[("t", 5)]
    hidden = broker.fileio.full_path(missing.file) + ".away"
    os.rename(broker.fileio.full_path(missing.file), hidden)
    with pytest.raises(StorageError, match=missing.file):
        broker.sink_commits.commit("q", 0, staged, streaming=False)
    assert broker.list_offsets("t", 5, "latest") == 0
    (pending,) = broker.sink_commits.pending()
    os.rename(hidden, broker.fileio.full_path(missing.file))
    broker.sink_commits.complete(pending)  # as the rerun or `kop maintenance` does
    assert [[r.value for r in broker.fetch("t", p, 0)] for p in range(8)] == [
        [b"p%d-%d" % (p, i) for i in range(3)] for p in range(8)
    ]
    assert broker.sink_commits.pending() == [] and broker.sink_commits.record("q") is None


def _commit_killed_at(root, staged, point, reached, streaming=False):
    """Commit ``staged`` as batch 0 of writer ``q`` (a batch job, or a streaming query) in a child
    process that dies, as kill -9 would, at the ``reached``-th time it comes to the crash point ``point``."""
    import json
    import subprocess

    from .conftest import PYTHON, python_subprocess_env
    from .faults import arm_crash_point

    arm_crash_point(root, point, reached)
    child = (
        "import json, sys, kop_spark\n"
        "from kop_spark.storage.staging import StagedLedger\n"
        "b = kop_spark.Broker(sys.argv[1])\n"
        "staged = {('t', p): (StagedLedger(*l),) for p, l in enumerate(json.loads(sys.argv[2]))}\n"
        f"b.sink_commits.commit('q', 0, staged, streaming={streaming})\n"
    )
    ledgers = json.dumps([staged[("t", p)][0] for p in range(len(staged))])
    done = subprocess.run([PYTHON, "-c", child, root, ledgers], env=python_subprocess_env(), timeout=120)
    assert done.returncode == 137


def test_a_driver_killed_in_its_commit_has_appended_the_partitions_before_the_cut_and_not_the_cut_one(root):
    """The crash point at N waits for the appends before it, which run at once with it, and dies
    as kill -9 would: what a rerun then completes is applied once."""
    with Broker(root) as b:
        b.create_topic("t", partitions=8)
        staged = _stage_each_partition(b, "t", 8)
    _commit_killed_at(root, staged, "sink-commit", 3)
    with Broker(root) as b:
        ends = [b.list_offsets("t", p, "latest") for p in range(8)]
        assert ends[:4] == [3, 3, 3, 0], ends
        (pending,) = b.sink_commits.pending()
        b.sink_commits.complete(pending)
        assert [[r.value for r in b.fetch("t", p, 0)] for p in range(8)] == [
            [b"p%d-%d" % (p, i) for i in range(3)] for p in range(8)
        ]


def test_past_the_most_writers_a_partition_keeps_finished_ones_idle_long_are_forgotten(root):
    """Each Kafka transactional id is an exactly-once writer, and each left its last batch in every
    partition it wrote for 7 days, rewritten by every append (Flink takes a new id per checkpoint).
    Past the most, those idle long whose batch is finished go, longest idle first; a batch still
    committing keeps its traces, so that its completion appends no partition twice."""
    with Broker(root) as b:
        b.create_topic("t", partitions=2)
        staged = _stage_each_partition(b, "t", 2)
    _commit_killed_at(root, staged, "sink-commit", 1, streaming=True)  # q's batch 0: partition 0 only
    with Broker(root) as b:
        for writer in ("w0", "w1", "w2", "w3"):
            b.sink_commits.commit(writer, 0, _stage_each_partition(b, "t", 2, writer), streaming=True)
    with Broker(root, {"maxExactlyOnceWritersPerPartition": 2}) as b:
        b.enforce_retention()
        assert len(b.admin.log("t", 0).last_known.sinks) == 5  # none idle long: a completer may be under way
    later = ManualClock(int(time.time() * 1000) + FORGETTABLE_AFTER_MS)
    with Broker(root, {"maxExactlyOnceWritersPerPartition": 2}, clock=later) as b:
        b.enforce_retention()
        traces = [sorted(b.admin.log("t", p).last_known.sinks) for p in range(2)]
        assert traces == [["spark:q", "spark:w3"], ["spark:w2", "spark:w3"]]
        (pending,) = b.sink_commits.pending()
        b.sink_commits.complete(pending)
        assert [[r.value for r in b.fetch("t", p, 0)][-3:] for p in range(2)] == [
            [b"p%d-%d" % (p, i) for i in range(3)] for p in range(2)
        ]
        assert [b.list_offsets("t", p, "latest") for p in range(2)] == [15, 15]  # q's batch once


def test_maintenance_leaves_the_ledgers_of_a_batch_recorded_after_its_tasks_looked_gone(root):
    """A slow driver may record a batch after its tasks' lease is over: what the record names is
    the batch, however dead its job looks, and maintenance must not delete it."""
    with Broker(root) as b:
        b.create_topic("t", partitions=2)
        staged = _stage_each_partition(b, "t", 2)
    _commit_killed_at(root, staged, "sink-commit", 0)  # recorded, nothing appended
    long_ago = time.time() - 2 * SINK_LEASE_MS / 1000
    for directory, _, files in os.walk(os.path.join(root, layout.STAGING_DIR)):
        for name in files:
            os.utime(os.path.join(directory, name), (long_ago, long_ago))
    with Broker(root) as b:
        report = b.maintenance(orphan_grace_ms=0)
        assert report.errors == [] and not any(f.endswith(".ledger") for f in report.files_removed)
        (pending,) = b.sink_commits.pending()
        b.sink_commits.complete(pending)
        assert [[r.value for r in b.fetch("t", p, 0)] for p in range(2)] == [
            [b"p%d-%d" % (p, i) for i in range(3)] for p in range(2)
        ]


def test_a_batch_job_killed_while_its_partitions_forget_it_leaves_nothing_to_append_again(root):
    """A batch job's partitions forget its batch once it is appended everywhere; a partition that
    has forgotten it would take it again, so its record must be gone first."""
    with Broker(root) as b:
        b.create_topic("t", partitions=4)
        staged = _stage_each_partition(b, "t", 4)
    _commit_killed_at(root, staged, "sink-forget", 2)
    with Broker(root) as b:
        for pending in b.sink_commits.pending():
            b.sink_commits.complete(pending)  # as `kop maintenance` does once the job's lease is over
        assert [[r.value for r in b.fetch("t", p, 0)] for p in range(4)] == [
            [b"p%d-%d" % (p, i) for i in range(3)] for p in range(4)
        ]
        assert b.sink_commits.record("q") is None


def test_segment_bytes_and_segment_ms_seal_a_topics_ledgers_as_kafka_rolls_segments(root):
    """Per topic, beside the broker's managedLedgerMaxSizePerLedgerMbytes and rollover minutes:
    a ledger is sealed once it holds segment.bytes, or once it is segment.ms old."""
    clock = ManualClock()
    b = Broker(root, clock=clock)
    b.create_topic("by-size", 1, config={"segment.bytes": 3000})
    b.create_topic("by-age", 1, config={"segment.ms": 60_000})
    b.create_topic("neither", 1)
    for _ in range(6):
        for topic in ("by-size", "by-age", "neither"):
            b.produce(topic, [Record(b"v" * 1000)], partition=0)
        clock.advance(20_000)
    lengths = [l.length for l in b.view("by-size", 0).ledgers]
    assert len(lengths) == 2 and all(n >= 3000 for n in lengths), lengths
    assert [l.entries for l in b.view("by-age", 0).ledgers] == [3, 3]
    assert len(b.view("neither", 0).ledgers) == 1
    b.close()


def _settle(directory: str) -> None:
    """Date a directory's last change two seconds back, as if nothing had written there since."""
    past = time.time() - 2
    os.utime(directory, (past, past))


def test_a_view_is_kept_while_the_log_is_unchanged_and_another_writers_append_is_seen_at_once(tmp_path):
    """Readers keep a partition's view while the metadata store's probe says the log is unchanged
    (an idle consumer's fetches look at every partition it reads several times a second); an append
    by another writer changes what the probe sees, so the next look sees the append."""
    root = str(tmp_path / "store")
    with Broker(root) as reader, Broker(root) as writer:
        reader.create_topic("t", 1)
        writer.produce("t", [Record(b"0")], partition=0)
        key_dir = os.path.join(root, "_metadata", *layout.managed_ledger_key(reader.topic_name("t"), 0).split("/"))
        for n in range(1, 4):
            _settle(key_dir)
            first = reader.view("t", 0)
            assert reader.view("t", 0) is first, "kept while unchanged"
            writer.produce("t", [Record(b"%d" % n)], partition=0)
            assert reader.view("t", 0).log_end_offset == n + 1
        assert [r.value for r in reader.fetch("t", 0, 0)] == [b"0", b"1", b"2", b"3"]


def test_a_topics_metadata_is_kept_while_unchanged_and_another_brokers_change_is_seen_at_once(tmp_path):
    """A produce and a Metadata request read their topics' metadata: it is kept while the probe says
    the topic is unchanged, and another process's change is seen at the next read."""
    root = str(tmp_path / "store")
    with Broker(root) as reader, Broker(root) as writer:
        reader.create_topic("t", 1)
        key_dir = os.path.join(root, "_metadata", *layout.topic_key(reader.topic_name("t")).split("/"))
        for n in (2, 3):
            _settle(key_dir)
            first = reader.admin.metadata("t")[1]
            assert reader.admin.metadata("t")[1] is first, "kept while unchanged"
            writer.create_partitions("t", n)
            assert reader.partitions_for("t") == n
            assert [i.partitions for i in reader.topic_infos()] == [n]
        _settle(key_dir)
        assert reader.partitions_for("t") == 3
        writer.delete_topic("t")
        with pytest.raises(TopicNotFoundError):
            reader.partitions_for("t")
        assert reader.topic_infos() == []


@pytest.mark.parametrize("max_age_s", [0.0, 3600.0])
def test_a_view_is_read_again_once_its_maximum_age_is_past_whatever_the_probe_says(tmp_path, monkeypatch, max_age_s):
    """A probe that misses a write (a filesystem whose clock runs behind ours could leave the times
    of a key's directory as they were) hides it for the store's ``probe_max_age_s`` at most."""
    monkeypatch.setattr(FileMetadataStore, "probe", lambda self, key: "unchanged")
    monkeypatch.setattr(FileMetadataStore, "probe_max_age_s", max_age_s)
    root = str(tmp_path / "store")
    with Broker(root) as reader, Broker(root) as writer:
        reader.create_topic("t", 1)
        assert reader.view("t", 0).log_end_offset == 0
        writer.produce("t", [Record(b"0")], partition=0)
        assert reader.view("t", 0).log_end_offset == (1 if max_age_s == 0 else 0)


def test_partition_views_keep_no_probe_of_a_partition_no_look_asked_for_since_the_last_sweep(tmp_path):
    """A fetch's views keep each partition's last probe, to read only those that changed: one no
    look asked for between two sweeps goes (a deleted topic's, a consumer's gone elsewhere), so
    a server keeps no probe of every partition it ever served."""
    with Broker(str(tmp_path / "store")) as b:
        b.create_topic("t", 2)
        b.create_topic("u", 1)
        now = [0.0]
        views = PartitionViews(b.admin, b.store, monotonic=lambda: now[0])
        everything = [("t", 0), ("t", 1), ("u", 0)]
        assert all(isinstance(v, PartitionView) for v in views.each(everything)) and len(views) == 3
        now[0] = SWEEP_S / 2
        views.each([("t", 0)])
        now[0] = SWEEP_S
        views.each([("t", 0)])
        assert len(views) == 3  # all were looked at since the start
        now[0] = 2 * SWEEP_S
        assert isinstance(views.each([("t", 0)])[0], PartitionView) and len(views) == 1
