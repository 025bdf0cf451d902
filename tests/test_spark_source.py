"""format("kop") reads on a real local Spark session: batch and streaming, Kafka-source parity."""

import ast
import datetime
import itertools
import json
import math
import random
import shutil
import subprocess
import threading
import time

import pytest
from chispa import assert_df_equality
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql import Row

import kop_spark
from kop_spark import Broker, CompressionType, ConfigError, Record
from kop_spark.spark._compat import ADMISSION_CONTROL
from kop_spark.spark.batch_reader import KopBatchReader
from kop_spark.spark.options import SinkOptions, SourceOptions
from kop_spark.spark.schema import source_schema

from .conftest import PYTHON, python_subprocess_env

# Errors raised in Python data source code reach the test as Spark's wrappers of them; what
# matters is the message the user sees.
SPARK_ERRORS = Exception


def now_ms():
    return int(time.time() * 1000)


def produce(b, topic, partition, n, *, start=0, ts=None, batch=1, compression=CompressionType.NONE):
    """Produce ``n`` records ``{topic}-{partition}-{i}`` in batches of ``batch``; return their offsets."""
    offsets = []
    for i in range(start, start + n, batch):
        records = [
            Record(
                value=f"{topic}-{partition}-{j}".encode(),
                key=f"k{j}".encode(),
                timestamp_ms=now_ms() if ts is None else ts + j,
                headers=[("n", str(j).encode())],
            )
            for j in range(i, min(i + batch, start + n))
        ]
        ((_, base, count),) = b.produce(topic, records, partition=partition, compression=compression)
        offsets.extend(range(base, base + count))
    return offsets


def kop(spark, root, stream=False, **options):
    r = spark.readStream if stream else spark.read
    r = r.format("kop").option("kop.root", root)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def offsets_of(df):
    return sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())


def expected_df(spark, b, topic, partitions, include_headers=False):
    rows = []
    for p in partitions:
        for rec in b.fetch(topic, p, offset=b.list_offsets(topic, p, "earliest"), max_records=1 << 30):
            row = [rec.key, rec.value, topic, p, rec.offset, _ts(rec.timestamp_ms), int(rec.timestamp_type)]
            if include_headers:
                row.append([Row(key=k, value=v) for k, v in rec.headers])
            rows.append(row)
    return spark.createDataFrame(rows, source_schema(include_headers))


def _ts(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


@pytest.fixture
def small_ledgers(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 3})
    yield b
    b.close()


# -- schema and what Spark sees ------------------------------------------------------------------


def test_schema_is_the_kafka_sources(spark, root, broker):
    broker.create_topic("t", partitions=1)
    plain = kop(spark, root, subscribe="t")
    assert plain.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    with_headers = kop(spark, root, subscribe="t", includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")
    with pytest.raises(SPARK_ERRORS, match="fixed schema"):
        spark.read.format("kop").schema("value string").option("kop.root", root).option(
            "subscribe", "t"
        ).load().collect()


def test_spark_reads_every_offset_the_broker_assigned(spark, root, small_ledgers):
    """Across ledger rollovers, codecs and batch sizes, Spark's (partition, offset) -> record is the Broker's."""
    b = small_ledgers
    b.create_topic("t", partitions=3)
    rng = random.Random(7)
    for _ in range(60):
        p = rng.randrange(3)
        produce(
            b,
            "t",
            p,
            rng.randint(1, 7),
            start=rng.randrange(10_000),
            batch=rng.randint(1, 4),
            compression=rng.choice(list(CompressionType)),
        )
    b.produce("t", [Record(value=None, key=b"tombstone", timestamp_ms=now_ms())], partition=0)
    assert len(b.view("t", 0).ledgers) > 10
    actual = kop(spark, root, subscribe="t", includeHeaders="true")
    assert_df_equality(
        actual, expected_df(spark, b, "t", range(3), include_headers=True), ignore_row_order=True, ignore_nullable=True
    )


def test_format_is_found_without_register_and_register_is_harmless(spark, root, broker):
    broker.create_topic("t", partitions=1)
    produce(broker, "t", 0, 3)
    kop_spark.register(spark)
    assert offsets_of(kop(spark, root, subscribe="t")) == [("t", 0, 0), ("t", 0, 1), ("t", 0, 2)]
    # The root as the load() path, as for file sources.
    assert spark.read.format("kop").option("subscribe", "t").load(root).count() == 3


def test_executors_need_only_the_ledger_files(root, small_ledgers):
    """A planned partition reads with the metadata store gone: executors make no metadata calls."""
    b = small_ledgers
    b.create_topic("t", partitions=1)
    produce(b, "t", 0, 20, batch=2)
    b.close()
    reader = KopBatchReader(SourceOptions.parse({"kop.root": root, "subscribe": "t"}, streaming=False))
    planned = reader.partitions()
    shutil.rmtree(f"{root}/_metadata")
    batches = [rb for p in planned for rb in reader.read(p)]
    assert [o for rb in batches for o in rb.column("offset").to_pylist()] == list(range(20))


# -- batch options --------------------------------------------------------------------------------


def test_batch_starting_and_ending_offsets(spark, root, broker):
    broker.create_topic("t", partitions=2)
    produce(broker, "t", 0, 10)
    produce(broker, "t", 1, 5)

    def read(**o):
        return offsets_of(kop(spark, root, subscribe="t", **o))

    assert len(read()) == 15  # earliest to latest
    got = read(startingOffsets=json.dumps({"t": {"0": 3, "1": -2}}), endingOffsets=json.dumps({"t": {"0": 6, "1": -1}}))
    assert got == [("t", 0, o) for o in range(3, 6)] + [("t", 1, o) for o in range(5)]
    assert read(startingOffsets="earliest", endingOffsets="latest") == read()
    with pytest.raises(SPARK_ERRORS, match="must specify all TopicPartitions"):
        read(startingOffsets=json.dumps({"t": {"0": 3}}))
    with pytest.raises(SPARK_ERRORS, match="Beginning offset 8 is after the ending offset 4 for topic t partition 0"):
        read(startingOffsets=json.dumps({"t": {"0": 8, "1": 0}}), endingOffsets=json.dumps({"t": {"0": 4, "1": 5}}))


def test_batch_timestamps(spark, root, broker):
    broker.create_topic("t", partitions=2)
    base = now_ms() - 60_000
    produce(broker, "t", 0, 10, ts=base)  # record i at base + i
    produce(broker, "t", 1, 10, ts=base + 100)

    def read(**o):
        return offsets_of(kop(spark, root, subscribe="t", **o))

    assert read(startingTimestamp=str(base + 5), endingTimestamp=str(base + 8)) == [("t", 0, o) for o in range(5, 8)]
    by_ts = json.dumps({"t": {"0": base + 7, "1": base + 100 + 2}})
    assert read(startingOffsetsByTimestamp=by_ts) == [("t", 0, o) for o in range(7, 10)] + [
        ("t", 1, o) for o in range(2, 10)
    ]
    # startingTimestamp wins over startingOffsetsByTimestamp and startingOffsets, as in Spark.
    assert read(startingTimestamp=str(base + 9), startingOffsetsByTimestamp=by_ts, startingOffsets="earliest") == [
        ("t", 0, 9)
    ] + [("t", 1, o) for o in range(10)]
    end_by_ts = json.dumps({"t": {"0": base + 2, "1": base + 10**9}})  # no match: latest
    assert read(endingOffsetsByTimestamp=end_by_ts) == [("t", 0, 0), ("t", 0, 1)] + [("t", 1, o) for o in range(10)]
    future = str(now_ms() + 10**9)
    with pytest.raises(SPARK_ERRORS, match="No offset matched from request of topic-partition t-0 and timestamp"):
        read(startingTimestamp=future)
    assert read(startingTimestamp=future, startingOffsetsByTimestampStrategy="latest") == []


def test_subscribe_pattern_and_assign(spark, root, broker):
    for t in ("orders-eu", "orders-us", "payments"):
        broker.create_topic(t, partitions=2)
        produce(broker, t, 0, 2)
        produce(broker, t, 1, 1)
    assert {t for t, _, _ in offsets_of(kop(spark, root, subscribePattern="orders-.*"))} == {"orders-eu", "orders-us"}
    assert offsets_of(kop(spark, root, subscribe="orders-eu, payments")) == [
        ("orders-eu", 0, 0),
        ("orders-eu", 0, 1),
        ("orders-eu", 1, 0),
        ("payments", 0, 0),
        ("payments", 0, 1),
        ("payments", 1, 0),
    ]
    assert offsets_of(kop(spark, root, assign=json.dumps({"payments": [1], "orders-us": [0]}))) == [
        ("orders-us", 0, 0),
        ("orders-us", 0, 1),
        ("payments", 1, 0),
    ]
    with pytest.raises(SPARK_ERRORS, match="partition 5"):
        kop(spark, root, assign=json.dumps({"payments": [5]})).collect()
    assert kop(spark, root, subscribe="no-such-topic").count() == 0  # as a Kafka subscription


def test_min_partitions_and_max_records_per_partition(spark, root, broker):
    broker.create_topic("t", partitions=2)
    produce(broker, "t", 0, 90, batch=10)
    produce(broker, "t", 1, 10, batch=10)
    assert kop(spark, root, subscribe="t").rdd.getNumPartitions() == 2
    split = kop(spark, root, subscribe="t", minPartitions="10")
    assert split.rdd.getNumPartitions() == 10  # 9 for the big partition, 1 for the small one, as Spark splits
    assert offsets_of(split) == offsets_of(kop(spark, root, subscribe="t"))
    capped = kop(spark, root, subscribe="t", maxRecordsPerPartition="25")
    assert capped.rdd.getNumPartitions() == 5  # ceil(90/25) + ceil(10/25)
    assert len(offsets_of(capped)) == 100


def test_max_partitions_reads_several_partitions_a_task_each_in_order(spark, root, broker):
    broker.create_topic("t", partitions=5)
    for p in range(5):
        produce(broker, "t", p, 10 * (p + 1), batch=7)
    packed = kop(spark, root, subscribe="t", maxPartitions="2")
    assert packed.rdd.getNumPartitions() == 2
    # each task holds whole partitions, each in offset order
    tasks = packed.select("partition", "offset").rdd.glom().collect()
    for rows in tasks:
        runs = {}
        for r in rows:
            runs.setdefault(r.partition, []).append(r.offset)
        assert all(offsets == list(range(len(offsets))) for offsets in runs.values())
    assert sorted(len(rows) for rows in tasks) == [70, 80]  # 40 + 30, and 50 + 20 + 10
    assert offsets_of(packed) == offsets_of(kop(spark, root, subscribe="t"))
    assert kop(spark, root, subscribe="t", maxPartitions="9").rdd.getNumPartitions() == 5
    both = kop(spark, root, subscribe="t", maxPartitions="3", minPartitions="3")
    assert both.rdd.getNumPartitions() == 3 and len(offsets_of(both)) == 150


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "One of the following options must be specified"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"assign": "[0]"}, "option 'assign': expected e.g."),
        ({"subscribe": "t", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets for t-0 can't be latest"),
        ({"subscribe": "t", "startingOffsets": "{oops"}, "option 'startingOffsets': expected e.g."),
        ({"subscribe": "t", "startingOffsets": "yesterday"}, "option 'startingOffsets': expected 'earliest'"),
        ({"subscribe": "t", "startingTimestamp": "noon"}, "option 'startingTimestamp': expected a single long"),
        (
            {"subscribe": "t", "startingOffsetsByTimestampStrategy": "closest"},
            "option 'startingOffsetsByTimestampStrategy'",
        ),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss'"),
        ({"subscribe": "t", "minFetchPeriod": "soon"}, "option 'minFetchPeriod': expected a duration"),
        ({"subscribe": "t", "minPartitions": "0"}, "Invalid value '0' for option 'minPartitions'"),
        ({"subscribe": "t", "maxRecordsPerPartition": "x"}, "option 'maxRecordsPerPartition'"),
        ({"subscribe": "t", "maxPartitions": "-1"}, "Invalid value '-1' for option 'maxPartitions'"),
        ({"subscribe": "t", "maxPartitions": "2", "minPartitions": "3"}, "'minPartitions' \\(3\\) is more than"),
        ({"subscribe": "t", "maxPartitions": "2", "maxRecordsPerPartition": "9"}, "cannot both be set"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
        ({"subscribe": "t", "kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
        ({"subscribe": "t", "kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
        ({"subscribe": "t", "kop.noSuchSetting": "1"}, "option 'kop.nosuchsetting': unknown setting"),
        ({"subscribe": "t", "startingOffsets": "group"}, "set option 'group.id'"),
    ],
)
def test_bad_batch_options_are_named(spark, root, broker, options, message):
    broker.create_topic("t", partitions=1)
    with pytest.raises(SPARK_ERRORS, match=message):
        kop(spark, root, **options).collect()


@pytest.mark.parametrize("option", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"])
def test_endings_are_refused_in_streaming(spark, root, broker, tmp_path, option):
    """The refusal ends the trace the user reads: PySpark's stream runner stops the reader it
    made in a ``finally``, and its UnboundLocalError followed ours where making one raised."""
    broker.create_topic("t", partitions=1)
    with pytest.raises(SPARK_ERRORS, match="not valid in streaming queries") as caught:
        q = (
            kop(spark, root, stream=True, subscribe="t", **{option: "1"})
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            q.processAllAvailable()
        finally:
            q.stop()
    assert "UnboundLocalError" not in str(caught.value)


# -- streaming ------------------------------------------------------------------------------------


def start(df, tmp_path, name="ck", sink="memory", query_name=None, trigger=None, **options):
    w = df.writeStream.format(sink).option("checkpointLocation", str(tmp_path / name))
    if query_name:
        w = w.queryName(query_name)
    if trigger:
        w = w.trigger(**trigger)
    for k, v in options.items():
        w = w.option(k, v)
    return w.start()


def end_offset(progress):
    return offset_value(progress["sources"][0]["endOffset"])


def offset_value(offset):
    """A source offset from a progress report: a dict, JSON, or (PySpark 4.0's progress, which
    str()s the parsed offset) a Python literal."""
    if not isinstance(offset, str):
        return offset
    try:
        return json.loads(offset)
    except ValueError:
        return ast.literal_eval(offset)


def batch_sizes(q):
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


@pytest.mark.parametrize("packed", [{}, {"maxPartitions": "1"}], ids=["a task a partition", "maxPartitions=1"])
def test_stream_restart_from_checkpoint_reads_each_record_once(spark, root, small_ledgers, tmp_path, packed):
    b = small_ledgers
    b.create_topic("t", partitions=2)
    produce(b, "t", 0, 30, batch=2)
    produce(b, "t", 1, 12)
    out = str(tmp_path / "out")
    df = kop(spark, root, stream=True, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="7", **packed)
    q = start(df.select("partition", "offset"), tmp_path, sink="parquet", path=out)
    q.processAllAvailable()
    q.stop()
    produce(b, "t", 0, 5)
    produce(b, "t", 1, 9)
    # startingOffsets only applies to a fresh query: the restart resumes from the checkpoint.
    df = kop(spark, root, stream=True, subscribe="t", startingOffsets="latest", maxOffsetsPerTrigger="7", **packed)
    q = start(df.select("partition", "offset"), tmp_path, sink="parquet", path=out)
    q.processAllAvailable()
    q.stop()
    got = sorted((r.partition, r.offset) for r in spark.read.parquet(out).collect())
    assert got == [(0, o) for o in range(35)] + [(1, o) for o in range(21)]


def start_on_empty_topic(spark, root, broker, tmp_path, partitions, **options):
    """A query started before its backlog arrives: before PySpark 4.2 Spark asks a new query's
    source for its first batch before telling it where it starts, so that batch is unbounded."""
    broker.create_topic("t", partitions=partitions)
    q = start(
        kop(spark, root, stream=True, subscribe="t", startingOffsets="earliest", **options), tmp_path, sink="noop"
    )
    q.processAllAvailable()
    return q


def test_max_offsets_per_trigger_is_shared_by_backlog(spark, root, broker, tmp_path):
    q = start_on_empty_topic(spark, root, broker, tmp_path, 2, maxOffsetsPerTrigger="8")
    produce(broker, "t", 0, 30, batch=10)
    produce(broker, "t", 1, 11, batch=11)
    q.processAllAvailable()
    q.stop()
    ends = [end_offset(p) for p in q.recentProgress if p["numInputRows"]]
    # The running query may take a batch between the two produces; once both backlogs are there
    # they share the batch of 8 as Spark prorates it: each its part of the backlog, floored (a part
    # under one record rounds up), so partition 0's larger backlog takes the larger share. With 30
    # and 11 records the shares are fractions however the batches fell, so the rounding shows.
    steps = [
        {p: b["t"][p] - a["t"][p] for p in ("0", "1")} for a, b in itertools.pairwise([{"t": {"0": 0, "1": 0}}, *ends])
    ]
    at = next(i for i, s in enumerate(steps) if s["0"] and s["1"])
    backlog = {p: total - sum(s[p] for s in steps[:at]) for p, total in (("0", 30), ("1", 11))}
    prorated = {p: 8 * b / sum(backlog.values()) for p, b in backlog.items()}
    expected = {p: min(math.ceil(x) if x < 1 else math.floor(x), backlog[p]) for p, x in prorated.items()}
    assert steps[at] == expected
    if ADMISSION_CONTROL:  # Spark asks for reportLatestOffset from PySpark 4.2: the backlog shows
        latest = [p for p in q.recentProgress if p["numInputRows"]][-1]["sources"][0]["latestOffset"]
        assert offset_value(latest) == {"t": {"0": 30, "1": 11}}
    assert all(n <= 8 for n in batch_sizes(q))
    assert sum(batch_sizes(q)) == 41


def test_min_offsets_per_trigger_waits_for_enough_records(spark, root, broker, tmp_path):
    broker.create_topic("t", partitions=1)
    produce(broker, "t", 0, 3)
    df = kop(
        spark,
        root,
        stream=True,
        subscribe="t",
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="1h",
    )
    q = start(df, tmp_path, sink="noop")
    q.processAllAvailable()  # the first trigger runs at once, as in Spark
    produce(broker, "t", 0, 6)
    q.processAllAvailable()
    assert batch_sizes(q) == [3]  # 6 < 10 and the delay has not passed: no batch
    produce(broker, "t", 0, 4)
    q.processAllAvailable()
    q.stop()
    assert batch_sizes(q) == [3, 10]


def test_max_trigger_delay_lets_a_small_batch_through(spark, root, broker, tmp_path):
    broker.create_topic("t", partitions=1)
    produce(broker, "t", 0, 3)
    df = kop(
        spark,
        root,
        stream=True,
        subscribe="t",
        startingOffsets="earliest",
        minOffsetsPerTrigger="1000",
        maxTriggerDelay="0s",
    )
    q = start(df, tmp_path, sink="noop")
    q.processAllAvailable()
    produce(broker, "t", 0, 2, batch=2)  # one append: a trigger between two would rightly take 1 and 1
    q.processAllAvailable()
    q.stop()
    assert batch_sizes(q) == [3, 2]


def test_max_bytes_per_trigger(spark, root, broker, tmp_path):
    q = start_on_empty_topic(spark, root, broker, tmp_path, 1, maxBytesPerTrigger="10000")
    for _ in range(40):
        broker.produce("t", [Record(value=bytes(1000), timestamp_ms=now_ms())], partition=0)
    q.processAllAvailable()
    q.stop()
    sizes = batch_sizes(q)
    assert sum(sizes) == 40 and len(sizes) >= 4 and max(sizes) <= 10


@pytest.mark.admission_control
def test_available_now_stops_at_what_was_there(spark, root, broker, tmp_path):
    broker.create_topic("t", partitions=1)
    producer = subprocess.Popen(
        [PYTHON, "-m", "tests.writer_process", root, "w", "1000000", "50"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_subprocess_env(),
    )
    confirmed = []
    try:
        assert producer.stdout.readline().strip() == "ready"
        producer.stdin.write("go\n")
        producer.stdin.flush()
        for _ in range(50):  # let it get going before the query starts
            confirmed.append(producer.stdout.readline())
        drain = threading.Thread(target=lambda: confirmed.extend(producer.stdout), daemon=True)
        drain.start()
        before = broker.list_offsets("t", 0, "latest")
        df = kop(spark, root, stream=True, subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="500")
        q = start(df.select("offset"), tmp_path, query_name="avail", trigger={"availableNow": True})
        assert q.awaitTermination(240)
        end = end_offset(q.lastProgress)["t"]["0"]
        after = broker.list_offsets("t", 0, "latest")
    finally:
        producer.kill()
        producer.wait()
    assert before <= end < after  # the producer kept writing past the run's end
    got = sorted(r.offset for r in spark.table("avail").collect())
    assert got == list(range(end))


def test_new_topics_and_partitions_start_from_earliest(spark, root, broker, tmp_path):
    broker.create_topic("ev-a", partitions=1)
    produce(broker, "ev-a", 0, 2)
    df = kop(spark, root, stream=True, subscribePattern="ev-.*", startingOffsets="latest", maxOffsetsPerTrigger="4")
    q = start(df.select("topic", "partition", "offset"), tmp_path, query_name="grow")
    q.processAllAvailable()
    broker.create_topic("ev-b", partitions=1)
    produce(broker, "ev-b", 0, 3)
    broker.create_partitions("ev-a", 2)
    produce(broker, "ev-a", 1, 2)
    produce(broker, "ev-a", 0, 1, start=2)
    q.processAllAvailable()
    q.stop()
    assert sorted(tuple(r) for r in spark.table("grow").collect()) == [
        ("ev-a", 0, 2),
        ("ev-a", 1, 0),
        ("ev-a", 1, 1),
        ("ev-b", 0, 0),
        ("ev-b", 0, 1),
        ("ev-b", 0, 2),
    ]
    assert max(batch_sizes(q)) <= 4  # new partitions count against the limit from their earliest offset


def _trim_under_query(spark, root, tmp_path, fail_on_data_loss, name):
    """Offsets 10..29 are removed by retention before a running query gets to them. The query's
    next batch waits for 100 records (minOffsetsPerTrigger), so what it sees does not race the test."""
    old = now_ms() - 30 * 86_400_000
    keep_all = Broker(root, conf={"retention.ms": -1, "managedLedgerMaxEntriesPerLedger": 5})
    keep_all.create_topic("t", partitions=1)
    produce(keep_all, "t", 0, 10, ts=old)
    df = kop(
        spark,
        root,
        stream=True,
        subscribe="t",
        startingOffsets="earliest",
        failOnDataLoss=fail_on_data_loss,
        minOffsetsPerTrigger="100",
        maxTriggerDelay="1h",
    )
    q = start(df.select("offset"), tmp_path, query_name=name)
    q.processAllAvailable()
    produce(keep_all, "t", 0, 20, start=10, ts=old)
    produce(keep_all, "t", 0, 5, start=30)
    q.processAllAvailable()
    assert batch_sizes(q) == [10]
    with Broker(root) as b:  # default retention.ms: 7 days
        b.enforce_retention("t")
        assert b.list_offsets("t", 0, "earliest") == 30
    produce(keep_all, "t", 0, 100, start=35, batch=100)  # one append: the query sees all or none
    keep_all.close()
    return q


def test_retention_under_a_running_query_fails_it(spark, root, tmp_path):
    q = _trim_under_query(spark, root, tmp_path, "true", "trim_fail")
    with pytest.raises(StreamingQueryException, match=r"Cannot fetch offsets 10 to 29 of t-0.*failOnDataLoss"):
        q.processAllAvailable()
    q.stop()


def test_retention_under_a_running_query_is_skipped_when_asked(spark, root, tmp_path):
    q = _trim_under_query(spark, root, tmp_path, "false", "trim_skip")
    q.processAllAvailable()
    q.stop()
    assert sorted(r.offset for r in spark.table("trim_skip").collect()) == list(range(10)) + list(range(30, 135))


def test_records_deleted_under_a_running_query_are_data_loss_up_to_the_new_log_start(spark, root, broker, tmp_path):
    broker.create_topic("dr", partitions=1)
    produce(broker, "dr", 0, 10)
    df = kop(spark, root, stream=True, subscribe="dr", startingOffsets="earliest", failOnDataLoss="false")
    q = start(df.select("offset"), tmp_path, query_name="dr_skip")
    q.processAllAvailable()
    produce(broker, "dr", 0, 10, start=10, batch=10)
    assert broker.delete_records("dr", 0, 15) == 15  # inside the batch of 10 to 19
    produce(broker, "dr", 0, 5, start=20)
    q.processAllAvailable()
    q.stop()
    expected = list(range(10)) + list(range(15, 25))
    assert sorted(r.offset for r in spark.table("dr_skip").collect()) == expected
    assert offsets_of(kop(spark, root, subscribe="dr")) == [("dr", 0, o) for o in expected[10:]]  # from the start


def test_deleted_topic_is_data_loss(spark, root, broker, tmp_path):
    broker.create_topic("gone", partitions=1)
    broker.create_topic("stays", partitions=1)
    produce(broker, "gone", 0, 2)
    df = kop(spark, root, stream=True, subscribe="gone,stays", startingOffsets="earliest", failOnDataLoss="false")
    q = start(df.select("topic", "offset"), tmp_path, query_name="del")
    q.processAllAvailable()
    broker.delete_topic("gone")
    produce(broker, "stays", 0, 2)
    q.processAllAvailable()
    q.stop()
    assert sorted(tuple(r) for r in spark.table("del").collect()) == [
        ("gone", 0),
        ("gone", 1),
        ("stays", 0),
        ("stays", 1),
    ]

    broker.create_topic("gone2", partitions=1)
    produce(broker, "gone2", 0, 2)
    df = kop(spark, root, stream=True, subscribe="gone2", startingOffsets="earliest")
    q = start(df, tmp_path, name="ck2", sink="noop")
    q.processAllAvailable()
    broker.delete_topic("gone2")
    broker.create_topic("other", partitions=1)
    with pytest.raises(StreamingQueryException, match="gone2-0 are gone"):
        q.processAllAvailable()
    q.stop()


# -- consumer groups ------------------------------------------------------------------------------


def test_group_offsets_follow_the_query(spark, root, broker, tmp_path):
    broker.create_topic("t", partitions=2)
    produce(broker, "t", 0, 20)
    produce(broker, "t", 1, 7)
    df = kop(
        spark,
        root,
        stream=True,
        subscribe="t",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="5",
        **{"group.id": "etl"},
    )
    q = start(df, tmp_path, sink="noop")
    q.processAllAvailable()
    q.stop()
    assert {tp: o.offset for tp, o in broker.fetch_offsets("etl").items()} == {("t", 0): 20, ("t", 1): 7}


@pytest.mark.admission_control  # before 4.2, Spark's AvailableNow wrapper tells a source nothing after the last batch
def test_an_available_now_runs_last_batch_is_committed_to_the_group(spark, root, broker, tmp_path):
    """Though Spark's commit() never comes for it."""
    broker.create_topic("t", partitions=2)
    produce(broker, "t", 0, 23)
    produce(broker, "t", 1, 7)
    options = {"group.id": "etl", "maxOffsetsPerTrigger": "5"}
    df = kop(spark, root, stream=True, subscribe="t", startingOffsets="earliest", **options)
    q = start(df, tmp_path, sink="noop", trigger={"availableNow": True})
    assert q.awaitTermination(120)
    assert {tp: o.offset for tp, o in broker.fetch_offsets("etl").items()} == {("t", 0): 23, ("t", 1): 7}
    out = subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "--root", root, "groups", "describe", "--group", "etl"],
        capture_output=True,
        text=True,
        env=python_subprocess_env(),
        check=True,
    ).stdout
    lag_line = next(line.split() for line in out.splitlines() if line.split()[:3] == ["etl", "t", "0"])
    assert lag_line[3:6] == ["23", "23", "0"]  # CURRENT-OFFSET LOG-END-OFFSET LAG


def test_starting_offsets_group(spark, root, broker, tmp_path):
    broker.create_topic("t", partitions=2)
    produce(broker, "t", 0, 10)
    produce(broker, "t", 1, 4)
    broker.commit_offsets("resume", {("t", 0): 6})  # partition 1: none committed -> earliest
    df = kop(spark, root, stream=True, subscribe="t", startingOffsets="group", **{"kafka.group.id": "resume"})
    q = start(df.select("partition", "offset"), tmp_path, query_name="resumed")
    q.processAllAvailable()
    q.stop()
    assert sorted(tuple(r) for r in spark.table("resumed").collect()) == [(0, o) for o in range(6, 10)] + [
        (1, o) for o in range(4)
    ]
    assert {tp: o.offset for tp, o in broker.fetch_offsets("resume").items()} == {("t", 0): 10, ("t", 1): 4}


def test_an_installed_kop_spark_is_found_by_spark_from_anywhere(root, broker, tmp_path):
    """No register call, no PYTHONPATH, another working directory: what a user's job sees."""
    broker.create_topic("t", partitions=1)
    produce(broker, "t", 0, 4)
    env = {k: v for k, v in python_subprocess_env().items() if k != "PYTHONPATH"}
    script = (
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        f"print('rows', s.read.format('kop').option('kop.root', {root!r}).option('subscribe', 't').load().count())\n"
    )
    out = subprocess.run([PYTHON, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "rows 4" in out.stdout, out.stderr[-2000:]


def test_a_sink_keeps_none_of_what_it_uploads_unless_told(tmp_path):
    """A sink's tasks and commits never read back the ledgers they upload: kept in each Python
    worker (``managedLedgerCacheSizeMB``), they would only take its memory."""
    root = str(tmp_path)
    assert SinkOptions.parse({"kop.root": root, "topic": "t"}).conf["managedLedgerCacheSizeMB"] == "0"
    told = SinkOptions.parse({"kop.root": root, "topic": "t", "kop.managedLedgerCacheSizeMB": "8"})
    assert told.conf["managedLedgerCacheSizeMB"] == "8"


def test_kafka_client_options_and_a_missing_root_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"'kafka\.bootstrap\.servers'.*kop\.root"):
        SourceOptions.parse(
            {"kop.root": str(tmp_path), "subscribe": "t", "kafka.bootstrap.servers": "h:9092"}, streaming=True
        )
    with pytest.raises(ConfigError, match=r"'kafka\.security\.protocol'"):
        SinkOptions.parse({"kop.root": str(tmp_path), "topic": "t", "kafka.security.protocol": "SSL"})
    SourceOptions.parse({"kop.root": str(tmp_path), "subscribe": "t", "kafka.group.id": "g"}, streaming=False)
    missing = str(tmp_path / "nowhere")
    # a store setting without its kop. prefix would be ignored, and the default store used
    for name, meant in (("root", "kop.root"), ("storageRoot", "kop.root"), ("journalsyncdata", "kop.journalSyncData")):
        with pytest.raises(ConfigError, match=f"option '{name.lower()}' is not an option.*'{meant}'"):
            SourceOptions.parse({name: missing, "subscribe": "t"}, streaming=False)
        with pytest.raises(ConfigError, match=f"'{meant}'"):
            SinkOptions.parse({name: missing, "topic": "t"})
    SinkOptions.parse({"kop.root": str(tmp_path), "topic": "t", "compression.type": "zstd"})  # the sink's own
    reader = KopBatchReader(SourceOptions.parse({"kop.root": missing, "subscribe": "t"}, streaming=False))
    with pytest.raises(ConfigError, match=f"the store {missing} does not exist"):
        reader.partitions()
