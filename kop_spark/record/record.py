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

    def __post_init__(self) -> None:
        # Checked here, at the call, rather than deep in the codec where the message names nothing.
        for name in ("value", "key"):
            data = getattr(self, name)
            if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"Record {name} must be bytes or None, not {type(data).__name__} (encode a str first)")
        if self.timestamp_ms is not None and (
            not isinstance(self.timestamp_ms, int) or isinstance(self.timestamp_ms, bool)
        ):
            raise TypeError(
                f"Record timestamp_ms must be an int (ms since the epoch) or None, not {type(self.timestamp_ms).__name__}"
            )
        for header in self.headers:
            if (
                not isinstance(header, tuple)
                or len(header) != 2
                or not isinstance(header[0], str)
                or not (header[1] is None or isinstance(header[1], (bytes, bytearray, memoryview)))
            ):
                raise TypeError(f"Record headers must be (str, bytes or None) pairs, got {header!r}")


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
