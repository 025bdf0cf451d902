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


def _read(name: str, data: bytes) -> Any:
    if len(data) < 2:
        return None
    try:
        version = min(int.from_bytes(data[:2], "big", signed=True), _NEWEST)
        cls: Any = load_entity_schema(name, version, EntityType.data)
        value, _ = entity_reader(cls)(data, 2)
        return value
    except Exception:
        return None


def subscription_topics(metadata: bytes) -> list[str]:
    subscription = _read("consumer_protocol_subscription", metadata)
    return list(subscription.topics) if subscription is not None else []


def assigned_partitions(assignment: bytes) -> tuple[tuple[str, int], ...]:
    value = _read("consumer_protocol_assignment", assignment)
    if value is None:
        return ()
    return tuple((t.topic, p) for t in value.assigned_partitions for p in t.partitions)


def subscription(metadata: bytes) -> Subscription:
    value = _read("consumer_protocol_subscription", metadata)
    if value is None:
        return Subscription(0, (), frozenset())
    owned = getattr(value, "owned_partitions", ())
    version = min(int.from_bytes(metadata[:2], "big", signed=True), _NEWEST)
    return Subscription(version, tuple(value.topics), frozenset((t.topic, p) for t in owned for p in t.partitions))


def encode_assignment(partitions: frozenset[tuple[str, int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions``, in the version the member subscribed with."""
    cls: Any = load_entity_schema("consumer_protocol_assignment", version, EntityType.data)
    topic_partition = importlib.import_module(cls.__module__).TopicPartition
    topics = sorted({t for t, _ in partitions})
    value = cls(
        assigned_partitions=tuple(
            topic_partition(topic=TopicName(t), partitions=tuple(sorted(p for name, p in partitions if name == t)))
            for t in topics
        ),
        user_data=None,
    )
    out = io.BytesIO()
    out.write(version.to_bytes(2, "big"))
    entity_writer(cls)(out, value)
    return out.getvalue()
