"""What the coordinator reads of Kafka's consumer protocol: the topics of a member's
subscription and the partitions it owns and is assigned (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, a version number then the body). The group's protocol is the
clients' business, so what does not parse is read as nothing, never refused. The coordinator
writes an assignment only for a classic member of a consumer-protocol group, which the server
assigns (KIP-848's online migration)."""

from __future__ import annotations

import importlib
import io
from typing import Any, NamedTuple

from kio.index import load_entity_schema
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

_NEWEST = 3  # the newest version of either message kio knows; later ones only add fields


class Subscription(NamedTuple):
    version: int
    topics: tuple[str, ...]
    owned: frozenset[tuple[str, int]]  # the partitions the member owns as it joins (v1+)


def _read(name: str, data: bytes) -> tuple[int, Any] | None:
    """The version a message was written in (at most the newest kio knows) and its body."""
    if len(data) < 2:
        return None
    try:
        version = min(int.from_bytes(data[:2], "big", signed=True), _NEWEST)
        cls: Any = load_entity_schema(name, version, EntityType.data)
        value, _ = entity_reader(cls)(data, 2)
        return version, value
    except Exception:
        return None


def _write(name: str, version: int, **fields: Any) -> bytes:
    cls: Any = load_entity_schema(name, version, EntityType.data)
    out = io.BytesIO()
    out.write(version.to_bytes(2, "big"))
    entity_writer(cls)(out, cls(**fields))
    return out.getvalue()


def _by_topic(name: str, version: int, partitions: frozenset[tuple[str, int]]) -> tuple[Any, ...]:
    """``partitions`` as the message's TopicPartition entries, by topic."""
    cls: Any = load_entity_schema(name, version, EntityType.data)
    entry = importlib.import_module(cls.__module__).TopicPartition
    topics = sorted({t for t, _ in partitions})
    return tuple(
        entry(topic=TopicName(t), partitions=tuple(sorted(p for name, p in partitions if name == t))) for t in topics
    )


def subscription(metadata: bytes) -> Subscription:
    read = _read("consumer_protocol_subscription", metadata)
    if read is None:
        return Subscription(0, (), frozenset())
    version, value = read
    owned = getattr(value, "owned_partitions", ())
    return Subscription(version, tuple(value.topics), frozenset((t.topic, p) for t in owned for p in t.partitions))


def assigned_partitions(assignment: bytes) -> tuple[tuple[str, int], ...]:
    read = _read("consumer_protocol_assignment", assignment)
    if read is None:
        return ()
    return tuple((t.topic, p) for t in read[1].assigned_partitions for p in t.partitions)


def encode_subscription(topics: tuple[str, ...], owned: frozenset[tuple[str, int]], version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription, as a classic member joins with (v1+: with what it owns)."""
    name = "consumer_protocol_subscription"
    owned_partitions = {"owned_partitions": _by_topic(name, version, owned)} if version >= 1 else {}
    return _write(name, version, topics=topics, user_data=None, **owned_partitions)


def encode_assignment(partitions: frozenset[tuple[str, int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions``, in the version the member subscribed with."""
    name = "consumer_protocol_assignment"
    return _write(name, version, assigned_partitions=_by_topic(name, version, partitions), user_data=None)
