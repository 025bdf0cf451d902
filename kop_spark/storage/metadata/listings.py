"""Recent listings of an object store's directories, kept for probes that may take one a little
old (``MetadataStore.probe_many``'s ``within_s``), and brought up to date by the writes made
through the same store: a listing is a LIST request, billed, and a look after each of the
server's own appends listed again."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

# An object as a listing gives it: its "path", and what identifies its content ("e_tag", "version").
Listed = Mapping[str, Any]

# Listings older than this go when their directory is listed again: a server's consumers move
# between topics, and the listings of the keys they no longer look at would stay.
LISTINGS_KEPT_S = 300.0


class _Listing(NamedTuple):
    taken_at: float  # time.monotonic()
    first: str
    last: str
    objects: list[Listed]

    def covers(self, first: str, last: str, within_s: float, now: float) -> bool:
        return now - self.taken_at <= within_s and self.first <= first and last <= self.last

    def with_writes(self, writes: Iterable[tuple[str, Listed]]) -> _Listing:
        """This listing with the objects written since in its range as they were written."""
        written = {path: obj for path, obj in writes if self.first <= path <= self.last}
        if not written:
            return self
        kept = [obj for obj in self.objects if obj["path"] not in written]
        return self._replace(objects=kept + list(written.values()))


class RecentListings:
    """Recent listings of each directory: a consumer's parked fetch looks at its partitions every
    50 ms, a LIST request each on an object store, and each idle consumer of a topic listed its
    partitions apart. Such probes of the same keys list in turn, so that one waits for a listing
    under way rather than make its own beside it: the members of a group look at about the same
    moments. A write through the store patches the directory's listings with the object it wrote,
    as a listing would now show it, so a look after it sees it, and one under way when the write
    ends is patched with it too: the server's own appends need no listing again. A write whose
    object the store did not identify (no e-tag) drops them, as it cannot be patched in."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._kept: dict[str, dict[tuple[str, str], _Listing]] = {}  # by directory, by first and last
        self._writes: dict[str, int] = {}  # writes made here, by directory
        # The last object written here at each path, by directory, with the count of the
        # directory's writes it made (None: not identified): a listing under way takes them in.
        self._written: dict[str, dict[str, tuple[int, Listed | None]]] = {}
        self._turns: dict[tuple[str, str, str], _Turn] = {}  # of probes of the same keys, while any waits

    def listed(
        self, directory: str, first: str, last: str, within_s: float, listing: Callable[[], list[Listed]]
    ) -> list[Listed]:
        """The objects of ``directory`` from ``first`` to ``last``: those of a listing of them
        taken within ``within_s``, or of ``listing()`` now."""
        if within_s <= 0:
            return self._list(directory, first, last, listing)
        asked_at = self._monotonic()  # a listing begun within_s before this serves, however long it takes
        with self._turn(directory, first, last):
            with self._lock:
                kept = list(self._kept.get(directory, {}).values())
            found = next((k for k in kept if k.covers(first, last, within_s, asked_at)), None)
            return found.objects if found is not None else self._list(directory, first, last, listing)

    @contextlib.contextmanager
    def _turn(self, directory: str, first: str, last: str) -> Iterator[None]:
        key = (directory, first, last)
        with self._lock:
            turn = self._turns.setdefault(key, _Turn(threading.Lock()))
            turn.users += 1
        try:
            with turn.lock:
                yield
        finally:
            with self._lock:
                turn.users -= 1
                if not turn.users:
                    del self._turns[key]

    def _list(self, directory: str, first: str, last: str, listing: Callable[[], list[Listed]]) -> list[Listed]:
        now = self._monotonic()
        with self._lock:
            began = self._writes.get(directory, 0)
        taken = _Listing(now, first, last, listing())
        with self._lock:
            since = [(path, obj) for path, (n, obj) in self._written.get(directory, {}).items() if n > began]
            if any(obj is None for _, obj in since):
                return taken.objects  # a write it may not show, and that cannot be patched in
            taken = taken.with_writes((path, obj) for path, obj in since if obj is not None)
            kept = self._kept.setdefault(directory, {})
            for stale in [r for r, k in kept.items() if now - k.taken_at > LISTINGS_KEPT_S]:
                del kept[stale]
            kept[(first, last)] = taken
        return taken.objects

    def wrote(self, path: str, obj: Listed | None) -> None:
        """An object this store wrote at ``path``, as a listing would show it (None: unknown)."""
        directory = path.rpartition("/")[0]
        with self._lock:
            n = self._writes[directory] = self._writes.get(directory, 0) + 1
            self._written.setdefault(directory, {})[path] = (n, obj)
            kept = self._kept.pop(directory, None)
            if obj is not None and kept:
                self._kept[directory] = {r: k.with_writes([(path, obj)]) for r, k in kept.items()}


@dataclass(slots=True)
class _Turn:
    lock: threading.Lock
    users: int = 0  # probes holding or waiting for the lock
