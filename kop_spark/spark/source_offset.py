"""The source offset of a ``kop`` stream: Spark's Kafka source offset, ``{"topic": {"partition":
next_offset}}``, with keys in sorted order, because Spark compares offsets as JSON strings."""

from __future__ import annotations

import json

from .options import PartitionOffsets


def to_json(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    """``{"topic": {"partition": offset}}`` with keys in sorted (JSON-canonical) order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, p), off in offsets.items():
        nested.setdefault(topic, {})[str(p)] = off
    parsed: dict[str, dict[str, int]] = json.loads(json.dumps(nested, sort_keys=True))
    return parsed


def from_json(value: dict[str, dict[str, int]]) -> PartitionOffsets:
    return {(topic, int(p)): int(off) for topic, parts in value.items() for p, off in parts.items()}
