"""format("kop") writes on a real local Spark session: Kafka-sink parity, exactly-once, clean-up."""

import datetime
import glob
import os
import random
import signal
import subprocess
import threading
import time

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

from kop_spark import Broker, Record
from kop_spark.record import build_record_batch
from kop_spark.storage.staging import LedgerStager

from .conftest import PYTHON, forget_last_batch_commit, python_subprocess_env

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
        StructField("timestamp", TimestampType()),
    ]
)


def write(df, root, **options):
    w = df.write.format("kop").mode("append").option("kop.root", root)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def all_records(b, topic):
    out = []
    for p in range(b.partitions_for(topic)):
        out += b.fetch(topic, p, offset=b.list_offsets(topic, p, "earliest"), max_records=1 << 30)
    return out


class _Decoded:
    def __init__(self, batch_offset, r):
        self.batch_offset, self.offset, self.key, self.value = batch_offset, r.offset, r.key, r.value
        self.headers, self.timestamp = r.headers, r.timestamp


def kafka_decoded(b, topic):
    """Every record of ``topic`` as kafka-python decodes the batches FETCH hands out."""
    out = []
    for p in range(b.partitions_for(topic)):
        offset, end = 0, b.list_offsets(topic, p, "latest")
        while offset < end:
            for raw in b.fetch_batches(topic, p, offset):
                batch = KafkaBatch(raw)
                assert batch.validate_crc()
                for r in batch:
                    out.append(_Decoded(batch.base_offset, r))
                offset = batch.base_offset + batch.last_offset_delta + 1
    return out


def staged_files(root):
    return [os.path.join(d, f) for d, _, files in os.walk(os.path.join(root, "_staging")) for f in files]


NOW = int(time.time() * 1000)


def ts(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


@pytest.fixture
def disk_broker(disk_tmp_path):
    """A store on a disk, where tasks stage their ledgers with O_DIRECT (pytest's temporary
    directories may be on tmpfs, which refuses it before Linux 6.6: tasks then write through the
    page cache)."""
    b = Broker(str(disk_tmp_path / "store"))
    yield b
    b.close()


def test_written_records_read_back_by_broker_and_a_kafka_client(spark, disk_broker):
    broker, root = disk_broker, disk_broker.root
    broker.create_topic("out", partitions=3)
    rng = random.Random(3)
    rows = [
        (
            None if i % 4 == 0 else f"key-{rng.randrange(50)}".encode(),
            f"value-{i}".encode(),
            "out",
            None,
            [Row(key="h", value=str(i).encode()), Row(key="n", value=None)],
            ts(NOW - 1000 * i),
        )
        for i in range(200)
    ]
    write(spark.createDataFrame(rows, SCHEMA).repartition(3), root, **{"compression.type": "zstd"})
    got = all_records(broker, "out")
    assert sorted(r.value for r in got) == sorted(r[1] for r in rows)
    by_value = {r[1]: r for r in rows}
    for rec in got:
        key, _, _, _, headers, when = by_value[rec.value]
        assert rec.key == key
        assert rec.headers == tuple((h.key, h.value) for h in headers)
        assert rec.timestamp_ms == int(when.timestamp() * 1000)
        if key is not None:  # where a Kafka client's default partitioner puts it
            assert rec.partition == (kafka_murmur2(key) & 0x7FFFFFFF) % 3
    keyless = [r.partition for r in got if r.key is None]
    assert len(set(keyless)) == 3  # records without a key spread across partitions
    for p in range(3):  # offsets continuous from 0
        assert [r.offset for r in got if r.partition == p] == list(range(broker.list_offsets("out", p, "latest")))
    # The raw batches decode with kafka-python to the same records.
    decoded = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in kafka_decoded(broker, "out")]
    assert sorted(d[2] for d in decoded) == sorted(r.value for r in got)
    assert {d[2]: (d[1], d[3], d[4]) for d in decoded} == {r.value: (r.key, r.headers, r.timestamp_ms) for r in got}


def test_keyless_records_round_robin_from_each_tasks_id_across_arrow_batches(spark, root, broker):
    broker.create_topic("rr", partitions=3)
    schema = StructType([StructField("value", BinaryType())])
    # Three tasks of one record each: each starts at its own task id, so they spread.
    write(
        spark.createDataFrame(spark.sparkContext.parallelize([(b"a",), (b"b",), (b"c",)], 3), schema), root, topic="rr"
    )
    assert sorted(r.partition for r in all_records(broker, "rr")) == [0, 1, 2]
    # One task, Arrow batches of two rows: the rotation carries on from batch to batch.
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        rows = [(b"v%d" % i,) for i in range(6)]
        write(spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), schema), root, topic="rr")
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    placed = {r.value: r.partition for r in all_records(broker, "rr") if r.value.startswith(b"v")}
    assert [placed[v] for (v,) in rows] == [0, 1, 2, 0, 1, 2]


def test_string_columns_topic_column_and_partition_column(spark, root, broker):
    broker.create_topic("a", partitions=2)
    broker.create_topic("b", partitions=4)
    df = spark.createDataFrame(
        [("k1", "v1", "a", 1), ("k2", "v2", "b", 3), (None, "v3", "b", None)],
        "key string, value string, topic string, partition int",
    )
    write(df, root)
    assert [(r.key, r.value) for r in broker.fetch("a", 1, 0)] == [(b"k1", b"v1")]
    assert next((r.key, r.value) for r in broker.fetch("b", 3, 0)) == (b"k2", b"v2")
    # The topic option overrides the column.
    before = broker.list_offsets("b", 1, "latest")
    write(df.where("partition = 1"), root, topic="b")
    assert [(r.key, r.value) for r in broker.fetch("b", 1, before)] == [(b"k1", b"v1")]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_types_decode_with_a_kafka_client(spark, root, broker, codec):
    broker.create_topic("c", partitions=1)
    df = spark.createDataFrame([(f"v{i}" * 20,) for i in range(300)], "value string")
    write(df, root, topic="c", **{"compression.type": codec, "batch.size": "4096"})
    records = kafka_decoded(broker, "c")
    assert len({r.batch_offset for r in records}) > 1  # batch.size splits the output into several batches
    values = [r.value for r in records]
    assert sorted(values) == sorted(f"v{i}".encode() * 20 for i in range(300))


def test_default_batches_are_a_sinks_not_a_producers_and_fit_the_topic(spark, root, broker):
    """Without batch.size, batches of up to 256 KiB (a producer's 16 KiB costs a quarter of a task's
    time in per-batch work), and at most half a topic's smaller max.message.bytes."""
    broker.create_topic("big", partitions=1)
    broker.create_topic("small", partitions=1, config={"max.message.bytes": 40_000})
    df = spark.createDataFrame([(b"v" * 1000,) for _ in range(2000)], "value binary").coalesce(1)
    for topic in ("big", "small"):
        write(df, root, topic=topic)
    sizes = {t: [len(raw) for raw in broker.fetch_batches(t, 0, 0, max_bytes=1 << 30)] for t in ("big", "small")}
    assert 128 << 10 < max(sizes["big"]) <= (256 << 10) + 2000  # closed by the record that reaches 256 KiB
    assert max(sizes["small"]) <= 20_000 + 2000
    assert sum(1 for r in kafka_decoded(broker, "small")) == 2000


def test_a_many_partition_topics_rows_are_held_across_arrow_batches_for_fuller_batches(spark, root, broker):
    """Spark hands a task its rows an Arrow batch at a time; over 16 partitions each gave every
    partition a sliver, a batch of its own. Rows are held, as a producer's accumulator holds them,
    until each partition has a quarter of a batch, or the task holds ``buffer.memory``."""
    rows = [(b"k%d" % i, b"%06d" % i + b"x" * 100) for i in range(2000)]
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")  # 200 Arrow batches
    batches = {}
    try:
        df = spark.createDataFrame(rows, "key binary, value binary").coalesce(1)
        for topic, held in (("held", {}), ("unheld", {"buffer.memory": "1"})):
            broker.create_topic(topic, partitions=16)
            write(df, root, topic=topic, **{"batch.size": "4096", **held})
            batches[topic] = 0
            for p in range(16):
                values = [r.value for r in broker.fetch(topic, p, 0, max_records=1 << 20)]
                assert values == sorted(v for k, v in rows if (kafka_murmur2(k) & 0x7FFFFFFF) % 16 == p)  # in order
                batches[topic] += len(broker.fetch_batches(topic, p, 0, max_bytes=1 << 30))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert batches["unheld"] >= 4 * batches["held"], batches


@pytest.mark.parametrize(
    "ddl, options, message",
    [
        ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
        ("value int", {"topic": "t"}, "value attribute type must be a string or binary"),
        ("value string, key array<int>", {"topic": "t"}, "key attribute type must be a string or binary"),
        ("value string", {}, "topic option required when no 'topic' attribute is present"),
        ("value string, topic int", {}, "topic attribute type must be a string"),
        ("value string, partition string", {"topic": "t"}, "partition attribute type must be an int"),
        (
            "value string, headers string",
            {"topic": "t"},
            "headers attribute type must be an array<struct<key:string,value:binary>>",
        ),
        ("value string", {"topic": "missing"}, "topic 'missing' does not exist"),
        ("value string", {"topic": "t", "compression.type": "brotli"}, "option 'compression.type'"),
        ("value string", {"topic": "t", "batch.size": "-1"}, "option 'batch.size'"),
        ("value string", {"topic": "t", "buffer.memory": "lots"}, "option 'buffer.memory'"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(spark, root, broker, ddl, options, message):
    broker.create_topic("t", partitions=1)
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        write(df, root, **options)
    assert broker.list_offsets("t", 0, "latest") == 0


def test_rows_stamped_beyond_the_topics_bounds_fail_the_write_and_write_nothing(spark, root, broker):
    """A broker refuses them from a Kafka producer (message.timestamp.after.max.ms); so does the sink."""
    broker.create_topic("t", partitions=1)
    ahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)
    df = spark.createDataFrame([("v", ahead)], "value string, timestamp timestamp")
    with pytest.raises(Exception, match=r"t-0: timestamp \d+ is out of range.*message\.timestamp\.after\.max\.ms"):
        write(df, root, topic="t")
    assert broker.list_offsets("t", 0, "latest") == 0


def test_save_modes_and_topic_auto_creation(spark, root, broker):
    broker.create_topic("t", partitions=1)
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="append-only: save mode Overwrite is not supported"):
        df.write.format("kop").mode("overwrite").option("kop.root", root).option("topic", "t").save()
    with pytest.raises(Exception, match="ErrorIfExists"):
        df.write.format("kop").option("kop.root", root).option("topic", "t").save()
    write(df, root, topic="fresh", **{"auto.create.topics.enable": "true", "num.partitions": "5"})
    assert broker.partitions_for("fresh") == 5
    assert sum(broker.list_offsets("fresh", p, "latest") for p in range(5)) == 1


def test_a_failed_job_leaves_nothing_visible_or_staged(spark, root, broker):
    broker.create_topic("t", partitions=2)
    # One task's rows are fine, the other's name a partition that does not exist.
    df = spark.createDataFrame([("ok", 0)] * 50 + [("bad", 7)], "value string, partition int").repartition(2)
    with pytest.raises(Exception, match="topic 't' has no partition 7"):
        write(df, root, topic="t", **{"batch.size": "64"})  # both tasks stage files before one fails
    assert [broker.list_offsets("t", p, "latest") for p in range(2)] == [0, 0]
    # Spark fails the job before its other task has stopped: that one discards its output itself,
    # once it has ended, where the job's abort had already run.
    deadline = time.monotonic() + 60
    while staged_files(root) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition asserted below, within the deadline
    assert staged_files(root) == []


def test_stream_write_and_a_rerun_batch_is_applied_once(spark, root, broker, tmp_path):
    broker.create_topic("in", partitions=2)
    broker.create_topic("out", partitions=2)
    for i in range(60):
        broker.produce("in", [Record(value=f"v{i}".encode(), key=f"k{i % 7}".encode())])
    df = (
        spark.readStream.format("kop")
        .option("kop.root", root)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")  # several batches
        .load()
    )
    q = (
        df.selectExpr("key", "value")
        .writeStream.format("kop")
        .option("kop.root", root)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    q.processAllAvailable()
    q.stop()
    assert sorted(r.value for r in all_records(broker, "out")) == sorted(f"v{i}".encode() for i in range(60))
    forget_last_batch_commit(str(tmp_path / "ck"))
    q = (
        df.selectExpr("key", "value")
        .writeStream.format("kop")
        .option("kop.root", root)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    q.processAllAvailable()
    q.stop()
    assert sorted(r.value for r in all_records(broker, "out")) == sorted(f"v{i}".encode() for i in range(60))
    assert staged_files(root) == []


def test_exactly_once_through_driver_kills(root, tmp_path):
    """A read-transform-write query killed with SIGKILL at random moments and restarted ends with
    every input record in the output topic exactly once, at continuous offsets. (Two kills here, each
    a Spark driver's start; four in the object-store twin, with the slow tests.)"""
    exactly_once_through_driver_kills(root, tmp_path)


def drop_temporary_checkpoint_files(ck: str) -> None:
    """PySpark 4.0 and 4.1 refuse to start batch 0 over the temporary offset-log file a killed
    driver left (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), a Spark matter: clear what they would
    have written over, as an operator would."""
    for path in glob.glob(os.path.join(ck, "*", ".*.tmp*")):
        os.remove(path)


def exactly_once_through_driver_kills(root, tmp_path, kills: int = 2):
    """Up to ``kills`` drivers killed, each at a random moment of its run; then one runs to the end."""
    with Broker(root) as b:
        b.create_topic("in", partitions=2)
        b.create_topic("out", partitions=2)
        for i in range(0, 600, 6):
            b.produce(
                "in",
                [
                    Record(value=f"e{j}".encode(), key=f"user{j % 13}".encode(), headers=[("seq", str(j).encode())])
                    for j in range(i, i + 6)
                ],
            )
    rng = random.Random(os.getpid())
    env = python_subprocess_env()
    ck = str(tmp_path / "ck")
    killed = 0
    for attempt in range(kills + 1):
        drop_temporary_checkpoint_files(ck)
        log = tmp_path / f"driver-{attempt}.err"  # shown if the last run fails: what the driver said
        with open(log, "w") as err:  # the child has its own copy of the descriptor
            proc = subprocess.Popen(
                [PYTHON, "-m", "tests.spark_pipeline_process", root, ck],
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        if attempt < kills:
            assert proc.stdout.readline().strip() == "started"
            timer = threading.Timer(rng.uniform(0.2, 4.0), lambda p=proc: p.send_signal(signal.SIGKILL))
            timer.start()
            out = proc.stdout.read()
            proc.wait()
            timer.cancel()
            killed += proc.returncode == -signal.SIGKILL
            if "done" in out and proc.returncode == 0:
                break
        else:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0 and "done" in out, log.read_text()[-3000:]
            break
    with Broker(root) as b:
        got = all_records(b, "out")
        values = sorted(r.value for r in got)
        assert values == sorted(f"out:e{j}".encode() for j in range(600)), f"after {killed} kills"
        for p in range(2):
            assert [r.offset for r in got if r.partition == p] == list(range(b.list_offsets("out", p, "latest")))
        for r in got:  # keyed records keep their key, so they land where the key says
            assert r.headers == (("seq", r.value[len("out:e") :]),)
        assert {tp: o.offset for tp, o in b.fetch_offsets("pipeline").items()} == {
            ("in", p): b.list_offsets("in", p, "latest") for p in range(2)
        }
    assert killed >= 1


def test_spark_write_racing_a_broker_producer(spark, root, broker):
    broker.create_topic("t", partitions=1)
    producer = subprocess.Popen(
        [PYTHON, "-m", "tests.writer_process", root, "w", "400", "50"],
        env=python_subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert producer.stdout.readline().strip() == "ready"
    producer.stdin.write("go\n")
    producer.stdin.flush()
    df = spark.createDataFrame([(f"spark/{i}", 0) for i in range(3000)], "value string, partition int").repartition(4)
    for chunk in range(3):
        write(df.where(f"cast(substring(value, 7) as int) % 3 = {chunk}"), root, topic="t", **{"batch.size": "2048"})
    confirmed = [line.split() for line in producer.stdout.read().splitlines()]
    assert producer.wait() == 0
    got = broker.fetch("t", 0, 0, max_records=1 << 30)
    assert [r.offset for r in got] == list(range(broker.list_offsets("t", 0, "latest")))
    values = [r.value.decode() for r in got]
    assert len(values) == len(set(values))  # nothing twice
    assert {v for v in values if v.startswith("spark/")} == {f"spark/{i}" for i in range(3000)}
    produced = {v for v in values if v.startswith("w/")}
    assert len(produced) == sum(int(c) for _, _, c in confirmed)  # nothing lost
    for _, base, count in confirmed:  # each producer append sits where its confirmation said
        assert all(got[int(base) + k].value.decode().startswith("w/") for k in range(int(count)))


def test_maintenance_merges_small_ledgers_and_removes_orphans(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMergeInPassing": 0})
    b.create_topic("t", partitions=1)
    for i in range(41):
        b.produce("t", [Record(value=f"v{i}".encode(), key=f"k{i % 5}".encode(), timestamp_ms=int(time.time() * 1000))])
    before = [(r.offset, r.key, r.value, r.timestamp_ms) for r in b.fetch("t", 0, 0, max_records=100)]
    assert len(b.view("t", 0).ledgers) == 21
    orphan = LedgerStager(b.fileio, "_staging/crashed-query/3/0-0/x.ledger")
    orphan.append([build_record_batch([Record(value=b"x", timestamp_ms=1)])], 0)
    fresh = LedgerStager(b.fileio, "_staging/running-query/1/0-0/y.ledger")
    old = time.time() - 7200
    os.utime(os.path.join(root, "_staging/crashed-query/3/0-0/x.ledger"), (old, old))
    report = b.maintenance(target_ledger_bytes=1 << 20, orphan_grace_ms=3_600_000)
    assert report.ledgers_merged == 19  # 20 sealed ledgers into one; the open tail stays
    assert report.files_removed == ["_staging/crashed-query/3/0-0/x.ledger"]
    assert os.path.exists(os.path.join(root, "_staging/running-query/1/0-0/y.ledger"))  # too young to judge
    fresh.discard()
    b.close()
    with Broker(root) as again:
        assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in again.fetch("t", 0, 0, max_records=100)] == before
        assert again.list_offsets("t", 0, 17) == 0  # timestamps still index
        snap = again.view("t", 0)
        assert [(l.base_offset, l.end_offset, l.state) for l in snap.ledgers] == [(0, 40, "sealed"), (40, 41, "sealed")]
        for offset in (0, 13, 39, 40):
            assert again.fetch("t", 0, offset, max_records=1)[0].value == f"v{offset}".encode()
