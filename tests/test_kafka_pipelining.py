"""A connection's produce requests are pipelined into the group commit: while one is being
written, the server takes the next ones (their batches queued behind it, in order) and writes
them together, answering each in the order it came."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.producer import ProduceRequest

from kop_spark import Broker, Record
from kop_spark.kafka.server import KafkaServer
from kop_spark.record import build_record_batch

from .kafka_wire import read_exactly, response_class, wire_request
from .test_group_commit import _HeldCas


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[Broker, tuple[str, int]]]:
    with Broker(str(tmp_path / "store"), {"managedLedgerMergeInPassing": 0}) as b:
        b.create_topic("t", 1)
        loop = asyncio.new_event_loop()
        server = KafkaServer(b, "PLAINTEXT://127.0.0.1:0")
        loop.run_until_complete(server.start())
        runner = threading.Thread(target=loop.run_forever)
        runner.start()
        try:
            yield b, (server.bound[0].host, server.bound[0].port)
        finally:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
            runner.join(30)
            loop.close()


def _produce(i: int) -> tuple[object, bytes]:
    request = wire_request(
        ProduceRequest,
        9,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            {"name": "t", "partition_data": [{"index": 0, "records": build_record_batch([Record(f"r{i}".encode())])}]}
        ],
    )
    request.with_header(i, "pipelined")
    frame = bytes(request.encode(header=True))
    return request, struct.pack(">i", len(frame)) + frame


def test_pipelined_produces_share_one_write_and_are_answered_in_order(served, monkeypatch) -> None:
    b, address = served
    ml = b.managed_ledger("t", 0)
    held = _HeldCas(ml, monkeypatch)
    before = b.view("t", 0).version
    requests = [_produce(i) for i in range(5)]
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(requests[0][1])
        assert held.inside.wait(30)  # the first is being confirmed
        sock.sendall(b"".join(frame for _, frame in requests[1:]))
        deadline = time.monotonic() + 30
        while len(ml._appends._waiting) < 4:  # the others are taken and queued behind it
            assert time.monotonic() < deadline, "the server did not take the requests sent after the first"
        held.release.set()
        answers = []
        for request, _ in requests:
            (size,) = struct.unpack(">i", read_exactly(sock, 4))
            answers.append(response_class(request).decode(read_exactly(sock, size), header=True))
    assert [a.header.correlation_id for a in answers] == list(range(5))
    assert [a.responses[0].partition_responses[0].base_offset for a in answers] == list(range(5))
    assert b.view("t", 0).version == before + 2, "the four queued produces were one write and one CAS"
    assert [r.value for r in b.fetch("t", 0, 0)] == [f"r{i}".encode() for i in range(5)]
