"""Kafka's messages, from ``kio`` (generated from Kafka's own JSON schemas): a request frame is
decoded with the header and body classes of its API key and version, a response encoded with its
own, so no message layout is written by hand here.

Each version of a message is its own set of classes in kio. Handlers build responses with
``make``, which keeps only the fields the class of that version has: one handler serves every
version, as Kafka's generated ``*Data`` classes let its handlers do."""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from types import ModuleType
from typing import Any, NamedTuple

from kio.index import load_payload_module, load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32


class InvalidRequestError(Exception):
    """A request that cannot be decoded: the connection that sent it is closed."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""  # the peer's address, from the connection
    session: Any = None  # the connection's Session: who the client is, where its login stands


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """API key, version and correlation id: the first fields of every request header version."""
    if len(frame) < 8:
        raise InvalidRequestError(f"a request of {len(frame)} bytes is shorter than any request header")
    key, version, correlation_id = struct.unpack_from(">hhi", frame)
    return key, version, correlation_id


@functools.cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@functools.cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


@functools.cache
def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@functools.cache
def response_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


def decode_request(frame: bytes | memoryview, api_key: int, version: int) -> tuple[RequestHeader, Any]:
    """The header and body of a request of a version this server supports."""
    cls = request_class(api_key, version)
    try:
        header, at = _reader(cls.__header_schema__)(frame, 0)
        body, _ = _reader(cls)(frame, at)
    except Exception as e:  # kio reports short or malformed input as several exception types
        raise InvalidRequestError(f"cannot decode {cls.__name__} v{version}: {e}") from e
    # Bytes after the request are ignored, as Kafka's brokers ignore them (librdkafka 2.x sends some).
    return RequestHeader(api_key, version, header.correlation_id, getattr(header, "client_id", None)), body


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A response with its header, size-prefixed, ready for the socket."""
    cls: Any = type(response)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_cls = cls.__header_schema__
    _writer(header_cls)(out, header_cls(correlation_id=i32(correlation_id)))
    _writer(cls)(out, response)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def _plain_strings(cls: type) -> frozenset[str]:
    """Fields that are strings in this version and may not be null (they may be in another)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.type is str)


def make(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` (one version of a message part) from the fields it has among
    ``values``; None for a string this version cannot make null is sent empty, as Kafka does."""
    names, strings = _field_names(cls), _plain_strings(cls)
    return cls(**{k: "" if v is None and k in strings else v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)
