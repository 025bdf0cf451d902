"""Kafka transactions through ``kop serve`` with real clients: confluent-kafka (librdkafka),
kafka-python and aiokafka. A consume-transform-produce loop commits its output and its input
offsets together; what a transaction produced is invisible to every reader until it commits, and
never visible after an abort, a newer instance of its producer, a timeout, or a server killed in
the middle of it."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import ProducerFencedError as KafkaProducerFencedError
from kafka.errors import TransactionalIdNotFoundError as KafkaTransactionalIdNotFoundError
from kafka.errors import UnknownTopicOrPartitionError as KafkaUnknownTopicOrPartitionError

from kop_spark import Broker, Record, layout
from kop_spark.broker.transactions import COMPLETE_ABORT

from .conftest import read_partition
from .kop_server import KopServer
from .test_cli import kop

TIMEOUT_S = 30
# librdkafka re-bootstraps once its only broker is gone, and a group coordinator it knew from before
# can then leave send_offsets_to_transaction waiting forever (librdkafka #5511, #5456): what
# producers that send offsets through a restart are told to do (README).
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}


@pytest.fixture
def server(tmp_path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("out", 2)
        b.create_topic("in", 1)
        b.produce("in", [Record(f"in-{i}".encode()) for i in range(10)], 0)
    with KopServer(root) as s:
        yield s


def _committed(root: str, topic: str = "out") -> dict[int, list[bytes]]:
    """Each partition's records, checked to run at continuous offsets from 0."""
    out = {}
    with Broker(root) as b:
        for p in range(b.partitions_for(topic)):
            start, end, records = read_partition(b, topic, p)
            assert start == 0 and [r.offset for r in records] == list(range(end))
            out[p] = [r.value for r in records]
    return out


def _all(root: str, topic: str = "out") -> list[bytes]:
    return sorted(v for values in _committed(root, topic).values() for v in values)


def _group_offsets(root: str, group: str) -> dict[tuple[str, int], int]:
    with Broker(root) as b:
        return {tp: o.offset for tp, o in b.fetch_offsets(group).items()}


def _staged(root: str, *, full: bool = False) -> list[str]:
    """The staged files (the ledgers' paths when ``full``)."""
    walk = os.walk(os.path.join(root, layout.STAGING_DIR))
    if full:
        return [os.path.join(d, f) for d, _, files in walk for f in files if f.endswith(layout.LEDGER_SUFFIX)]
    return [f for _, _, files in walk for f in files]


def _producer(server: KopServer, tid: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": tid, **conf})
    p.init_transactions(TIMEOUT_S)
    return p


def _consume(server: KopServer, isolation: str) -> list[bytes]:
    """Everything a consumer with ``isolation`` reads of "out", up to the end it is told."""
    c = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": f"reader-{isolation}", "isolation.level": isolation}
    )
    partitions = [TopicPartition("out", p, 0) for p in range(2)]
    ends = {tp.partition: c.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in partitions}
    c.assign(partitions)
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while any(ends[tp.partition] > 0 and tp.offset < ends[tp.partition] for tp in c.position(partitions)):
        assert time.monotonic() < deadline, f"{isolation} consumer stuck before {ends}"
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return sorted(got)


def test_consume_transform_produce_commits_output_and_input_offsets_together(server: KopServer) -> None:
    source = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "enricher",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    source.subscribe(["in"])
    p = _producer(server, "enricher-tx")
    consumed = 0
    for txn in range(2):
        p.begin_transaction()
        for _ in range(5):
            m = source.poll(TIMEOUT_S)
            assert m is not None and m.error() is None
            p.produce("out", key=m.value(), value=m.value().upper())
            consumed = m.offset() + 1
        p.flush(TIMEOUT_S)
        assert len(_all(server.root)) == 5 * txn, "a transaction's records are invisible before its commit"
        assert _consume(server, "read_uncommitted") == _all(server.root)
        p.send_offsets_to_transaction([TopicPartition("in", 0, consumed)], source.consumer_group_metadata(), TIMEOUT_S)
        assert _group_offsets(server.root, "enricher").get(("in", 0)) == (5 * txn or None)
        p.commit_transaction(TIMEOUT_S)
        assert _group_offsets(server.root, "enricher") == {("in", 0): consumed}
    source.close()
    assert _all(server.root) == sorted(f"IN-{i}".encode() for i in range(10))
    assert _consume(server, "read_committed") == _all(server.root)
    assert _staged(server.root) == []


def test_an_aborted_transaction_is_never_seen_and_the_next_commits(server: KopServer) -> None:
    p = _producer(server, "tx")
    p.begin_transaction()
    for i in range(4):
        p.produce("out", key=b"k", value=f"aborted-{i}".encode())
    p.flush(TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce("out", key=b"k", value=b"committed")
    p.commit_transaction(TIMEOUT_S)
    assert _all(server.root) == [b"committed"]
    for isolation in ("read_committed", "read_uncommitted"):
        assert _consume(server, isolation) == [b"committed"]
    assert _staged(server.root) == []


def test_a_newer_instance_fences_the_older_whose_transaction_is_aborted(server: KopServer) -> None:
    old = _producer(server, "tx")
    old.begin_transaction()
    old.produce("out", value=b"zombie")
    old.flush(TIMEOUT_S)
    listed = kop(server.root, "transactions", "list").stdout.splitlines()
    assert listed[0].split("\t")[:4] == ["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE"]
    assert listed[1].split("\t")[2:4] == ["0", "Ongoing"] and listed[1].startswith("tx\t")
    header, row = kop(server.root, "transactions", "describe", "--transactional-id", "tx").stdout.splitlines()
    described = dict(zip(header.split("\t"), row.split("\t"), strict=True))  # kafka-transactions describe's
    assert {k: described[k] for k in ("TransactionalId", "ProducerEpoch", "TransactionState")} == {
        "TransactionalId": "tx",
        "ProducerEpoch": "0",
        "TransactionState": "Ongoing",
    }
    assert described["TopicPartitions"] in ("out-0", "out-1") and int(described["CurrentTransactionStartTimeMs"]) > 0
    unknown = kop(server.root, "transactions", "describe", "--transactional-id", "nope")
    assert unknown.returncode != 0 and "'nope' is not known" in unknown.stderr
    new = _producer(server, "tx")
    assert kop(server.root, "transactions", "list").stdout.splitlines()[1].split("\t")[2:4] == ["1", "CompleteAbort"]
    with pytest.raises(KafkaException) as refused:
        old.commit_transaction(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError._FENCED
    new.begin_transaction()
    new.produce("out", value=b"new")
    new.commit_transaction(TIMEOUT_S)
    assert _all(server.root) == [b"new"]


def test_a_transaction_past_its_timeout_is_aborted(server: KopServer) -> None:
    p = _producer(server, "slow-tx", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce("out", value=b"too late")
    p.flush(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    with Broker(server.root) as b:
        while b.transactions.get("slow-tx").state != COMPLETE_ABORT:
            assert time.monotonic() < deadline, "the server never aborted the transaction"
            time.sleep(0.1)
    with pytest.raises(KafkaException) as fenced:
        p.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].code() == KafkaError._FENCED
    assert _all(server.root) == [] and _staged(server.root) == []


@pytest.mark.parametrize("then", ["produce", "add_partition", "commit"])
def test_a_transaction_goes_on_through_a_server_killed_in_it(server: KopServer, then: str) -> None:
    """As through a Kafka broker's restart: the restarted server takes the transaction up at the
    producer's next request (a Produce, an AddPartitionsToTxn, an EndTxn), and it commits whole."""
    p = _producer(server, "tx", **{"message.timeout.ms": 10_000})
    p.begin_transaction()
    p.produce("out", key=b"k", value=b"committed before")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce("out", key=b"k", value=b"in flight")
    p.flush(TIMEOUT_S)
    server.kill()
    server.start()
    if then != "commit":
        p.produce("out" if then == "produce" else "in", key=b"k", value=b"more")
        p.flush(TIMEOUT_S)
    p.commit_transaction(TIMEOUT_S)
    more = [b"more"] if then == "produce" else []
    assert _all(server.root) == sorted([b"committed before", b"in flight", *more])
    assert (_all(server.root, "in")[-1] == b"more") == (then == "add_partition") and _staged(server.root) == []


def test_a_transaction_a_restarted_server_cannot_take_up_is_aborted_and_the_producer_goes_on(
    server: KopServer,
) -> None:
    """What a restarted server cannot take up (here a staged ledger damaged while it was down) is
    aborted, and its producer told UNKNOWN_PRODUCER_ID: abortable, not fatal (KIP-360)."""
    p = _producer(server, "tx", **{"message.timeout.ms": 10_000})
    p.begin_transaction()
    p.produce("out", key=b"k", value=b"in flight")
    p.flush(TIMEOUT_S)
    server.kill()
    for ledger in _staged(server.root, full=True):
        with open(ledger, "r+b") as f:
            f.write(b"XXXX")  # its header's magic
    server.start()
    with pytest.raises(KafkaException) as lost:
        p.commit_transaction(TIMEOUT_S)
    error = lost.value.args[0]
    assert (error.code(), error.txn_requires_abort(), error.fatal()) == (KafkaError.UNKNOWN_PRODUCER_ID, True, False)
    p.abort_transaction(TIMEOUT_S)  # bumps the producer's epoch (KIP-360)
    p.begin_transaction()
    p.produce("out", key=b"k", value=b"after")
    p.commit_transaction(TIMEOUT_S)
    assert _all(server.root) == [b"after"] and _staged(server.root) == []


def test_an_exactly_once_loop_goes_on_through_a_server_killed_mid_transaction(server: KopServer) -> None:
    source = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "enricher", "enable.auto.commit": False})
    start = [TopicPartition("in", 0, 0)]
    source.assign(start)
    p = _producer(server, "enricher-tx", **{"message.timeout.ms": 10_000, **NO_REBOOTSTRAP})
    killed = False
    while _group_offsets(server.root, "enricher").get(("in", 0), 0) < 10:
        p.begin_transaction()
        for m in source.consume(5, TIMEOUT_S):
            assert m.error() is None
            p.produce("out", value=m.value().upper())
        p.flush(TIMEOUT_S)
        if not killed:
            server.kill()
            server.start()
            killed = True
        p.send_offsets_to_transaction(source.position(start), source.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)  # no abort: the transaction outlived the server
    source.close()
    assert killed and _all(server.root) == sorted(f"IN-{i}".encode() for i in range(10))
    assert _staged(server.root) == []


def test_an_exactly_once_loop_stays_exactly_once_through_servers_killed_at_random_points(server: KopServer) -> None:
    """kill -9 lands wherever the loop is (a produce, AddPartitionsToTxn, TxnOffsetCommit, EndTxn,
    a commit half applied): its output is each input once, and no transaction had to be aborted."""
    n = 200
    with Broker(server.root) as b:
        b.produce("in", [Record(f"in-{i}".encode()) for i in range(10, n)], 0)
    source = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "enricher", "enable.auto.commit": False})
    start = [TopicPartition("in", 0, 0)]
    source.assign(start)
    p = _producer(server, "enricher-tx", **{"message.timeout.ms": 30_000, **NO_REBOOTSTRAP})
    rng = random.Random(7)
    kills = [rng.uniform(0.0, 0.3) for _ in range(4)]

    def killer() -> None:
        for pause in kills:
            time.sleep(pause)  # where the kill lands, not a wait for anything
            server.kill()
            server.start()

    thread = threading.Thread(target=killer)
    thread.start()
    aborted = 0
    try:
        while _group_offsets(server.root, "enricher").get(("in", 0), 0) < n:
            p.begin_transaction()
            try:
                for m in source.consume(10, TIMEOUT_S):
                    assert m.error() is None
                    p.produce("out", value=m.value().upper())
                p.send_offsets_to_transaction(source.position(start), source.consumer_group_metadata(), TIMEOUT_S)
                p.commit_transaction(TIMEOUT_S)
            except KafkaException as e:
                assert e.args[0].txn_requires_abort(), e
                p.abort_transaction(TIMEOUT_S)
                aborted += 1
                committed = source.committed(start, TIMEOUT_S)[0].offset
                source.seek(TopicPartition("in", 0, max(committed, 0)))
    finally:
        thread.join()
    source.close()
    assert _all(server.root) == sorted(f"IN-{i}".encode() for i in range(n))
    assert aborted == 0 and _staged(server.root) == []


def test_a_server_restarted_between_transactions_goes_unnoticed(server: KopServer) -> None:
    p = _producer(server, "tx")
    for i in range(2):
        p.begin_transaction()
        p.produce("out", key=b"k", value=f"v{i}".encode())
        p.commit_transaction(TIMEOUT_S)
        if i == 0:
            assert server.stop() == 0
            server.start()
    assert sorted(_committed(server.root).values()) == [[], [b"v0", b"v1"]]  # one key: one partition, in order


def test_kafka_python_commits_and_aborts_transactions(server: KopServer) -> None:
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-tx")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", key=b"k", value=b"kafka-python aborted")
    p.abort_transaction()
    p.begin_transaction()
    p.send("out", key=b"k", value=b"kafka-python")
    p.send_offsets_to_transaction({KTopicPartition("in", 0): _offset(3)}, "kp-group")
    p.commit_transaction()
    newer = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-tx")
    newer.init_transactions()  # fences the first instance
    p.begin_transaction()
    with pytest.raises(KafkaProducerFencedError):
        p.send("out", value=b"fenced").get(TIMEOUT_S)
    p.close(TIMEOUT_S)  # a timeout of 0 leaves the network thread running, and using the random module
    newer.close(TIMEOUT_S)
    assert _all(server.root) == [b"kafka-python"]
    assert _group_offsets(server.root, "kp-group") == {("in", 0): 3}


def _offset(n: int):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(n, "", -1)


def test_aiokafka_commits_and_aborts_transactions(server: KopServer) -> None:
    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="aio-tx")
        await p.start()
        try:
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send_and_wait("out", b"aiokafka aborted", key=b"k")
                    raise RuntimeError("the application fails")
            async with p.transaction():
                await p.send_and_wait("out", b"aiokafka", key=b"k")
                await p.send_offsets_to_transaction({AIOTopicPartition("in", 0): 4}, "aio-group")
        finally:
            await p.stop()

    asyncio.run(run())
    assert _all(server.root) == [b"aiokafka"]
    assert _group_offsets(server.root, "aio-group") == {("in", 0): 4}


def test_kafka_python_and_aiokafka_transactions_go_on_through_a_server_killed_in_them(server: KopServer) -> None:
    """Clients without KIP-360's recovery (an UNKNOWN_PRODUCER_ID stops them) go on too: there is
    nothing to recover from, as the transaction outlives the server."""
    kp = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-tx", retries=10)
    kp.init_transactions()
    kp.begin_transaction()
    kp.send("out", key=b"k", value=b"kafka-python before").get(TIMEOUT_S)

    async def aio() -> None:
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="aio-tx")
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait("out", b"aiokafka before", key=b"a")
            server.kill()  # in both transactions, kafka-python's and this one
            server.start()
            await p.send_and_wait("out", b"aiokafka after", key=b"a")
            await p.send_offsets_to_transaction({AIOTopicPartition("in", 0): 6}, "aio-group")
            await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(aio())
    kp.send("out", key=b"k", value=b"kafka-python after").get(TIMEOUT_S)
    kp.send_offsets_to_transaction({KTopicPartition("in", 0): _offset(7)}, "kp-group")
    kp.commit_transaction()
    kp.close(TIMEOUT_S)
    assert _all(server.root) == [b"aiokafka after", b"aiokafka before", b"kafka-python after", b"kafka-python before"]
    assert _group_offsets(server.root, "kp-group") == {("in", 0): 7}
    assert _group_offsets(server.root, "aio-group") == {("in", 0): 6} and _staged(server.root) == []


def test_admin_clients_list_and_describe_transactions(server: KopServer) -> None:
    done = _producer(server, "done-tx")
    done.begin_transaction()
    done.produce("out", value=b"x", partition=0)
    done.commit_transaction(TIMEOUT_S)
    busy = _producer(server, "busy-tx", **{"transaction.timeout.ms": 600_000})
    busy.begin_transaction()
    busy.produce("out", value=b"y", partition=1)
    busy.flush(TIMEOUT_S)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)

    def listed(**filters) -> dict[str, str]:
        (node,) = admin.list_transactions(**filters).values()  # one broker: node 0
        return {t.transactional_id: t.state.value for t in node}

    try:
        assert listed() == {"done-tx": "CompleteCommit", "busy-tx": "Ongoing"}
        assert listed(state_filters=["Ongoing"]) == {"busy-tx": "Ongoing"}
        assert listed(transactional_id_pattern="d.*") == {"done-tx": "CompleteCommit"}
        assert listed(duration_filter_ms=3_600_000) == {}
        described = admin.describe_transactions(["busy-tx"])["busy-tx"]
        assert (described.state.value, described.transaction_timeout_ms) == ("Ongoing", 600_000)
        assert described.topic_partitions == {KTopicPartition("out", 1)}
        assert 0 < described.transaction_start_time_ms <= time.time() * 1000
        with pytest.raises(KafkaTransactionalIdNotFoundError):
            admin.describe_transactions(["nobody-tx"])
    finally:
        admin.close()
    busy.abort_transaction(TIMEOUT_S)


def test_kafka_python_describes_the_producers_of_each_partition(server: KopServer) -> None:
    """kafka-transactions describe-producers: an idempotent producer as the partition knows it (its
    last sequence and append), and a transactional one while its transaction has the partition."""
    idempotent = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    for values in ([b"a", b"b"], [b"c", b"d", b"e"]):
        for value in values:
            idempotent.produce("out", value=value, partition=0)
        idempotent.flush(TIMEOUT_S)  # a batch each time: sequences 0-1, then 2-4
    busy = _producer(server, "busy-tx")
    busy.begin_transaction()
    for p in (0, 1):
        busy.produce("out", value=b"pending", partition=p)
    busy.flush(TIMEOUT_S)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        described = admin.describe_producers([KTopicPartition("out", 0), KTopicPartition("out", 1)])
        busy.commit_transaction(TIMEOUT_S)
        after = admin.describe_producers([KTopicPartition("out", 1)])
        with pytest.raises(KafkaUnknownTopicOrPartitionError):
            admin.describe_producers([KTopicPartition("in", 3)], broker_id=0)
    finally:
        admin.close()
    plain, transactional = described[KTopicPartition("out", 0)].active_producers
    assert (plain.producer_epoch, plain.last_sequence, plain.current_transaction_start_offset) == (0, 4, -1)
    assert abs(plain.last_timestamp - time.time() * 1000) < 60_000
    with Broker(server.root) as b:
        state = b.transactions.get("busy-tx")
    assert (transactional.producer_id, transactional.producer_epoch) == (state.producer_id, state.epoch)
    assert transactional.current_transaction_start_offset == -1  # nothing of it is in the log yet
    assert described[KTopicPartition("out", 1)].active_producers == [transactional]
    assert after[KTopicPartition("out", 1)].active_producers == []  # its records are in, its transaction over


def test_a_consumer_protocol_members_offsets_commit_with_its_transaction(server: KopServer) -> None:
    # TxnOffsetCommit carries the member's epoch as its generation (KIP-848): it must be checked by
    # the consumer-protocol coordinator, as OffsetCommit is, not refused as a stranger's.
    source = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "modern",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        source.subscribe(["in"])
        p = _producer(server, "modern-tx")
        p.begin_transaction()
        for _ in range(3):
            m = source.poll(TIMEOUT_S)
            assert m is not None and m.error() is None
            p.produce("out", value=m.value())
        p.send_offsets_to_transaction([TopicPartition("in", 0, 3)], source.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)
        assert _group_offsets(server.root, "modern") == {("in", 0): 3}
    finally:
        source.close()
