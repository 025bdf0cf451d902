"""Many connections at once: hundreds of idle clients cost nothing but their sockets, and a
consumer that stops reading its answers holds up only its own connection, while other clients
produce and consume as usual."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from kop_spark import Broker, Record

from .kafka_wire import call, connect, wire_request
from .kop_server import KopServer

IDLE = 300
MB = 1 << 20


def _api_versions_ok(sock: socket.socket) -> bool:
    answer = call(sock, wire_request(ApiVersionsRequest, 3, client_software_name="idle", client_software_version="1"))
    return answer.error_code == 0


def _fetch_frame(correlation_id: int) -> bytes:
    request = wire_request(
        FetchRequest,
        11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=64 * MB,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 * MB}]}],
        forgotten_topics_data=[],
        rack_id="",
    )
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
