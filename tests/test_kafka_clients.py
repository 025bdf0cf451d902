"""Real Kafka clients against ``kop serve`` on loopback: kafka-python 3, confluent-kafka
(librdkafka 2.x) and aiokafka produce and consume unchanged, and what they write is what the
Broker reads, offset for offset (and the other way round)."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType as KConfigResourceType
from kafka.admin import NewTopic as KNewTopic
from kafka.protocol.admin import CreateTopicsRequest, DescribeConfigsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from kop_spark import Broker, Record
from kop_spark.errors import InvalidTopicError
from kop_spark.record import build_record_batch

from .kafka_wire import call, connect, wire_request
from .kop_server import KopServer

T0 = int(time.time()) * 1000  # record timestamps, in ms: now, within the broker's bounds and retention


@pytest.fixture
def server(tmp_path) -> Iterator[KopServer]:
    with KopServer(str(tmp_path / "store")) as s:
        yield s


def _records(n: int, tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [(f"k{i % 7}".encode(), f"{tag}-{i}".encode(), [("h", f"{i}".encode())], T0 + i) for i in range(n)]


def _broker_view(root: str, topic: str) -> dict[tuple[int, int], tuple]:
    with Broker(root) as b:
        return {
            (p, r.offset): (r.key, r.value, list(r.headers), r.timestamp_ms)
            for p in range(b.partitions_for(topic))
            for r in b.fetch(topic, p, 0, max_records=100_000)
        }


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produces_what_the_broker_reads_and_consumes_it(server: KopServer, codec: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([KNewTopic("t", 3, 1)])
    admin.close()
    sent = _records(200, codec)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type=None if codec == "none" else codec)
    futures = [producer.send("t", key=k, value=v, headers=h, timestamp_ms=ts) for k, v, h, ts in sent]
    acked = {(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)}
    producer.close()
    stored = _broker_view(server.root, "t")
    assert set(stored) == acked and sorted(stored.values(), key=lambda r: r[3]) == [
        (k, v, h, ts) for k, v, h, ts in sent
    ]
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, consumer_timeout_ms=5000, auto_offset_reset="earliest")
    consumer.assign([KTopicPartition("t", p) for p in range(3)])
    consumed = {
        (m.partition, m.offset): (m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
        for m in _take(consumer, len(sent))
    }
    consumer.close()
    assert consumed == stored


def _take(consumer: KafkaConsumer, n: int) -> list:
    out = []
    for m in consumer:
        out.append(m)
        if len(out) == n:
            break
    return out


def test_librdkafka_idempotent_producer_and_consumer_with_commits(server: KopServer) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic("c", 2, 1)]).values():
        f.result(30)
    producer = Producer(
        {"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    acked: list[tuple[int, int, bytes]] = []
    for k, v, h, ts in _records(1000, "c"):
        producer.produce(
            "c",
            key=k,
            value=v,
            headers=h,
            timestamp=ts,
            on_delivery=lambda e, m: acked.append((m.partition(), m.offset(), m.value())),
        )
    assert producer.flush(30) == 0
    stored = _broker_view(server.root, "c")
    assert sorted((p, o, v) for (p, o), (_, v, _, _) in stored.items()) == sorted(acked)
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "g",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("c", p, 0) for p in range(2)])
    got = []
    while len(got) < len(acked):
        m = consumer.poll(10)
        assert m is not None and m.error() is None, m and m.error()
        got.append((m.partition(), m.offset(), m.value()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted(acked)
    with Broker(server.root) as b:
        committed = b.fetch_offsets("g")
    assert {tp: o.offset for tp, o in committed.items()} == {
        ("c", p): b.list_offsets("c", p, "latest") for p in range(2)
    }


def test_a_topic_named_in_full_is_the_same_topic_to_a_kafka_client(server: KopServer) -> None:
    """KoP's names (tenant/ns/t, persistent://tenant/ns/t) work on the wire as in the Broker API:
    Metadata answers under the name asked, which is the one a client waits for."""
    with Broker(server.root) as b:
        b.create_topic("orders", 1)
        b.create_topic("eu/shop/orders", 1)
    names = ["public/default/orders", "persistent://public/default/orders", "persistent://eu/shop/orders"]
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 10_000})
    for name in names:
        producer.produce(name, value=name.encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(names[1:])
    got = []
    while len(got) < 3:
        m = consumer.poll(10)
        assert m is not None and m.error() is None, m and m.error()
        got.append((m.topic(), m.value().decode()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted([(names[1], names[0]), (names[1], names[1]), (names[2], names[2])])
    with Broker(server.root) as b:
        assert sorted(r.value for r in b.fetch("orders", 0, 0)) == sorted(n.encode() for n in names[:2])
        assert {tp: o.offset for tp, o in b.fetch_offsets("g").items()} == {
            ("orders", 0): 2,
            ("eu/shop/orders", 0): 1,
        }


def test_aiokafka_round_trip(server: KopServer) -> None:
    async def go() -> list[tuple[int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait("a", key=b"k", value=f"a{i}".encode())  # auto-created
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("a", bootstrap_servers=server.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            out = []
            while len(out) < 50:
                batch = await consumer.getmany(timeout_ms=10_000)
                assert batch, "nothing consumed within 10 s"
                out += [(m.offset, m.value) for ms in batch.values() for m in ms]
            return out
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(go())) == [(i, f"a{i}".encode()) for i in range(50)]


def test_what_the_broker_writes_kafka_consumers_read(server: KopServer) -> None:
    with Broker(server.root) as b:
        b.create_topic("w", 1)
        b.produce("w", [Record(value=f"w{i}".encode(), key=b"k", timestamp_ms=T0 + i) for i in range(30)], 0)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "r", "enable.auto.commit": False})
    consumer.assign([TopicPartition("w", 0, 5)])
    got = []
    while len(got) < 25:
        m = consumer.poll(10)
        assert m is not None and m.error() is None
        got.append((m.offset(), m.value(), m.timestamp()[1]))
    consumer.close()
    assert got == [(i, f"w{i}".encode(), T0 + i) for i in range(5, 30)]


def test_admin_clients_create_grow_describe_and_delete_topics(server: KopServer) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    config = {"retention.ms": "60000", "cleanup.policy": "compact"}
    for f in admin.create_topics([NewTopic("adm", 2, 1, config=config)]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions("adm", 5)]).values():
        f.result(30)
    (described,) = admin.describe_configs([ConfigResource("topic", "adm")]).values()
    entries = described.result(30)
    assert {k: entries[k].value for k in config} == config
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    with Broker(server.root) as b:
        assert b.partitions_for("adm") == 5 and b.topic_config("adm")["cleanup.policy"] == "compact"
    cluster = admin.describe_cluster().result(30)
    assert [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(0, server.bootstrap)]
    (refused,) = admin.create_topics([NewTopic("adm", 1, 1)]).values()
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        refused.result(30)
    for f in admin.delete_topics(["adm"]).values():
        f.result(30)
    with Broker(server.root) as b:
        assert "adm" not in b.list_topics()


def test_a_topic_whose_name_collides_with_another_in_metric_names_is_refused(server: KopServer) -> None:
    """Kafka refuses ``a_b`` beside ``a.b`` (INVALID_TOPIC_EXCEPTION): metric names replace '.'
    with '_', so the two topics' metrics would be one. Once ``a.b`` is deleted, ``a_b`` may be."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic("orders.eu", 1, 1), NewTopic("orders-eu", 1, 1)]).values():
        f.result(30)
    (refused,) = admin.create_topics([NewTopic("orders_eu", 1, 1)]).values()
    with pytest.raises(KafkaException, match="TOPIC_EXCEPTION,val=17") as caught:  # librdkafka's name
        refused.result(30)
    assert "Topic 'orders_eu' collides with existing topic: orders.eu" in str(caught.value)
    for f in admin.delete_topics(["orders.eu"]).values():
        f.result(30)
    for f in admin.create_topics([NewTopic("orders_eu", 1, 1)]).values():
        f.result(30)
    with Broker(server.root) as b:
        assert b.list_topics() == ["orders-eu", "orders_eu"]
        with pytest.raises(InvalidTopicError, match="collides with existing topic: orders_eu"):
            b.create_topic("orders.eu", 1)
        b.create_topic("tenant2/ns/orders.eu", 1)  # another namespace: other metric names


def test_topics_are_created_with_the_configs_kafka_streams_gives_its_internal_topics(server: KopServer) -> None:
    """Kafka Streams creates its repartition topics with segment.bytes, and others set
    min.insync.replicas or the compaction lags: each is taken and described as set, and a
    compression.type kop would have to recompress to, or lags that conflict, refused by name."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    repartition = {"cleanup.policy": "delete", "segment.bytes": "52428800", "retention.ms": "-1"}
    changelog = {"cleanup.policy": "compact", "min.compaction.lag.ms": "86400000", "min.insync.replicas": "2"}
    topics = {"app-repartition": repartition, "app-changelog": {**changelog, "message.timestamp.type": "CreateTime"}}
    for f in admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in topics.items()]).values():
        f.result(30)
    for topic, config in topics.items():
        described = _configs(admin, topic)
        assert {k: described[k] for k in config} == {
            k: (v, ConfigSource.DYNAMIC_TOPIC_CONFIG.value) for k, v in config.items()
        }
    assert _configs(admin, "app-repartition")["segment.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    lags = {"min.compaction.lag.ms": "86400000", "max.compaction.lag.ms": "60000"}
    for name, config, message in (
        ("gz", {"compression.type": "gzip"}, r"compression\.type"),
        ("lags", lags, r"min\.compaction\.lag\.ms \(86400000\) > max\.compaction\.lag\.ms \(60000\)"),
    ):
        (refused,) = admin.create_topics([NewTopic(name, 1, 1, config=config)]).values()
        with pytest.raises(KafkaException, match=message) as e:
            refused.result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, int]]:
    (described,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return {k: (e.value, e.source) for k, e in described.result(30).items()}


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry, validate_only: bool = False) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=list(entries))
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    future.result(30)


def test_admin_clients_alter_a_topics_configs_and_the_server_applies_them_at_once(server: KopServer) -> None:
    set_, delete, append, subtract = (
        AlterConfigOpType.SET,
        AlterConfigOpType.DELETE,
        AlterConfigOpType.APPEND,
        AlterConfigOpType.SUBTRACT,
    )
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic("cfg", 1, 1, config={"retention.ms": "60000"})]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    producer.produce("cfg", b"x" * 5000)
    assert producer.flush(30) == 0
    dynamic, default = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value

    # incremental: each operation on the topic's own settings, the others left as they are
    _alter(admin, "cfg", ConfigEntry("max.message.bytes", "2000", incremental_operation=set_))
    _alter(admin, "cfg", ConfigEntry("cleanup.policy", "compact", incremental_operation=append))
    got = _configs(admin, "cfg")
    assert got["max.message.bytes"] == ("2000", dynamic) and got["retention.ms"] == ("60000", dynamic)
    assert got["cleanup.policy"] == ("compact,delete", dynamic)
    _alter(admin, "cfg", ConfigEntry("cleanup.policy", "delete", incremental_operation=subtract))
    _alter(admin, "cfg", ConfigEntry("retention.ms", None, incremental_operation=delete))
    _alter(admin, "cfg", ConfigEntry("delete.retention.ms", "86400000", incremental_operation=set_))
    got = _configs(admin, "cfg")
    assert got["cleanup.policy"] == ("compact", dynamic) and got["retention.ms"] == ("604800000", default)
    assert got["delete.retention.ms"] == ("86400000", dynamic)  # the topic's own, though the default's value
    own_default = {"delete.retention.ms": 86400000}
    with Broker(server.root) as b:
        assert b.topic_config("cfg", own=True) == {
            "max.message.bytes": 2000,
            "cleanup.policy": "compact",
            **own_default,
        }

    # the running server checks produces against the new limit at once
    refused: list[KafkaError] = []
    producer.produce("cfg", key=b"k", value=b"x" * 5000, on_delivery=lambda err, _: refused.append(err))
    producer.flush(30)
    assert refused and refused[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    # refused whole, naming the setting; validate_only changes nothing
    for bad, message in (
        (ConfigEntry("retention.ms", "5", incremental_operation=append), "'retention.ms' is not a list"),
        (ConfigEntry("retention.ms", "soon", incremental_operation=set_), "invalid value 'soon'"),
        (ConfigEntry("retention.days", "5", incremental_operation=set_), "'retention.days' is not a topic setting"),
    ):
        with pytest.raises(KafkaException, match=message) as e:
            _alter(admin, "cfg", ConfigEntry("delete.retention.ms", "1", incremental_operation=set_), bad)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    _alter(admin, "cfg", ConfigEntry("retention.ms", "5", incremental_operation=set_), validate_only=True)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        _alter(admin, "nope", ConfigEntry("retention.ms", "5", incremental_operation=set_))
    with Broker(server.root) as b:
        assert b.topic_config("cfg", own=True) == {
            "max.message.bytes": 2000,
            "cleanup.policy": "compact",
            **own_default,
        }

    # the legacy AlterConfigs: the topic's own settings become those given. kafka-python sends
    # the topic's other own settings along (read first), as it must; librdkafka sends what it is given.
    kafka_python = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    kafka_python.alter_configs(
        [KConfigResource(KConfigResourceType.TOPIC, "cfg", configs={"retention.ms": "90000"})], incremental=False
    )
    kafka_python.close()
    with Broker(server.root) as b:
        kept = {"max.message.bytes": 2000, "cleanup.policy": "compact", **own_default}
        assert b.topic_config("cfg", own=True) == {**kept, "retention.ms": 90000}
    with pytest.warns(DeprecationWarning):
        (legacy,) = admin.alter_configs([ConfigResource("topic", "cfg", set_config={"retention.ms": "80000"})]).values()
    legacy.result(30)
    with Broker(server.root) as b:
        assert b.topic_config("cfg", own=True) == {"retention.ms": 80000}
    (broker_change,) = admin.incremental_alter_configs(
        [
            ConfigResource(
                "broker", "0", incremental_configs=[ConfigEntry("retention.ms", "5", incremental_operation=set_)]
            )
        ]
    ).values()
    with pytest.raises(KafkaException, match=r"conf/kop\.conf"):
        broker_change.result(30)


def test_described_configs_carry_kafkas_types_and_synonyms_and_documentation_when_asked(server: KopServer) -> None:
    """DescribeConfigs reports each setting's type as Kafka's ConfigDef gives it (admin tools show
    it and check values against it); when asked, where its value comes from (a topic's own setting,
    then the broker's default it overrides: kafka-configs --describe --all prints these) and its
    documentation."""
    with Broker(server.root) as b:
        b.create_topic("typed", 1, config={"retention.ms": 1000})
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    topic = KConfigResource(KConfigResourceType.TOPIC, "typed")
    (described,) = admin.describe_configs([topic], config_filter="all")["topic"].values()
    (chained,) = admin.describe_configs([topic], include_synonyms=True, config_filter="all")["topic"].values()
    broker = admin.describe_configs([KConfigResource(KConfigResourceType.BROKER, "0")], config_filter="all")
    admin.close()
    types = {k: c["config_type"] for k, c in {**broker["broker"]["0"], **described}.items()}
    expected = {
        "retention.ms": "LONG",
        "max.message.bytes": "INT",
        "cleanup.policy": "LIST",
        "min.cleanable.dirty.ratio": "DOUBLE",
        "unclean.leader.election.enable": "BOOLEAN",
        "message.timestamp.type": "STRING",
        "group.consumer.session.timeout.ms": "INT",
        "ssl.key.password": "PASSWORD",
    }
    assert {k: types[k] for k in expected} == expected
    assert "UNKNOWN" not in types.values()
    assert all(not c["synonyms"] and c["documentation"] is None for c in described.values()), "only when asked"
    synonyms = {k: [(s["value"], s["source"]) for s in chained[k]["synonyms"]] for k in ("retention.ms", "segment.ms")}
    assert synonyms == {
        "retention.ms": [("1000", "DYNAMIC_TOPIC_CONFIG"), ("604800000", "DEFAULT_CONFIG")],
        "segment.ms": [("604800000", "DEFAULT_CONFIG")],
    }
    request = wire_request(
        DescribeConfigsRequest,
        4,
        resources=[{"resource_type": 2, "resource_name": "typed", "configuration_keys": ["segment.bytes"]}],
        include_synonyms=False,
        include_documentation=True,
    )
    with connect(server) as sock:
        (result,) = call(sock, request).results
    ((name, documentation),) = [(c.name, c.documentation) for c in result.configs]
    assert name == "segment.bytes" and "roll" in documentation


def test_settings_conf_changes_are_described_as_the_brokers(tmp_path) -> None:
    """A setting conf/kop.conf changes from kop's default is STATIC_BROKER_CONFIG, on the broker and
    on each topic that does not set its own, as Kafka describes what server.properties sets
    (kafka-configs and the admin UIs show the operator's changes so); the rest are DEFAULT_CONFIG."""
    with KopServer(str(tmp_path / "store"), conf=["retention.ms=86400000"]) as server:
        with Broker(server.root) as b:
            b.create_topic("own", 1, config={"retention.ms": 1000})
            b.create_topic("plain", 1)
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        resources = [KConfigResource(KConfigResourceType.TOPIC, t) for t in ("own", "plain")]
        topics = admin.describe_configs(resources, include_synonyms=True, config_filter="all")["topic"]
        broker = admin.describe_configs(
            [KConfigResource(KConfigResourceType.BROKER, "0")], include_synonyms=True, config_filter="all"
        )["broker"]["0"]
        admin.close()

    def described(entry: dict[str, Any]) -> tuple[Any, ...]:
        return entry["value"], entry["config_source"], [(s["value"], s["source"]) for s in entry["synonyms"]]

    dynamic, static = ("1000", "DYNAMIC_TOPIC_CONFIG"), ("86400000", "STATIC_BROKER_CONFIG")
    default = ("604800000", "DEFAULT_CONFIG")
    assert described(topics["own"]["retention.ms"]) == (*dynamic, [dynamic, static, default])
    assert described(topics["plain"]["retention.ms"]) == (*static, [static, default])
    assert described(broker["retention.ms"]) == (*static, [static, default])
    assert described(topics["plain"]["segment.ms"]) == (*default, [default])
    assert described(broker["segment.ms"]) == (*default, [default])


def test_admin_clients_delete_records_and_consumers_start_after_them(server: KopServer) -> None:
    with Broker(server.root) as b:
        b.create_topic("dr", 2)
        for p in (0, 1):
            for i in range(4):  # one batch of 5 each
                b.produce("dr", [Record(f"{p}-{5 * i + j}".encode()) for j in range(5)], partition=p)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    asked = [TopicPartition("dr", 0, 7), TopicPartition("dr", 1, -1)]  # mid-batch; the high watermark
    done = {(tp.topic, tp.partition): f.result(30).low_watermark for tp, f in admin.delete_records(asked).items()}
    assert done == {("dr", 0): 7, ("dr", 1): 20}
    (beyond,) = admin.delete_records([TopicPartition("dr", 0, 21)]).values()
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        beyond.result(30)
    # kafka-python too, and an offset before the log start changes nothing
    kafka_python = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    for before in (9, 2):
        answer = kafka_python.delete_records({KTopicPartition("dr", 0): before})
        assert {tp.partition: v["low_watermark"] for tp, v in answer.items()} == {0: 9}
    kafka_python.close()

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "dr", "auto.offset.reset": "earliest"})
    assert consumer.get_watermark_offsets(TopicPartition("dr", 0), timeout=30) == (9, 20)
    consumer.subscribe(["dr"])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < 11 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.value()))
    consumer.close()
    assert got == [(0, o, f"0-{o}".encode()) for o in range(9, 20)]


def test_offsets_by_time_and_the_max_timestamp(server: KopServer) -> None:
    times = [T0 + 5, T0 + 9, T0 + 2, T0 + 9, T0 + 7]
    with Broker(server.root) as b:
        b.create_topic("ts", 1)
        for i, t in enumerate(times):  # one batch each
            b.produce("ts", [Record(value=f"r{i}".encode(), timestamp_ms=t)], 0)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ts"})
    found = [consumer.offsets_for_times([TopicPartition("ts", 0, t)], 30)[0].offset for t in (T0 + 6, T0 + 10)]
    consumer.close()
    assert found == [1, -1]
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    (answer,) = admin.list_offsets({TopicPartition("ts", 0): OffsetSpec.max_timestamp()}).values()
    top = answer.result(30)
    assert (top.offset, top.timestamp) == (1, T0 + 9)  # the first record with the largest time
    with Broker(server.root) as b:
        assert b.offsets_and_timestamps([("ts", 0, T0 + 3)]) == [(0, T0 + 5)]


def test_offsets_of_many_topics_and_partitions_by_every_spec_in_one_request(server: KopServer) -> None:
    """librdkafka asks a leader for all its partitions' offsets at once: each partition gets its
    own answer, whatever its spec and wherever it sits in the request."""
    with Broker(server.root) as b:
        for topic in ("lo-a", "lo-b"):
            b.create_topic(topic, 3)
            for p in range(3):  # partition p holds p + 2 records, one batch each, times T0 + 10p, T0 + 10p + 1, ...
                for i in range(p + 2):
                    b.produce(topic, [Record(value=b"v", timestamp_ms=T0 + 10 * p + i)], p)
    wanted = {
        TopicPartition("lo-a", 0): (OffsetSpec.for_timestamp(T0 + 1), (1, T0 + 1)),
        TopicPartition("lo-a", 1): (OffsetSpec.latest(), (3, -1)),
        TopicPartition("lo-a", 2): (OffsetSpec.for_timestamp(T0 + 22), (2, T0 + 22)),
        TopicPartition("lo-b", 0): (OffsetSpec.earliest(), (0, -1)),
        TopicPartition("lo-b", 1): (OffsetSpec.for_timestamp(T0 + 99), (-1, -1)),
        TopicPartition("lo-b", 2): (OffsetSpec.max_timestamp(), (3, T0 + 23)),
    }
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    answers = admin.list_offsets({tp: spec for tp, (spec, _) in wanted.items()})
    found = {(tp.topic, tp.partition): (f.result(30).offset, f.result(30).timestamp) for tp, f in answers.items()}
    assert found == {(tp.topic, tp.partition): expected for tp, (_, expected) in wanted.items()}


def test_log_append_time_topics_answer_with_the_brokers_time(server: KopServer) -> None:
    """A LogAppendTime topic stamps each batch, and the produce response says with what (Kafka's
    ``log_append_time_ms``): librdkafka hands it to the delivery report; CreateTime topics say -1."""
    with Broker(server.root) as b:
        b.create_topic("stamped", 1, config={"message.timestamp.type": "LogAppendTime"})
        b.create_topic("created", 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "acks": "all"})
    reports: dict[str, tuple[int, int]] = {}
    before = int(time.time() * 1000)
    for topic in ("stamped", "created"):
        producer.produce(topic, b"v", timestamp=T0, on_delivery=lambda e, m: reports.update({m.topic(): m.timestamp()}))
    assert producer.flush(30) == 0
    kind, stamp = reports["stamped"]
    assert kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= int(time.time() * 1000)
    assert reports["created"] == (confluent_kafka.TIMESTAMP_CREATE_TIME, T0)
    with Broker(server.root) as b:
        (stored,) = b.fetch("stamped", 0, 0)
    assert stored.timestamp_ms == stamp


def test_records_stamped_beyond_a_topics_bounds_are_refused_invalid_timestamp(server: KopServer) -> None:
    """Kafka's KIP-937: on a CreateTime topic a record stamped more than message.timestamp.after.max.ms
    (an hour, Kafka 4's default) ahead of the broker's clock is refused with INVALID_TIMESTAMP and
    a message naming the setting; a topic allowing more takes it."""
    with Broker(server.root) as b:
        b.create_topic("bounded", 1)
        b.create_topic("lenient", 1, config={"message.timestamp.after.max.ms": 3 * 3_600_000})
    ahead = int(time.time() * 1000) + 2 * 3_600_000
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    reports: dict[str, KafkaError | None] = {}
    for topic in ("bounded", "lenient"):
        producer.produce(topic, b"v", timestamp=ahead, on_delivery=lambda e, m: reports.update({m.topic(): e}))
    assert producer.flush(30) == 0
    assert reports["lenient"] is None and reports["bounded"].code() == KafkaError.INVALID_TIMESTAMP
    with connect(server) as sock:
        batch = build_record_batch([Record(b"ok"), Record(b"v", timestamp_ms=ahead)])
        answer = call(sock, wire_request(
            ProduceRequest, 8, transactional_id=None, acks=-1, timeout_ms=5000,
            topic_data=[{"name": "bounded", "partition_data": [{"index": 0, "records": batch}]}],
        ))  # fmt: skip
    (refused,) = answer.responses[0].partition_responses
    assert refused.error_code == 32 and "message.timestamp.after.max.ms=3600000" in refused.error_message
    ((index, why),) = [(e.batch_index, e.batch_index_error_message) for e in refused.record_errors]
    assert index == 1 and why.startswith(f"Timestamp {ahead} of message with offset 1 is out of range")
    with Broker(server.root) as b:
        assert b.list_offsets("bounded", 0, "latest") == 0
        assert [r.timestamp_ms for r in b.fetch("lenient", 0, 0)] == [ahead]


def test_librdkafka_fails_only_the_refused_records_with_their_error(server: KopServer) -> None:
    """KIP-467: the answer names the records a batch was refused for, so librdkafka fails those as
    invalid and the batch's others with INVALID_DIFFERENT_RECORD, which an application can send
    again; without the names it fails all alike. (librdkafka reads the names where a batch has
    more than one refused record: for one, it fails all with the partition's error.)"""
    with Broker(server.root) as b:
        b.create_topic("bounded", 1)
        b.create_topic("keyed", 1, config={"cleanup.policy": "compact"})
    ahead = int(time.time() * 1000) + 2 * 3_600_000
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 1000})
    reports: dict[tuple[str, bytes], int] = {}

    def report(e: KafkaError | None, m: Any) -> None:
        reports[(m.topic(), m.value())] = e.code() if e else 0

    for value, stamp in ((b"a", 0), (b"late", ahead), (b"c", 0), (b"later", ahead + 1)):
        producer.produce("bounded", value, key=b"k", timestamp=stamp, on_delivery=report)
    for value, key in ((b"a", b"k"), (b"keyless", None), (b"also keyless", None)):
        producer.produce("keyed", value, key=key, on_delivery=report)
    assert producer.flush(30) == 0
    others = KafkaError._INVALID_DIFFERENT_RECORD
    assert reports == {
        ("bounded", b"a"): others,
        ("bounded", b"late"): KafkaError.INVALID_RECORD,
        ("bounded", b"c"): others,
        ("bounded", b"later"): KafkaError.INVALID_RECORD,
        ("keyed", b"a"): others,
        ("keyed", b"keyless"): KafkaError.INVALID_RECORD,
        ("keyed", b"also keyless"): KafkaError.INVALID_RECORD,
    }


def test_topics_have_ids_clients_see_and_ask_by_and_a_recreated_topic_gets_a_new_one(server: KopServer) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})

    def described() -> Any:
        (future,) = admin.describe_topics(TopicCollection(["ids"])).values()
        return future.result(30)

    with connect(server) as sock:
        topic = {"name": "ids", "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []}
        created = call(sock, wire_request(CreateTopicsRequest, 7, topics=[topic], timeout_ms=5000, validate_only=False))
    first = described()
    assert str(first.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA" and len(first.partitions) == 3
    bits = (first.topic_id.get_most_significant_bits(), first.topic_id.get_least_significant_bits())
    by_id = uuid.UUID(int=(bits[0] % (1 << 64)) << 64 | bits[1] % (1 << 64))
    assert created.topics[0].topic_id == by_id  # CreateTopics v7 answers the new topic's id
    with connect(server) as sock:  # Metadata v12 by id, as consumer-protocol clients ask
        answer = call(sock, wire_request(MetadataRequest, 12, topics=[{"topic_id": by_id, "name": None}]))
        assert [(t.name, t.topic_id, len(t.partitions), t.error_code) for t in answer.topics] == [("ids", by_id, 3, 0)]
        unknown = call(sock, wire_request(MetadataRequest, 12, topics=[{"topic_id": uuid.uuid4(), "name": None}]))
        assert [t.error_code for t in unknown.topics] == [100]  # UNKNOWN_TOPIC_ID
    again = KopServer(server.root).start()  # every server on the store gives the same id
    try:
        other = AdminClient({"bootstrap.servers": again.bootstrap})
        (future,) = other.describe_topics(TopicCollection(["ids"])).values()
        assert str(future.result(30).topic_id) == str(first.topic_id)
        del other
    finally:
        again.stop()
    for f in admin.delete_topics(["ids"]).values():
        f.result(30)
    for f in admin.create_topics([NewTopic("ids", 3, 1)]).values():
        f.result(30)
    assert str(described().topic_id) != str(first.topic_id)


def test_log_dirs_tell_each_partitions_size_and_the_disks_space(server: KopServer) -> None:
    with Broker(server.root) as b:
        b.create_topic("sized", 2)
        b.produce("sized", [Record(b"x" * 1000) for _ in range(50)], 1)
    with Broker(server.root) as b:  # once the ledger is closed, as the server sees it
        sizes = {p.partition: p.size_bytes for p in b.describe_topic("sized").partitions}
    assert sizes[1] > 50_000 and sizes[0] < sizes[1]
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        ((described,),) = [answer["log_dirs"] for answer in admin.describe_log_dirs({"sized": [1], "gone": [0]})]
        everything = admin.describe_log_dirs()[0]["log_dirs"][0]
    finally:
        admin.close()
    assert described["error_code"] == 0 and described["log_dir"] == server.root
    (topic,) = described["topics"]  # a topic that does not exist is left out, as Kafka leaves it
    assert topic["name"] == "sized"
    assert [(p["partition_index"], p["partition_size"]) for p in topic["partitions"]] == [(1, sizes[1])]
    disk = shutil.disk_usage(server.root)
    assert described["total_bytes"] == disk.total and abs(described["usable_bytes"] - disk.free) < 1 << 30
    (topic,) = [t for t in everything["topics"] if t["name"] == "sized"]
    assert {p["partition_index"]: p["partition_size"] for p in topic["partitions"]} == sizes
