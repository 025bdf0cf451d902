"""Many connections at once: hundreds of idle clients cost nothing but their sockets, and a
consumer that stops reading its answers holds up only its own connection, while other clients
produce and consume as usual. A connection idle for ``connections.max.idle.ms`` is closed."""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest

from kop_spark import Broker, Record
from kop_spark.record import build_record_batch

from .kafka_wire import call, connect, fetch_request, read_exactly, response_class, wire_request
from .kop_server import KopServer

IDLE = 300
MB = 1 << 20


def _api_versions_ok(sock: socket.socket) -> bool:
    answer = call(sock, wire_request(ApiVersionsRequest, 3, client_software_name="idle", client_software_version="1"))
    return answer.error_code == 0


def _fetch_frame(correlation_id: int) -> bytes:
    request = fetch_request("big", max_bytes=64 * MB)
    request.with_header(correlation_id, "stalled")
    frame = bytes(request.encode(header=True))
    return struct.pack(">i", len(frame)) + frame


def test_idle_connections_and_a_consumer_that_stopped_reading_hold_up_no_one(tmp_path) -> None:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("big", 1)
        b.create_topic("t", 1)
        for _ in range(16):  # 16 MB: more than the stalled client's socket buffers take
            b.produce("big", [Record(b"x" * 1000) for _ in range(1000)], 0)
    with KopServer(root) as server:
        idle = [connect(server) for _ in range(IDLE)]
        assert all(_api_versions_ok(s) for s in idle)
        stalled = connect(server)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        stalled.sendall(b"".join(_fetch_frame(i) for i in range(4)))  # 64 MB of answers, never read

        producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "acks": "all"})
        for i in range(200):
            producer.produce("t", f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        got = []
        while len(got) < 200:
            m = consumer.poll(30)
            assert m is not None and m.error() is None, m and m.error()
            got.append(m.value())
        consumer.close()
        assert got == [f"v{i}".encode() for i in range(200)]

        assert all(_api_versions_ok(s) for s in idle[:: IDLE // 10])  # still served
        for s in (*idle, stalled):
            s.close()
        probe = connect(server)
        assert _api_versions_ok(probe)
        probe.close()
        assert server.proc is not None and server.proc.poll() is None


def _closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes ``sock`` (which sends it nothing more)."""
    start = time.monotonic()
    sock.settimeout(60)
    assert sock.recv(1) == b""
    return time.monotonic() - start


def test_a_connection_idle_for_connections_max_idle_ms_is_closed_and_only_such_a_one(tmp_path) -> None:
    """As a Kafka broker: a client gone without a FIN, or stuck half way through a request, holds
    its socket no longer than ``connections.max.idle.ms``; one that keeps asking, or waits for a
    long fetch, keeps its connection."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.create_topic("u", 1)  # written by acks=0 produces, away from the fetch on t
    idle_s = 2.5
    with KopServer(root, [f"connections.max.idle.ms={int(idle_s * 1000)}"]) as server:
        silent, partial, busy, waiting, fire = (connect(server) for _ in range(5))
        start = time.monotonic()
        assert _api_versions_ok(silent)
        partial.sendall(struct.pack(">i", 64) + b"\x00\x12")  # a request of 64 bytes, 2 sent
        # nothing comes: answered, empty, when its wait ends
        fetch = fetch_request("t", max_wait_ms=int(2.5 * idle_s * 1000), min_bytes=1)
        fetch.with_header(7, "kop-test")
        frame = bytes(fetch.encode(header=True))
        waiting.sendall(struct.pack(">i", len(frame)) + frame)  # answered once the wait ends
        for fired in range(7):  # meanwhile, a request every half idle period, to 3 periods
            assert _api_versions_ok(busy)
            fire.sendall(_unanswered_produce(fired))  # acks=0: only requests come, no answer goes
            time.sleep(max(0.0, start + (fired + 1) * idle_s / 2 - time.monotonic()) if fired < 6 else 0)
        (size,) = struct.unpack(">i", read_exactly(waiting, 4))
        answer = response_class(fetch).decode(read_exactly(waiting, size), header=True).to_dict()
        assert answer["error_code"] == 0 and answer["responses"][0]["partitions"][0]["error_code"] == 0, answer
        # Answered at 2.5 periods, so idle until 3.5; at 3.1 it is still open (counted from its
        # request, it would have been closed at 3).
        time.sleep(max(0.0, start + 3.1 * idle_s - time.monotonic()))
        assert _api_versions_ok(busy) and _api_versions_ok(waiting) and _api_versions_ok(fire)
        assert all(_closed_after(s) >= 0 for s in (silent, partial))
        closed = server.wait_for("idle for connections.max.idle.ms", 30)
        assert "closing the connection from 127.0.0.1" in closed
        quiet = connect(server)
        assert _closed_after(quiet) >= idle_s * 0.9  # not before its time (the watchdog's clock is monotonic)
        for s in (silent, partial, busy, waiting, fire, quiet):
            s.close()
    with Broker(root) as b:
        assert b.list_offsets("u", 0, "latest") == 7


def _unanswered_produce(i: int) -> bytes:
    request = wire_request(
        ProduceRequest,
        9,
        acks=0,
        timeout_ms=30_000,
        topic_data=[{"name": "u", "partition_data": [{"index": 0, "records": build_record_batch([Record(b"r")])}]}],
    )
    request.with_header(i, "acks-0")
    frame = bytes(request.encode(header=True))
    return struct.pack(">i", len(frame)) + frame
