"""Opening what a reader will ask for next before it asks: a Spark task reading a partition's
small ledgers on an object store waited a round trip for each, in turn, where the next ones could
have been on their way (the tasks of a stream read the newest ledgers, the smallest)."""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future
from typing import Generic, TypeVar

from .at_once import start

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadAhead(Generic[K, V]):
    """``get(key)`` is ``open(key)``, taken from up to ``window`` opened ahead of their turn in
    the order ``expect`` named. A key not expected next (a replanned read) is opened when asked
    for; with a window of 1 every key is."""

    def __init__(self, open_: Callable[[K], V], window: int):
        self._open = open_
        self._window = window
        self._expected: Iterator[K] = iter(())
        self._opening: deque[tuple[K, Future[V]]] = deque()

    def expect(self, keys: Iterable[K]) -> None:
        """The keys to be asked for next, in order, over those expected before."""
        self.close()
        if self._window > 1:
            self._expected = iter(keys)
            self._top_up()

    def get(self, key: K) -> V:
        skipped = next((i for i, (k, _) in enumerate(self._opening) if k == key), None)
        if skipped is None:
            return self._open(key)
        for _ in range(skipped):  # asked for past them: they will not be
            self._opening.popleft()[1].cancel()
        opening = self._opening.popleft()[1]
        try:
            return opening.result()
        finally:  # then the next: no more than the window in flight, this one among them
            self._top_up()

    def close(self) -> None:
        """Drop what was opened ahead and not asked for (a reader stopped early, or replanned)."""
        while self._opening:
            self._opening.popleft()[1].cancel()
        self._expected = iter(())

    def _top_up(self) -> None:
        for key in itertools.islice(self._expected, max(self._window - len(self._opening), 0)):
            self._opening.append((key, start(functools.partial(self._open, key))))
