"""``kop serve``'s metrics (``webServicePort``): what real clients produce and consume, each
request's latency and whether it failed, and the connections open, scraped over HTTP on loopback
and read back with Prometheus's own parser."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from kop_spark import Broker
from kop_spark.config import Config
from kop_spark.errors import ConfigError, MetadataStoreUnavailableError
from kop_spark.kafka.metrics import MetricsEndpoint, ServerMetrics

from .kop_server import KopServer

RECORDS = 300
_METRICS_AT = re.compile(r"metrics at (http://[\d.]+:\d+)/metrics")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 2)
    with KopServer(root, ["webServicePort=0", "allowAutoTopicCreation=false"]) as s:
        yield s


def _base(server: KopServer) -> str:
    found = _METRICS_AT.search("".join(server.log))
    assert found, "kop serve did not say where its metrics are"
    return found[1]


def _scrape(server: KopServer) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Each sample's value, by sample name and labels."""
    with urllib.request.urlopen(f"{_base(server)}/metrics", timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def _per_partition(samples: dict, name: str) -> dict[int, float]:
    return {int(dict(labels)["partition"]): v for labels, v in samples.get(name, {}).items()}


def test_what_clients_produce_and_consume_is_counted_per_partition(server: KopServer) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(RECORDS):
        producer.produce("t", key=f"k{i}".encode(), value=b"v" * (i % 50))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("t", p, 0) for p in range(2)])
    got = 0
    deadline = time.monotonic() + 30
    while got < RECORDS:
        assert time.monotonic() < deadline, f"consumed {got} of {RECORDS}"
        m = consumer.poll(0.5)
        got += m is not None and m.error() is None
    samples = _scrape(server)
    with Broker(server.root) as b:
        ends = {p: b.list_offsets("t", p, "latest") for p in range(2)}
    assert _per_partition(samples, "kop_server_MESSAGE_IN_total") == ends
    assert _per_partition(samples, "kop_server_MESSAGE_OUT_total") == ends  # each record read once
    bytes_in = _per_partition(samples, "kop_server_BYTES_IN_total")
    assert _per_partition(samples, "kop_server_BYTES_OUT_total") == bytes_in  # the batches as they came
    assert all(v > 0 for v in bytes_in.values())
    latency = samples["kop_server_REQUEST_LATENCY_count"]
    assert latency[(("request", "Produce"), ("success", "true"))] >= 1
    assert latency[(("request", "Fetch"), ("success", "true"))] >= 1
    assert samples["kop_server_REQUEST_LATENCY_sum"][(("request", "Produce"), ("success", "true"))] > 0
    assert samples["kop_server_ALIVE_CHANNEL_COUNT"][()] >= 2  # the producer's and the consumer's
    consumer.close()
    del producer
    deadline = time.monotonic() + 30
    while _scrape(server)["kop_server_ALIVE_CHANNEL_COUNT"][()] != 0:  # the clients' connections close
        assert time.monotonic() < deadline, "connections still counted after the clients closed"
        time.sleep(0.1)


def test_offsets_and_consumer_lag_under_kafka_exporters_names(server: KopServer) -> None:
    """What kafka_exporter reports, for dashboards built on it: each partition's end and start,
    and each group's committed offsets, lag and members, a Spark query's commits included."""
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for p, n in ((0, 10), (1, 4)):
        for _ in range(n):
            producer.produce("t", value=b"v", partition=p)
    assert producer.flush(30) == 0
    with Broker(server.root) as b:
        b.commit_offsets("spark-query", {("t", 0): 4})  # as a query's group.id commits
        b.delete_records("t", 1, 1)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False})
    consumer.subscribe(["t"])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer never joined"
        consumer.poll(0.2)
    consumer.commit(offsets=[TopicPartition("t", 0, 7), TopicPartition("t", 1, 2)], asynchronous=False)
    samples = _scrape(server)
    consumer.close()
    assert _per_partition(samples, "kafka_topic_partition_current_offset") == {0: 10, 1: 4}
    assert _per_partition(samples, "kafka_topic_partition_oldest_offset") == {0: 0, 1: 1}

    def by_group(name: str) -> dict[tuple[str, ...], float]:  # (group, partition, topic) by their labels' names
        return {tuple(v for _, v in labels): value for labels, value in samples[name].items()}

    committed = {("g", "0", "t"): 7, ("g", "1", "t"): 2, ("spark-query", "0", "t"): 4}
    assert by_group("kafka_consumergroup_current_offset") == committed
    assert by_group("kafka_consumergroup_lag") == {("g", "0", "t"): 3, ("g", "1", "t"): 2, ("spark-query", "0", "t"): 6}
    assert by_group("kafka_consumergroup_lag_sum") == {("g", "t"): 5, ("spark-query", "t"): 6}
    assert by_group("kafka_consumergroup_members") == {("g",): 1, ("spark-query",): 0}


def test_a_deleted_topics_counts_go_with_it_whoever_deleted_it(server: KopServer) -> None:
    """As Kafka drops a deleted topic's metrics: deleted through the server, or by another
    process (seen at the next scrape), a topic's series are served no more; the others stay."""
    with Broker(server.root) as b:
        for topic in ("here", "elsewhere"):
            b.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    for topic in ("t", "here", "elsewhere"):
        producer.produce(topic, value=b"v", partition=0)
    assert producer.flush(30) == 0

    def counted() -> set[str]:
        return {dict(labels)["topic"] for labels in _scrape(server).get("kop_server_MESSAGE_IN_total", {})}

    assert counted() == {"t", "here", "elsewhere"}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.delete_topics(["here"])["here"].result(30)
    assert counted() == {"t", "elsewhere"}
    with Broker(server.root) as b:
        b.delete_topic("elsewhere")
    assert counted() == {"t"}


def test_a_store_that_cannot_be_read_leaves_the_servers_own_metrics_answered() -> None:
    async def unreadable() -> str:
        raise MetadataStoreUnavailableError("etcd at 127.0.0.1:1 did not answer")

    async def scrape() -> str:
        metrics = ServerMetrics()
        metrics.request("Produce", 1.5, True)
        endpoint = MetricsEndpoint(metrics, lambda: {"kop_server_ALIVE_CHANNEL_COUNT": 1}, unreadable)
        host, port = await endpoint.start("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30).read().decode()
            )
        finally:
            await endpoint.stop()

    text = asyncio.run(scrape())
    assert "kop_server_ALIVE_CHANNEL_COUNT 1" in text and 'request="Produce"' in text
    assert "kafka_consumergroup_lag" not in text


def test_a_fetch_waiting_for_records_shows_as_a_request_under_way(server: KopServer) -> None:
    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "g", "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1}
    )
    consumer.assign([TopicPartition("t", 0, 0)])  # an empty partition: each fetch waits its 5 s
    deadline = time.monotonic() + 30
    while True:
        consumer.poll(0.1)
        samples = _scrape(server)
        if samples["kop_server_REQUEST_QUEUE_SIZE"][()] >= 1 and samples["kop_server_ACTIVE_CHANNEL_COUNT"][()] >= 1:
            break
        assert time.monotonic() < deadline, f"no request under way seen: {samples}"
    consumer.close()


def test_a_request_answered_with_an_error_counts_as_failed(server: KopServer) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 3000})
    errors: list[object] = []
    producer.produce("missing", b"x", partition=0, on_delivery=lambda err, _: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    failed = _scrape(server)["kop_server_REQUEST_LATENCY_count"]
    assert failed[(("request", "Metadata"), ("success", "false"))] >= 1  # UNKNOWN_TOPIC_OR_PARTITION


def test_the_endpoint_serves_get_metrics_only_and_survives_bad_requests(server: KopServer) -> None:
    base = _base(server)
    assert base.startswith("http://127.0.0.1:")  # loopback unless bindAddress says otherwise
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/other", timeout=30)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as posted:
        urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", data=b"x", method="POST"), timeout=30)
    assert posted.value.code == 405
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\xff" * 20_000)  # no end of headers within the limit: dropped
        assert sock.recv(100) == b""
    assert "kop_server_REQUEST_QUEUE_SIZE" in _scrape(server)  # still serving


def test_a_port_that_is_not_one_is_refused_by_name() -> None:
    for bad in ("http", "70000", "-1"):
        with pytest.raises(ConfigError, match="webServicePort"):
            Config({"webServicePort": bad})
    assert Config({})["webServicePort"] is None  # no endpoint unless asked for
