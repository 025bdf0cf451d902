"""kop through Spark Connect, as Databricks serverless and shared clusters run notebooks: a real
Spark Connect server (PySpark's own, a subprocess on a free loopback port, its Python workers
importing kop_spark), and a client session that only speaks gRPC to it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyspark
import pytest

import kop_spark
from kop_spark import Record

from .conftest import PYTHON, forget_last_batch_commit, python_subprocess_env
from .servers import spark_connect

pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark's connect extra (./dev.sh setup)")


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory) -> Iterator[str]:
    env = {**python_subprocess_env(), "PYSPARK_PYTHON": PYTHON}
    server = spark_connect(tmp_path_factory.mktemp("connect"), os.path.dirname(pyspark.__file__), env)
    server.start(timeout=120)
    try:
        yield f"sc://127.0.0.1:{server.port}"
    finally:
        server.stop(graceful=True)


@pytest.fixture(scope="module")
def remote(connect_url):
    # The Connect session's own builder: PySpark 4.0's general one refuses a remote session in a
    # process that runs a classic one (the other tests' ``spark``).
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url).getOrCreate()
    kop_spark.register(session)
    yield session
    session.stop()


def test_batch_read_and_write_through_spark_connect(remote, root, broker):
    broker.create_topic("in", 2)
    broker.create_topic("out", 2)
    broker.produce("in", [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(20)])
    df = remote.read.format("kop").option("kop.root", root).option("subscribe", "in").load()
    assert sorted(r.value for r in df.select("value").collect()) == sorted(b"v%d" % i for i in range(20))
    df.select("key", "value").write.format("kop").option("kop.root", root).option("topic", "out").mode("append").save()
    out = [r.value for p in range(2) for r in broker.fetch("out", p, 0, max_records=100)]
    assert sorted(out) == sorted(b"v%d" % i for i in range(20))


def test_exactly_once_stream_through_spark_connect_with_a_restart(remote, root, broker, tmp_path):
    broker.create_topic("in", 2)
    broker.create_topic("out", 1)
    broker.produce("in", [Record(value=b"a%d" % i) for i in range(30)])

    def run() -> None:
        q = (
            remote.readStream.format("kop")
            .option("kop.root", root)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10")
            .option("group.id", "connect-etl")
            .load()
            .select("value")
            .writeStream.format("kop")
            .option("kop.root", root)
            .option("topic", "out")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        q.processAllAvailable()
        q.stop()

    run()
    broker.produce("in", [Record(value=b"b%d" % i) for i in range(5)])
    forget_last_batch_commit(str(tmp_path / "ck"))
    run()
    out = sorted(r.value for r in broker.fetch("out", 0, 0, max_records=100))
    assert out == sorted([b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(5)])
    assert sum(o.offset for o in broker.fetch_offsets("connect-etl").values()) == 35
