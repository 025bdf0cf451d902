"""The offsets topic is the group coordinator's, as ``__consumer_offsets`` is a Kafka broker's: a
client may read it, but not write to it, delete it or change its partitions, whichever way it asks
(a Kafka client, the Broker API, a Spark sink, a transaction). One record there the coordinator
could not read would stop every group of its partition from fetching its offsets. A record of a type
the coordinator does not know (a later version's) is skipped, as Kafka's loader skips it."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient

from kop_spark import Broker
from kop_spark.errors import InvalidTopicError
from kop_spark.group.offsets_topic import partition_for_group
from kop_spark.record import Record, build_record_batch

from .kop_server import KopServer

OFFSETS = "public/__kafka/__consumer_offsets"


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    with Broker(str(tmp_path / "store")) as b:
        b.create_topic("t", 1)
        b.commit_offsets("g", {("t", 0): 3})
        yield b


def _batch(key: bytes) -> bytes:
    return build_record_batch([Record(key=key, value=b"not an offset")])


def _raise(answer: object) -> None:
    if isinstance(answer, Exception):
        raise answer


def test_no_write_of_a_client_reaches_the_offsets_topic(broker: Broker) -> None:
    p = partition_for_group("g", broker.partitions_for(OFFSETS))
    end = broker.list_offsets(OFFSETS, p, "latest")
    writes = [
        ("produce to", lambda: broker.produce(OFFSETS, [Record(key=b"junk", value=b"x")], partition=p)),
        ("produce to", lambda: broker.produce_batches(OFFSETS, p, [_batch(b"junk")])),
        ("produce to", lambda: _raise(broker.queue_batches([(OFFSETS, p, [_batch(b"junk")])])[0])),
        ("write to", lambda: broker.sink_commits.stage(OFFSETS, p, "_staging/job/0/task")),
        ("delete", lambda: broker.delete_topic(OFFSETS)),
        ("add partitions to", lambda: broker.create_partitions(OFFSETS, 60)),
        ("delete records of", lambda: broker.delete_records(OFFSETS, p, -1)),
    ]
    for action, write in writes:
        with pytest.raises(InvalidTopicError, match=f"cannot {action} internal topic '{OFFSETS}'"):
            write()
    assert broker.list_offsets(OFFSETS, p, "latest") == end
    assert broker.partitions_for(OFFSETS) == 50
    assert broker.fetch_offsets("g")[("t", 0)].offset == 3


def test_the_offsets_topic_cannot_be_made_by_a_client_before_the_coordinator(tmp_path) -> None:
    """A client's offsets topic (too few partitions, not compacted) would be taken up as it is."""
    with Broker(str(tmp_path / "store")) as b:
        with pytest.raises(InvalidTopicError, match="cannot create internal topic"):
            b.create_topic(OFFSETS, 1)
        b.create_topic("t", 1)
        b.commit_offsets("g", {("t", 0): 3})
        assert b.partitions_for(OFFSETS) == 50
        assert b.topic_config(OFFSETS)["cleanup.policy"] == "compact"


def test_a_topic_named_with_underscores_elsewhere_is_an_ordinary_topic(tmp_path) -> None:
    """Kafka keeps only its own topics from clients; ``__orders`` in the default namespace is a user's."""
    with Broker(str(tmp_path / "store")) as b:
        b.create_topic("__orders", 1)
        assert b.produce("__orders", [Record(value=b"x")]) == [(0, 0, 1)]
        assert b.delete_records("__orders", 0, 1) == 1
        assert "__orders" in b.list_topics()
        b.commit_offsets("g", {("__orders", 0): 1})
        assert "__consumer_offsets" not in b.list_topics()
        assert "__consumer_offsets" in b.list_topics(include_internal=True)


def test_a_record_of_a_type_not_known_here_is_skipped(tmp_path, caplog) -> None:
    """As one a later version writes (Kafka 4's consumer group records are keys v3 and up), or a
    client's write that an earlier version let in: the groups of its partition load all the same."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 2)
        b.commit_offsets("g", {("t", 0): 3})
        p = partition_for_group("g", b.partitions_for(OFFSETS))
        unknown = struct.pack(">h", 12) + b"a later version's key"
        b.produce_batches(OFFSETS, p, [_batch(unknown)], internal_topics_allowed=True)
        b.commit_offsets("g", {("t", 1): 5})
    with caplog.at_level(logging.WARNING, logger="kop_spark.group.coordinator"), Broker(root) as b:
        assert {tp: o.offset for tp, o in b.fetch_offsets("g").items()} == {("t", 0): 3, ("t", 1): 5}
    assert "unknown type (key version 12)" in caplog.text


@pytest.mark.parametrize("offsets", [OFFSETS, "__consumer_offsets"])
def test_a_kafka_client_is_refused_as_kafka_refuses_it(tmp_path, offsets: str) -> None:
    """Produce: INVALID_TOPIC_EXCEPTION, Kafka's for an append to an internal topic; the admin
    requests likewise, by its full name or by Kafka's. The group's offsets are there after a
    restart, read from the topic."""
    root = str(tmp_path / "store")
    p = _a_group_committed(root)
    with KopServer(root) as server:
        delivered: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": server.bootstrap, "message.send.max.retries": 0})
        producer.produce(
            offsets, key=b"junk", value=b"garbage", partition=p, on_delivery=lambda e, m: delivered.append(e)
        )
        producer.flush(30)
        assert [e.code() if e else None for e in delivered] == [KafkaError.TOPIC_EXCEPTION]
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for future in (
            admin.delete_topics([offsets])[offsets],
            admin.create_partitions([NewPartitions(offsets, 60)])[offsets],
            admin.create_topics([NewTopic(offsets, 1)])[offsets],
        ):
            with pytest.raises(KafkaException) as refused:
                future.result(30)
            assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, refused.value
        described = admin.describe_topics(TopicCollection([offsets]))[offsets].result(30)
        assert described.is_internal and len(described.partitions) == 50
        _transaction_to(offsets, p, server)
        del producer, admin  # before the server stops: they would log its going
    with KopServer(root) as server:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g"})
        try:
            [committed] = consumer.committed([KafkaTopicPartition("t", 0)], timeout=30)
        finally:
            consumer.close()
        assert committed.offset == 3


def _a_group_committed(root: str) -> int:
    """A store where group "g" committed offset 3 of ("t", 0); the group's offsets partition."""
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.commit_offsets("g", {("t", 0): 3})
        return partition_for_group("g", b.partitions_for(OFFSETS))


def _transaction_to(topic: str, partition: int, server: KopServer) -> None:
    """A transactional producer is refused when it adds the partition (abortable, as librdkafka
    takes INVALID_TOPIC_EXCEPTION there), and goes on with its next transaction."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"junk", value=b"garbage", partition=partition)
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION and refused.value.args[0].txn_requires_abort()
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("t", value=b"next")
    producer.commit_transaction(30)


def test_kafka_tools_read_the_offsets_topic_by_its_bare_name(tmp_path) -> None:
    """``kcat -t __consumer_offsets``, a lag monitor reading commits as they come: Kafka's own name
    for the topic, and Kafka's own records (OffsetCommitKey and OffsetCommitValue) in it."""
    root = str(tmp_path / "store")
    p = _a_group_committed(root)
    with KopServer(root) as server:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "monitor"})
        try:
            consumer.assign([KafkaTopicPartition("__consumer_offsets", p, 0)])
            # the group's records, up to its offset commit (key version 0 or 1; 2 is its metadata)
            read = [consumer.poll(30) for _ in range(_end_of(consumer, p))]
        finally:
            consumer.close()
    assert all(m is not None and m.error() is None for m in read), read
    [(key, value)] = [(m.key(), m.value()) for m in read if struct.unpack_from(">h", m.key())[0] in (0, 1)]
    version, group_length = struct.unpack_from(">hh", key)
    group = key[4 : 4 + group_length].decode()
    (topic_length,) = struct.unpack_from(">h", key, 4 + group_length)
    topic = key[6 + group_length : 6 + group_length + topic_length].decode()
    (partition,) = struct.unpack_from(">i", key, 6 + group_length + topic_length)
    assert (version, group, topic, partition) == (1, "g", "t", 0)
    assert struct.unpack_from(">q", value, 2)[0] == 3  # the value's offset, after its version


def _end_of(consumer: Consumer, partition: int) -> int:
    return consumer.get_watermark_offsets(KafkaTopicPartition("__consumer_offsets", partition), timeout=30)[1]


def test_a_listing_of_every_topic_shows_the_offsets_topic_as_internal(tmp_path) -> None:
    """Kafka's Metadata of all topics lists ``__consumer_offsets`` marked internal, so that
    ``kafka-topics --list`` and kcat -L show it and ``--exclude-internal`` (or a client's
    ``exclude.internal.topics``) leaves it out; the Broker lists it by the same name."""
    root = str(tmp_path / "store")
    _a_group_committed(root)
    with KopServer(root) as server:
        listed = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30).topics
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            described = {t["name"]: t for t in admin.describe_topics()}
        finally:
            admin.close()
    assert sorted(listed) == ["__consumer_offsets", "t"] and len(listed["__consumer_offsets"].partitions) == 50
    assert {name: t["is_internal"] for name, t in described.items()} == {"__consumer_offsets": True, "t": False}
    with Broker(root) as b:
        assert b.list_topics() == ["t"] and b.list_topics(include_internal=True) == ["__consumer_offsets", "t"]
