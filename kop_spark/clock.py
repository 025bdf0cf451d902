"""The one clock: wall time in milliseconds, as Kafka's ``Time``, injectable so that tests of
retention, expiry and trigger delays move time forward instead of waiting for it."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (tests). It starts at ``now_ms``, by default the wall
    clock's time, so that records a producer stamps with the time it was made fall within the
    broker's bounds (``message.timestamp.after.max.ms``)."""

    def __init__(self, now_ms: int | None = None):
        self._now = SYSTEM_CLOCK.now_ms() if now_ms is None else now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms


SYSTEM_CLOCK: Clock = SystemClock()


def now_ms() -> int:
    """The system clock's time, for code with no clock of its own to ask."""
    return SYSTEM_CLOCK.now_ms()
