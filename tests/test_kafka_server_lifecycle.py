"""``kop serve`` stopping: SIGTERM answers what is in flight and exits 0; kill -9 under an
idempotent librdkafka producer with acks=all loses and duplicates nothing acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kop_spark import Broker, Record, layout
from kop_spark.kafka.server import KafkaServer

from .kafka_wire import call, connect, fetch_request
from .kop_server import KopServer


def _fetch(max_wait_ms: int):
    return fetch_request("t", max_wait_ms=max_wait_ms, min_bytes=1)


@contextlib.contextmanager
def in_process_server(
    tmp_path: Any, conf: dict[str, Any] | None = None
) -> Iterator[tuple[KafkaServer, asyncio.AbstractEventLoop, socket.socket]]:
    """A server on an event loop of this process (so a test can look at its connections), and a
    client socket to it."""
    with Broker(str(tmp_path / "store"), conf=conf) as b:
        b.create_topic("t", 1)
        loop = asyncio.new_event_loop()
        server = KafkaServer(b, "PLAINTEXT://127.0.0.1:0")
        loop.run_until_complete(server.start())
        runner = threading.Thread(target=loop.run_forever)
        runner.start()
        try:
            with socket.create_connection((server.bound[0].host, server.bound[0].port), timeout=30) as sock:
                yield server, loop, sock
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)  # again, if the test did
        finally:
            loop.call_soon_threadsafe(loop.stop)
            runner.join(30)
            loop.close()


def test_a_stop_answers_the_requests_in_flight_first(tmp_path) -> None:
    with in_process_server(tmp_path) as (server, loop, sock):
        answers: list = []
        parked = threading.Thread(target=lambda: answers.append(call(sock, _fetch(2000))))
        parked.start()
        # Wait until the server is inside the request, then stop it.
        asyncio.run_coroutine_threadsafe(_until_busy(server), loop).result(30)
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        parked.join(30)
    assert answers and answers[0].responses[0].partitions[0].error_code == 0


def test_a_connection_is_idle_once_each_answer_is_written(tmp_path) -> None:
    # A stop waits for busy connections: one wrongly left busy after its answer kept SIGTERM
    # waiting the whole grace period whenever an admin client was connected.
    with in_process_server(tmp_path) as (server, loop, sock):
        for _ in range(50):
            assert call(sock, _fetch(0)).responses
            asyncio.run_coroutine_threadsafe(_until_idle(server), loop).result(10)


async def _until_idle(server: KafkaServer) -> None:
    while not all(c.idle.is_set() for c in server._connections):
        await asyncio.sleep(0.001)


async def _until_busy(server: KafkaServer) -> None:
    while not any(not c.idle.is_set() for c in server._connections):
        await asyncio.sleep(0.001)


def test_sigterm_stops_the_server_cleanly(tmp_path) -> None:
    """Also with clients connected: their connections close with no error logged (a cancelled
    connection task made Python 3.11's asyncio log a traceback at every stop)."""
    server = KopServer(str(tmp_path / "store")).start()
    try:
        with connect(server) as sock, connect(server) as idle:
            assert call(sock, _fetch(0)).responses  # serving
            assert call(idle, _fetch(0)).responses
            assert server.stop() == 0
        log = server.whole_log()
        assert "kop serve: stopped" in log
        assert " ERROR " not in log and "Traceback" not in log, log
    finally:
        server.kill()


def test_kill_9_under_an_idempotent_producer_loses_and_duplicates_nothing(tmp_path) -> None:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    server = KopServer(root).start()
    acked: dict[bytes, int] = {}
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value()] = msg.offset()

    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    try:
        sent = [f"v{i:05}".encode() for i in range(3000)]
        for i, value in enumerate(sent):
            producer.produce("t", value=value, on_delivery=delivered)
            producer.poll(0)
            if i == 1500:
                server.kill()  # kill -9, with the next batches in flight
                server = KopServer(root, port=server.port).start()
        assert producer.flush(120) == 0 and not errors, errors
    finally:
        server.kill()
    with Broker(root) as b:
        stored = [r.value for r in b.fetch("t", 0, 0, max_records=10_000)]
    assert stored == sent, "every record once, in the order sent"
    assert all(stored[offset] == value for value, offset in acked.items())
    assert len(acked) == len(sent)


def test_kop_serve_applies_retention_and_compacts_in_the_background(tmp_path) -> None:
    """As a Kafka broker's log manager and log cleaner, with nobody running kop maintenance: an
    idle topic's records past retention.ms go, and a compacted topic keeps each key's latest value
    (of the ledgers no writer holds open), which a consumer reads across the emptied offsets."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("old", 1, config={"retention.ms": 500})
        # Any dirty ledger is due: with the default ratio, a compaction that came as v8's ledger was
        # sealed left that one ledger too small beside the compacted ones ever to be due.
        b.create_topic("table", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    conf = ["log.retention.check.interval.ms=100", "log.cleaner.backoff.ms=100", "managedLedgerMaxEntriesPerLedger=1"]
    with KopServer(root, conf) as server:
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
        for _ in range(3):
            p.produce("old", value=b"x", partition=0)
        for i in range(10):  # one entry, so one ledger, each
            p.produce("table", key=f"k{i % 2}".encode(), value=f"v{i}".encode(), partition=0)
            assert p.flush(30) == 0
        with Broker(root) as b:
            deadline = time.monotonic() + 30
            while b.list_offsets("old", 0, "earliest") != 3 or len(b.fetch("table", 0, 0, max_records=100)) != 3:
                assert time.monotonic() < deadline, "retention or compaction never happened"
                time.sleep(0.05)
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("table", 0, 0)])
        got: list[tuple[int, bytes]] = []
        while len(got) < 3:
            m = c.poll(30)
            assert m is not None and m.error() is None, m and m.error()
            got.append((m.offset(), m.value()))
        c.close()
        assert got == [(7, b"v7"), (8, b"v8"), (9, b"v9")]  # 9 in the open ledger: k1's 7 stays till it is sealed


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def test_kop_serve_merges_small_ledgers_and_removes_orphans_in_the_background(tmp_path) -> None:
    """What kop maintenance does, with nobody running it: the small ledgers of writers taking turns
    are merged (offsets unchanged, as a consumer reads them), and a file nothing refers to goes."""
    root = str(tmp_path / "store")
    turns = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    with Broker(root, conf=turns) as b:
        b.create_topic("t", 1)
        for i in range(12):
            b.produce("t", [Record(b"v%d" % i)], 0)
        data_dir = layout.data_dir(b.topic_name("t"), 0)
        orphan = layout.ledger_file(data_dir, 0xDEADBEEF)
        b.fileio.create(orphan).close()  # as a writer that died before referring to it leaves one
        before = len(b.admin.view("t", 0)[1].ledgers)
    conf = ["maintenanceIntervalSeconds=1", "maintenanceOrphanGraceMinutes=0", "managedLedgerMergeInPassing=0"]
    with KopServer(root, conf) as server:
        line = server.wait_for("maintenance: merged away")
        with Broker(root) as b:
            after = len(b.admin.view("t", 0)[1].ledgers)
        assert after < before and "removed 1 orphaned" in line, line
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("t", 0, 0)])
        got = []
        while len(got) < 12:
            m = c.poll(30)
            assert m is not None and m.error() is None, m and m.error()
            got.append((m.offset(), m.value()))
        c.close()
    assert got == [(i, b"v%d" % i) for i in range(12)]
    assert orphan not in _files(root)


def test_a_stop_abandons_a_running_compaction_and_loses_nothing(tmp_path) -> None:
    """As a Kafka broker's log cleaner at shutdown: SIGTERM during a long compaction stops it rather
    than waits for it (a service manager would kill -9 a stop that takes too long); the log is as it
    was, with no file left behind, and the next server compacts it."""
    root = str(tmp_path / "store")
    n = 300_000
    with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 20}) as b:
        # Any dirty ledger is due: with the default ratio, a compaction that came as v8's ledger was
        # sealed left that one ledger too small beside the compacted ones ever to be due.
        b.create_topic("table", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
        # Every tenth record updates one key, so that every batch keeps some of its records: the
        # slow path, each batch decoded and rebuilt in Python (seconds, where the stop takes milliseconds).
        for base in range(0, n, 20_000):
            b.produce("table", [Record(b"v%d" % i, key=b"k%d" % (i % 10 and i)) for i in range(base, base + 20_000)], 0)
        files = _files(os.path.join(root, layout.data_dir(b.topic_name("table"), 0)))
    with KopServer(root, ["log.cleaner.backoff.ms=100"]) as server:
        server.wait_for("compacting offsets")
        assert server.stop() == 0
        log = server.whole_log()
        assert "rewrite stopped" in log and "compacted," not in log, "the compaction ran to its end"
        assert "WARNING" not in log, log
    with Broker(root) as b:
        assert b.verify() == {}
        assert _files(os.path.join(root, layout.data_dir(b.topic_name("table"), 0))) == files
        assert b.list_offsets("table", 0, "latest") == n
        assert len(b.fetch("table", 0, 0, max_records=n)) == n
        b.clean_logs("table")
        kept = [b"v%d" % i for i in range(n) if i % 10 or i == n - 10]
        assert [r.value for r in b.fetch("table", 0, 0, max_records=n)] == kept


def test_a_topic_of_more_partitions_than_a_shells_open_files_limit_takes_every_record(tmp_path) -> None:
    """kop serve holds each written partition's open ledger open. Started with a soft limit below
    the partitions written (a shell's 1024 against a thousand partitions), it raises it to the hard
    limit, as the JVM does for a Kafka broker: every record is acknowledged and stored."""
    partitions, soft = 300, 200
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2 * partitions:
        pytest.skip("the hard limit on open files is below what the partitions need")
    with KopServer(str(tmp_path / "store"), open_files=soft) as server:
        with Broker(server.root) as b:
            b.create_topic("wide", partitions)
        failed: list[str] = []
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 20, "message.timeout.ms": 60000})
        for i in range(partitions):
            p.produce("wide", value=b"%d" % i, partition=i, on_delivery=lambda e, m: e and failed.append(str(e)))
        assert p.flush(90) == 0 and not failed, failed[:3]
    with Broker(server.root) as b:
        stored = [[r.value for r in b.fetch("wide", i, 0)] for i in range(partitions)]
    assert stored == [[b"%d" % i] for i in range(partitions)]


def _held(pid: int, root: str) -> set[str]:
    """The ledger files of ``root`` a process holds, open or mapped (deleted or not): a deleted
    file's disk space is freed only once no process holds it."""
    ledgers = os.path.join(os.path.realpath(root), "ledgers") + os.sep
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    with open(f"/proc/{pid}/maps") as maps:
        held.update(line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6)
    return {os.path.relpath(p.removesuffix(" (deleted)"), ledgers) for p in held if p.startswith(ledgers)}


def test_a_deleted_topics_files_are_let_go_whoever_deleted_it(tmp_path) -> None:
    """A server that wrote and read a topic held its ledger files open: deleted, through this
    server or by another process (the CLI, another server), their disk space stayed in use, and
    their descriptors counted against the open files limit, for as long as the server ran."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        for topic in ("here", "elsewhere", "kept"):
            b.create_topic(topic, 2)
    conf = ["file.delete.delay.ms=0", "log.cleaner.backoff.ms=100"]
    with KopServer(root, conf) as server:
        assert server.proc is not None
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
        for topic in ("here", "elsewhere", "kept"):
            for partition in range(2):
                p.produce(topic, value=b"x" * 1000, partition=partition)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(t, partition, 0) for t in ("here", "elsewhere", "kept") for partition in range(2)])
        for _ in range(6):
            m = c.poll(30)
            assert m is not None and m.error() is None, m and m.error()
        c.close()
        topics = {path.split("-partition-")[0] for path in _held(server.proc.pid, root)}
        assert {"public/default/here", "public/default/elsewhere", "public/default/kept"} <= topics

        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.delete_topics(["here"])["here"].result(30)
        assert not any(path.startswith("public/default/here-") for path in _held(server.proc.pid, root))

        with Broker(root, conf={"file.delete.delay.ms": 0}) as b:
            b.delete_topic("elsewhere")
        deadline = time.monotonic() + 30
        while any(path.startswith("public/default/elsewhere-") for path in _held(server.proc.pid, root)):
            assert time.monotonic() < deadline, "the server still holds the files of a topic deleted elsewhere"
            time.sleep(0.05)
        assert any(path.startswith("public/default/kept-") for path in _held(server.proc.pid, root))


def test_a_server_nobody_scrapes_keeps_no_counts_of_topics_deleted_elsewhere(tmp_path) -> None:
    """Its metrics (``webServicePort``) off, a server still counts what clients produce and fetch,
    per topic: those of a topic another process deleted go after the next retention pass, so that
    a server whose topics come and go does not keep every one it ever served."""
    with in_process_server(tmp_path, {"log.retention.check.interval.ms": 100}) as (server, _, _):
        assert server.ctx is not None
        bootstrap = f"{server.bound[0].host}:{server.bound[0].port}"
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for topic in ("t", "gone"):
            p.produce(topic, value=b"v", partition=0)
        assert p.flush(30) == 0
        assert server.ctx.metrics.counted_topics() == {"t", "gone"}
        with Broker(str(tmp_path / "store")) as b:
            b.delete_topic("gone")
        deadline = time.monotonic() + 30
        while server.ctx.metrics.counted_topics() != {"t"}:
            assert time.monotonic() < deadline, server.ctx.metrics.counted_topics()
            time.sleep(0.05)
