"""The records users produce and consume."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

Header = tuple[str, bytes | None]


class TimestampType(enum.IntEnum):
    """Kafka's timestamp types; the numbers are those of Spark's ``timestampType`` column."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True)
class Record:
    """A record to produce. ``timestamp_ms=None`` means now, as in a Kafka producer."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] = field(default_factory=tuple)


class BatchRecord(NamedTuple):
    """One record as decoded from a batch, with its absolute offset and effective timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class ConsumerRecord(NamedTuple):
    """A record as fetched from a partition."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
