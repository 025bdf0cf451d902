"""What the coordinator reads of Kafka's consumer protocol: the topics of a member's
subscription and the partitions of its assignment (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, a version number then the body). The group's protocol is the
clients' business, so what does not parse is read as nothing, never refused."""

from __future__ import annotations

from typing import Any

from kio.index import load_entity_schema
from kio.serial import entity_reader
from kio.static.constants import EntityType


def _read(name: str, data: bytes) -> Any:
    if len(data) < 2:
        return None
    try:
        version = min(int.from_bytes(data[:2], "big", signed=True), 3)
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
