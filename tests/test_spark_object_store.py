"""Spark on an object-store root (S3 on moto's server, metadata in the bucket): reads equal the
Broker's records, the exactly-once sink survives driver kill -9, and executors in their own
processes (local-cluster) need no disk shared with the driver. Reads and writes on GCS too."""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from kop_spark import Broker, Record
from kop_spark.clock import ManualClock
from kop_spark.errors import StorageError
from kop_spark.spark._compat import ReadAllAvailable
from kop_spark.spark.batch_reader import KopBatchReader
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions
from kop_spark.spark.sink import KopBatchWriter, prepare
from kop_spark.storage.object_fileio import ObjectFileIO

from . import servers
from .conftest import PYTHON, python_subprocess_env
from .in_flight_proxy import InFlightProxy
from .test_spark_sink import exactly_once_through_driver_kills


@pytest.fixture
def s3_root(running: dict[str, servers.Server]) -> str:
    return f"s3://{servers.BUCKET}/spark-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["s3", "gs"])
def cloud_root(request: pytest.FixtureRequest, running: dict[str, servers.Server]) -> str:
    return f"{request.param}://{servers.BUCKET}/spark-{uuid.uuid4().hex[:10]}"


_KEY_VALUE = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _rows(n: int) -> pa.RecordBatch:
    keys = [b"k%d" % i for i in range(n)]
    return pa.RecordBatch.from_pydict(
        {"key": keys, "value": keys}, pa.schema([("key", pa.binary()), ("value", pa.binary())])
    )


def _all(b: Broker, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    for p in range(b.partitions_for(topic)):
        out += [(p, r.offset, r.key, r.value) for r in b.fetch(topic, p, 0, max_records=100_000)]
    return sorted(out)


def test_batch_and_streaming_reads_equal_the_brokers_records(spark, cloud_root: str, tmp_path: Path) -> None:
    with Broker(cloud_root, {"managedLedgerMaxEntriesPerLedger": 4}) as b:
        b.create_topic("t", 2)
        for i in range(25):
            b.produce("t", [Record(key=f"k{j}".encode(), value=f"v{i}-{j}".encode()) for j in range(i % 4 + 1)])
        expected = _all(b, "t")
    batch = spark.read.format("kop").option("kop.root", cloud_root).option("subscribe", "t").load()
    assert sorted((r.partition, r.offset, r.key, r.value) for r in batch.collect()) == expected
    query = (
        spark.readStream.format("kop")
        .option("kop.root", cloud_root)
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .load()
        .writeStream.format("memory")
        .queryName(f"stream_{cloud_root[:2]}")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    streamed = spark.sql(f"select partition, offset, key, value from stream_{cloud_root[:2]}").collect()
    assert sorted((r.partition, r.offset, r.key, r.value) for r in streamed) == expected


def test_batch_write_lands_once_with_continuous_offsets(spark, cloud_root: str) -> None:
    Broker(cloud_root).create_topic("out", 2)
    df = spark.range(500).selectExpr("cast(id % 11 as string) as key", "cast(id as string) as value")
    df.write.format("kop").mode("append").option("kop.root", cloud_root).option("topic", "out").save()
    got = _all(Broker(cloud_root), "out")
    assert sorted(int(v) for _, _, _, v in got) == list(range(500))
    for p in (0, 1):
        offsets = [o for q, o, _, _ in got if q == p]
        assert offsets == list(range(len(offsets)))


def test_a_large_task_output_is_written_as_several_ledgers(spark, s3_root: str) -> None:
    Broker(s3_root).create_topic("big", 1)
    df = spark.range(0, 3_000, numPartitions=1).selectExpr("cast(id as string) as key", "repeat('x', 1000) as value")
    options = {"kop.root": s3_root, "topic": "big", "kop.wholeLedgerMaxSizeMbytes": "1"}
    df.write.format("kop").mode("append").options(**options).save()
    b = Broker(s3_root)
    assert len(b.view("big", 0).ledgers) >= 2, "rolled at 1 MiB instead of holding the task's output whole"
    assert [int(r.key) for r in b.fetch("big", 0, 0, max_records=10_000, max_bytes=1 << 30)] == list(range(3_000))


@pytest.mark.parametrize("partitions", [1, 12])
def test_a_task_opens_its_ledgers_ahead_and_reads_what_it_would_in_turn(
    running: dict[str, servers.Server], s3_root: str, partitions: int
) -> None:
    """Each ledger on an object store is a round trip away, and a stream's tasks read the newest,
    smallest ones: those planned for a task, one partition's or several's (``maxPartitions``),
    are opened several at once ahead of their turn."""
    with Broker(s3_root, {"managedLedgerMergeInPassing": 0}) as b:
        b.create_topic("t", partitions)
        for i in range(24 // partitions):
            for p in range(partitions):
                b.produce("t", [Record(key=f"k{i}".encode(), value=bytes(i * 50 + 1))], partition=p)
        expected = _all(b, "t")
    with InFlightProxy(running["s3"].port, gather=4) as proxy:
        options = {"kop.root": s3_root, "subscribe": "t", "maxPartitions": "1", "kop.aws_endpoint_url": proxy.url}
        reader = KopBatchReader(SourceOptions.parse(options, streaming=False))
        (task,) = reader.partitions()
        proxy.most_in_flight = 0
        got = [row for batch in reader.read(task) for row in batch.to_pylist()]
        assert proxy.most_in_flight >= 4, "the task's ledgers were read in turn"
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in got) == expected


def test_a_task_reads_its_topic_once_and_writes_its_partitions_ledgers_at_once(
    running: dict[str, servers.Server], s3_root: str
) -> None:
    """On an object store each request is a round trip: a task writing to many partitions read its
    topic's metadata for each, and wrote each partition's ledger and its marker in turn."""
    Broker(s3_root).create_topic("t", 12)
    moto, rows = running["s3"], _rows(240)
    with InFlightProxy(moto.port, gather=4) as proxy:
        writer = KopBatchWriter(
            prepare({"kop.root": s3_root, "topic": "t", "kop.aws_endpoint_url": proxy.url}, _KEY_VALUE)
        )
        since, proxy.most_in_flight = len(moto.log.read_text()), 0
        message = writer.write(iter([rows]))
        assert proxy.most_in_flight >= 4, "the task's ledgers were written in turn"
        assert len(servers.requests_since(moto, since, "/public/default/t.json")) == 1
        writer.commit([message])
    got = _all(Broker(s3_root), "t")
    assert sorted(v for _, _, _, v in got) == sorted(rows.column("value").to_pylist())
    offsets = [[o for q, o, _, _ in got if q == p] for p in range(12)]
    assert all(o and o == list(range(len(o))) for o in offsets), offsets


@pytest.mark.parametrize("fault", ["KeyboardInterrupt before", "KeyboardInterrupt after", "StorageError after"])
@pytest.mark.parametrize("at", [1, 8, 24])
def test_a_task_whose_ledger_writes_fail_at_once_leaves_nothing_behind(
    s3_root: str, monkeypatch: pytest.MonkeyPatch, fault: str, at: int
) -> None:
    """The partitions' ledgers are written together: one that fails, or Ctrl-C, while others are
    still being written must leave none of them, nor their markers."""
    Broker(s3_root).create_topic("t", 12)
    uploads, upload = itertools.count(1), ObjectFileIO.write_whole

    def failing(fileio: ObjectFileIO, path: str, data: bytes) -> None:
        if next(uploads) != at:
            return upload(fileio, path, data)
        if fault.endswith("after"):
            upload(fileio, path, data)
        raise KeyboardInterrupt if fault.startswith("Keyboard") else StorageError(f"injected at {path}")

    monkeypatch.setattr(ObjectFileIO, "write_whole", failing)
    writer = KopBatchWriter(prepare({"kop.root": s3_root, "topic": "t"}, _KEY_VALUE))
    with pytest.raises(KeyboardInterrupt if fault.startswith("Keyboard") else StorageError):
        writer.write(iter([_rows(240)]))
    monkeypatch.undo()
    with Broker(s3_root) as b:
        assert [f for f, _ in b.fileio.walk_files("") if "/_metadata/" not in f"/{f}"] == []
        assert _all(b, "t") == []


@pytest.mark.slow
def test_exactly_once_through_driver_kills_on_s3(s3_root: str, tmp_path: Path) -> None:
    exactly_once_through_driver_kills(s3_root, tmp_path, kills=4)


def test_executors_in_their_own_processes_need_no_shared_disk(s3_root: str) -> None:
    Broker(s3_root).create_topic("t", 2)
    out = subprocess.run(
        [PYTHON, "-m", "tests.spark_cluster_process", s3_root, "300"],
        env=python_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == list(range(300))


@pytest.mark.parametrize("where", ["s3", "local", "s3, minFetchPeriod 0"])
def test_an_idle_stream_looks_at_a_store_billed_by_the_request_once_a_min_fetch_period(
    running: dict[str, servers.Server], tmp_path: Path, where: str
) -> None:
    """Spark asks an idle stream for its latest offsets every 10 ms (pollingDelay). On an object
    store each look listed the partitions and read the topic: some 60 billed requests a second."""
    moto, space = running["s3"], f"s{uuid.uuid4().hex[:12]}"
    root = str(tmp_path / space) if where == "local" else f"s3://{servers.BUCKET}/{space}"
    Broker(root).create_topic("t", 2)
    options = {"kop.root": root, "subscribe": "t", "startingOffsets": "earliest"}
    if where.endswith("0"):
        options["minFetchPeriod"] = "0"
    clock = ManualClock()
    stream = KopMicroBatchStream(SourceOptions.parse(options, streaming=True), clock=clock)
    start, limit = stream.initialOffset(), ReadAllAvailable()
    since = len(moto.log.read_text())
    assert [stream.latestOffset(start, limit) for _ in range(20)] == [start] * 20
    listings = [r for r in servers.requests_since(moto, since, space) if "list-type=2" in r]
    assert len(listings) == (20 if where.endswith("0") else 1 if where == "s3" else 0)
    Broker(root).produce("t", [Record(b"x")], partition=1)
    waiting = where == "s3"
    clock.advance(399)
    assert stream.latestOffset(start, limit) == (start if waiting else {"t": {"0": 0, "1": 1}})
    clock.advance(1)
    assert (end := stream.latestOffset(start, limit)) == {"t": {"0": 0, "1": 1}}
    Broker(root).produce("t", [Record(b"y")], partition=0)
    assert stream.latestOffset(end, limit) == {"t": {"0": 1, "1": 1}}, "a batch's first look waits for nothing"
    stream.stop()
