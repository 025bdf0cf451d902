"""Spark on a store whose metadata is in ZooKeeper or etcd (Pulsar's metadata services): a stream
learns of what other processes append by the service's watches, where a look at unchanged keys
asks nothing, and its sink lands every record once."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from kop_spark import Broker
from kop_spark.spark._compat import ReadAllAvailable
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions

from . import servers
from .conftest import PYTHON, python_subprocess_env


@pytest.fixture(params=["zookeeper", "etcd"])
def service(request: pytest.FixtureRequest, running: dict[str, servers.Server]) -> tuple[str, servers.Server]:
    return request.param, running[request.param]


@pytest.fixture
def metadata_url(service: tuple[str, servers.Server]) -> str:
    (name, server), space = service, f"spark{uuid.uuid4().hex[:10]}"
    if name == "zookeeper":
        return f"zk:127.0.0.1:{server.port}/{space}"
    return f"etcd:http://127.0.0.1:{server.port}/{space}"


def _requests(service: tuple[str, servers.Server]) -> int:
    name, server = service
    return servers.zookeeper_packets(server.port)[0] if name == "zookeeper" else servers.etcd_requests(server.port)


def test_an_idle_stream_asks_nothing_and_its_next_look_sees_an_append_when_told(
    service: tuple[str, servers.Server], metadata_url: str, tmp_path: Path
) -> None:
    """Spark asks an idle stream for its latest offsets every 10 ms: each look asked the service
    about every partition and read the topic (etcd: 138 requests a second)."""
    root = str(tmp_path / "store")
    Broker(root, {"metadataStoreUrl": metadata_url}).create_topic("in", 4)
    options = {"kop.root": root, "kop.metadataStoreUrl": metadata_url, "subscribe": "in", "startingOffsets": "earliest"}
    stream = KopMicroBatchStream(SourceOptions.parse(options, streaming=True))
    start, limit = stream.initialOffset(), ReadAllAvailable()
    deadline = time.monotonic() + 10
    while True:  # until the looks are watched (etcd's watch stands a moment after the first)
        asked = _requests(service)
        looks = [stream.latestOffset(start, limit) for _ in range(20)]
        asked = _requests(service) - asked
        if asked <= 3 or time.monotonic() > deadline:  # ZooKeeper counts the session's pings too
            break
    assert asked <= 3 and looks == [start] * 20, f"20 looks at an idle stream asked the service {asked} times"
    _produce_elsewhere(root, metadata_url, ["x"])
    told = time.monotonic()
    while (latest := stream.latestOffset(start, limit)) == start and time.monotonic() - told < 10:
        time.sleep(0.01)
    waited = time.monotonic() - told
    stream.stop()
    assert sorted(latest["in"].values()) == [0, 0, 0, 1]
    # Well within the 5 s a kept view stands at most on ZooKeeper and etcd (PROBED_MAX_AGE_S),
    # which a look that missed the change would wait out.
    assert waited < 3, f"the append was seen only after {waited:.1f} s"


def _produce_elsewhere(root: str, metadata_url: str, values: list[str]) -> None:
    """``kop produce`` in a process of its own, as an application beside the Spark job would."""
    subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "--root", root, f"--conf=metadataStoreUrl={metadata_url}", "produce", "in"],
        input="".join(f"{v}\n" for v in values),
        text=True,
        env=python_subprocess_env(),
        check=True,
        timeout=120,
    )


def test_a_stream_sees_other_processes_appends_and_writes_them_once(spark, metadata_url: str, tmp_path: Path) -> None:
    root, conf = str(tmp_path / "store"), {"metadataStoreUrl": metadata_url}
    with Broker(root, conf) as b:
        b.create_topic("in", 2)
        b.create_topic("out", 2)
    query = (
        spark.readStream.format("kop")
        .option("kop.root", root)
        .option("kop.metadataStoreUrl", metadata_url)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("kop")
        .option("kop.root", root)
        .option("kop.metadataStoreUrl", metadata_url)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    written: list[str] = []
    try:
        for round_ in range(3):
            values = [f"r{round_}-{i}" for i in range(20)]
            _produce_elsewhere(root, metadata_url, values)
            written += values
            # The append is told to the stream's processes as the service applies it: a trigger
            # may look just before. A watch that missed it would leave the stream here for good.
            deadline = time.monotonic() + 60
            while sorted(_values(root, conf, "out")) != sorted(written):
                assert time.monotonic() < deadline, f"the stream did not see round {round_}'s appends"
                query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(_values(root, conf, "out")) == sorted(written)


def _values(root: str, conf: dict[str, str], topic: str) -> list[str]:
    with Broker(root, conf) as b:
        return [
            (r.value or b"").decode()
            for p in range(b.partitions_for(topic))
            for r in b.fetch(topic, p, 0, max_records=100_000)
        ]
