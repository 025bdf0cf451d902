"""Speaking the Kafka protocol by hand in tests: kafka-python's message classes (built from plain
dicts) over a socket to a ``kop serve``."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kafka.protocol import admin, consumer, metadata, producer, sasl
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from .kop_server import KopServer


def wire_request(cls: Any, version: int, **values: Any) -> Any:
    return cls[version](**build(cls._struct, values))


def build(struct: Any, values: dict[str, Any]) -> dict[str, Any]:
    """kafka-python's nested message objects from plain dicts (its constructors take the objects)."""
    out = {}
    for name, value in values.items():
        inner = getattr(struct.fields[name], "array_of", None)
        if isinstance(value, list) and value and isinstance(value[0], dict):
            value = [inner.data_class(**build(inner, v)) for v in value]
        out[name] = value
    return out


def fetch_request(
    topic: str,
    partition: int = 0,
    offset: int = 0,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 1 << 20,
) -> Any:
    """A FETCH (v11) of one partition, ``max_bytes`` from it and in all, with no fetch session."""
    wanted = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}
    return wire_request(
        consumer.FetchRequest,
        11,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[{"topic": topic, "partitions": [wanted]}],
        forgotten_topics_data=[],
        rack_id="",
    )


def connect(server: KopServer) -> socket.socket:
    host, port = server.bootstrap.split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def exchange(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the server")
        out += chunk
    return out


def response_class(request: Any) -> Any:
    """kafka-python's response class of a request of one version."""
    name = type(request).__name__.split("_")[0].replace("Request", "Response")
    return next(getattr(m, name) for m in (admin, consumer, metadata, producer, sasl) if hasattr(m, name))[
        request.API_VERSION
    ]


def call(sock: socket.socket, request: Any, correlation_id: int = 1) -> Any:
    """Send a kafka-python request, return kafka-python's reading of the answer."""
    request.with_header(correlation_id, "kop-test")
    return response_class(request).decode(exchange(sock, bytes(request.encode(header=True))), header=True)


def kio_call(sock: socket.socket, request: Any) -> Any:
    """Send a kio request (for APIs kafka-python has no codec of), return kio's reading of the
    answer: the codec kop serve itself uses, so only for what real clients check besides."""
    key, version = int(request.__api_key__), int(request.__version__)
    header = request.__header_schema__(
        request_api_key=key, request_api_version=version, correlation_id=1, client_id="kop-test"
    )
    out = io.BytesIO()
    entity_writer(request.__header_schema__)(out, header)
    entity_writer(type(request))(out, request)
    answer = exchange(sock, out.getvalue())
    cls = load_response_schema(key, version)
    _, offset = entity_reader(cls.__header_schema__)(answer, 0)
    return entity_reader(cls)(answer, offset)[0]
