"""kop through Spark Connect, as Databricks serverless and shared clusters run notebooks: a real
Spark Connect server (PySpark's own, a subprocess on a free loopback port, its Python workers
importing kop_spark), and a client session that only speaks gRPC to it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import IO

import pyspark
import pytest

import kop_spark
from kop_spark import Record

from .conftest import PYTHON, forget_last_batch_commit, python_subprocess_env

pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark's connect extra (./dev.sh setup)")
SPARK_HOME = os.path.dirname(pyspark.__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory) -> Iterator[str]:
    port = _free_port()
    env = {**python_subprocess_env(), "SPARK_HOME": SPARK_HOME, "PYSPARK_PYTHON": PYTHON}
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    submit = [os.path.join(SPARK_HOME, "bin", "spark-submit"), "--master", "local[2]"]
    submit += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    submit += [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")] + ["spark-internal"]
    with open(tmp_path_factory.mktemp("connect") / "server.log", "w+") as log:
        server = subprocess.Popen(submit, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _await_port(port, server, log)
            yield f"sc://127.0.0.1:{port}"
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _await_port(port: int, server: subprocess.Popen, log: IO[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"the Spark Connect server did not listen on port {port}:\n{log.read()[-4000:]}")
            time.sleep(0.2)  # polling a port that is not open yet: nothing to wait on instead


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
