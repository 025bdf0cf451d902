"""Differential tests: the same client session against ``kop serve`` and against librdkafka's
mock cluster (``test.mock.num.brokers=1``, a reference broker that lives in the client), and the
same answers from both, for the APIs the mock implements: Produce, Fetch, ListOffsets, Metadata,
FindCoordinator, OffsetCommit/OffsetFetch, InitProducerId, both group protocols (classic and
KIP-848's consumer protocol) and share groups (KIP-932).

The mock creates a topic on first use with 4 partitions; kop is given the same topic. The mock
answers a ListOffsets by timestamp with -1 whatever the log holds, so offsets by time are tested
against Kafka's rules in test_kafka_clients instead."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition

from kop_spark import Broker

from .group_clients import assigned, poll_until
from .kop_server import KopServer
from .mock_cluster import mock_logger

T0 = int(time.time()) * 1000  # now: within the broker's bounds (message.timestamp.after.max.ms) and retention
PARTITIONS = 4  # what the mock cluster gives a topic it creates


@pytest.fixture
def mock_cluster() -> Iterator[str]:
    logger, found = mock_logger(f"rdkafka-mock-{uuid.uuid4().hex}")
    owner = Producer({"test.mock.num.brokers": 1, "logger": logger})  # the cluster lives as long as it
    while not found.address:
        owner.poll(0.1)
    yield found.address
    del owner


@pytest.fixture
def kop(tmp_path) -> Iterator[str]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("d", PARTITIONS)
    with KopServer(root) as server:
        yield server.bootstrap


def session(bootstrap: str) -> dict[str, Any]:
    """One client session: what a user of these clients would see, broker-independent."""
    seen: dict[str, Any] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2})
    acked: list[tuple[int, int]] = []
    for i in range(60):
        producer.produce(
            "d",
            key=f"k{i % 9}".encode(),
            value=f"v{i}".encode() if i % 11 else None,
            headers=[("h", str(i).encode()), ("n", None)],
            timestamp=T0 + i,
            # Not the report's timestamp: the mock answers every produce with a LogAppendTime of 1234,
            # where Kafka (and kop) say -1 for a CreateTime topic.
            on_delivery=lambda e, m: acked.append((m.partition(), m.offset())),
        )
    assert producer.flush(30) == 0
    seen["acks"] = sorted(acked)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    tps = [TopicPartition("d", p) for p in range(PARTITIONS)]
    seen["watermarks"] = [reader.get_watermark_offsets(tp, timeout=30) for tp in tps]
    reader.assign([TopicPartition("d", p, 0) for p in range(PARTITIONS)])
    records = []
    while len(records) < len(acked):
        m = reader.poll(10)
        assert m is not None and m.error() is None, m and m.error()
        records.append((m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
    seen["records"] = sorted(records)
    reader.commit(
        offsets=[TopicPartition("d", p, p + 1, metadata=f"m{p}") for p in range(PARTITIONS)], asynchronous=False
    )
    seen["committed"] = [(tp.partition, tp.offset, tp.metadata) for tp in reader.committed(tps, timeout=30)]
    reader.close()
    strict = Consumer({"bootstrap.servers": bootstrap, "group.id": "s", "auto.offset.reset": "error"})
    strict.assign([TopicPartition("d", 0, 10_000)])
    m = strict.poll(10)
    seen["out_of_range"] = m.error().code() if m is not None and m.error() else None
    strict.close()
    return seen


def test_a_client_session_sees_what_the_mock_cluster_shows(mock_cluster: str, kop: str) -> None:
    ours, reference = session(kop), session(mock_cluster)
    assert ours.keys() == reference.keys()
    for aspect in reference:
        assert ours[aspect] == reference[aspect], aspect


def rebalance(bootstrap: str) -> list[list[int]]:
    """Two members of one group subscribe: how the partitions are split once both have some."""
    members = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": "r", "session.timeout.ms": 6000}) for _ in range(2)
    ]
    for m in members:
        m.subscribe(["d"])
    while True:
        for m in members:
            m.poll(0.1)
        split = [sorted(tp.partition for tp in m.assignment()) for m in members]
        if all(split) and sum(len(s) for s in split) == PARTITIONS:
            break
    for m in members:
        m.close()
    return sorted(split)


def test_two_members_split_the_partitions_as_on_the_mock_cluster(mock_cluster: str, kop: str) -> None:
    Producer({"bootstrap.servers": mock_cluster}).list_topics("d", timeout=30)  # the mock creates it
    assert rebalance(kop) == rebalance(mock_cluster)


def consumer_protocol_session(bootstrap: str) -> dict[str, Any]:
    """A consumer-protocol session, broker-independent: what two members own, read and commit."""
    seen: dict[str, Any] = {}
    conf = {"group.id": "s", "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    one, two = members = [Consumer({"bootstrap.servers": bootstrap, **conf}) for _ in range(2)]
    try:
        for c in members:
            c.subscribe(["d"])
        poll_until(members, lambda _: assigned(one) and assigned(two) and len(assigned(one) | assigned(two)) == 4)
        seen["shares"] = sorted(len(assigned(c)) for c in members)
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(40):
            p.produce("d", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 4)
        assert p.flush(30) == 0
        got = poll_until(members, lambda got: len(got) == 40)
        seen["records"] = sorted((p, o) for _, p, o in got)
        for c in members:
            c.commit(asynchronous=False)
        tps = [TopicPartition("d", p) for p in range(4)]
        seen["committed"] = sorted((tp.partition, tp.offset) for tp in one.committed(tps, timeout=30))
    finally:  # while the broker is up: librdkafka destroying an open member whose broker is gone spins
        for c in members:
            c.close()
    return seen


def test_a_consumer_protocol_session_sees_what_the_mock_cluster_shows(mock_cluster: str, kop: str) -> None:
    Producer({"bootstrap.servers": mock_cluster}).list_topics("d", timeout=30)  # the mock creates it
    assert consumer_protocol_session(kop) == consumer_protocol_session(mock_cluster)


def share_session(bootstrap: str) -> list[tuple[int, int, bytes]]:
    """A share consumer (KIP-932) joins, records come, it releases one the first time it gets it
    and accepts the rest: what it is delivered, as (offset, delivery count, value)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("d", value=b"before", partition=0)  # before the group: not for it (latest)
    assert producer.flush(30) == 0
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "share", "share.acknowledgement.mode": "explicit"})
    c.subscribe(["d"])
    got: list[tuple[int, int, bytes]] = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not c.poll(0.2):
            pass  # until it has fetched once: the group has started at the end of each partition
        for i in range(3):
            producer.produce("d", value=f"r{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while len(got) < 4:
            assert time.monotonic() < deadline, f"delivered only {got}"
            for m in c.poll(0.2) or []:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.delivery_count(), m.value()))
                again = m.value() == b"r1" and m.delivery_count() == 1
                c.acknowledge(m, AcknowledgeType.RELEASE if again else AcknowledgeType.ACCEPT)
            c.commit_sync()
    finally:
        c.close()
    return sorted(got)


def test_a_share_consumer_is_delivered_what_the_mock_cluster_delivers(mock_cluster: str, kop: str) -> None:
    assert (
        share_session(kop)
        == share_session(mock_cluster)
        == [
            (1, 1, b"r0"),
            (2, 1, b"r1"),
            (2, 2, b"r1"),  # released the first time: delivered again, its delivery counted
            (3, 1, b"r2"),
        ]
    )
