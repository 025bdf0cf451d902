"""One store, three ways in: what Kafka clients produce through ``kop serve``, ``format("kop")``
reads at the same offsets; what a Spark query writes, a Kafka consumer reads; and a Spark query's
group and a Kafka consumer's group are listed side by side, over the wire and by ``kop groups``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kop_spark import Broker

from .conftest import PYTHON, python_subprocess_env
from .kop_server import KopServer


@pytest.fixture
def server(tmp_path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("in", 2)
        b.create_topic("out", 1)
    with KopServer(root) as s:
        yield s


def test_kafka_clients_and_spark_share_topics_offsets_and_groups(spark, server: KopServer, tmp_path) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    acked: list[tuple[int, int, bytes]] = []
    for i in range(100):
        producer.produce(
            "in",
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            on_delivery=lambda e, m: acked.append((m.partition(), m.offset(), m.value())),
        )
    assert producer.flush(30) == 0

    def source(**options: str):
        reader = spark.readStream if options.pop("stream", "") else spark.read
        return reader.format("kop").option("kop.root", server.root).option("subscribe", "in").options(**options).load()

    read = source().select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in read) == sorted(acked)

    query = (
        source(stream="yes", startingOffsets="earliest", **{"group.id": "spark-etl"})
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("kop")
        .option("kop.root", server.root)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "kafka-app", "enable.auto.commit": False})
    consumer.assign([TopicPartition("out", 0, 0)])
    got = []
    while len(got) < 100:
        m = consumer.poll(10)
        assert m is not None and m.error() is None, m and m.error()
        got.append(m.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted(v.upper() for _, _, v in acked)

    admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept: the future needs its client
    listed = admin.list_consumer_groups().result(30)
    assert {"spark-etl", "kafka-app"} <= {g.group_id for g in listed.valid}
    out = subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "--root", server.root, "groups", "list"],
        capture_output=True,
        text=True,
        env=python_subprocess_env(),
        check=True,
    ).stdout.split()
    assert {"spark-etl", "kafka-app"} <= set(out)
