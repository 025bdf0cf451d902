"""What a network metadata store learnt of its keys, kept while the server would tell of a change.

ZooKeeper and etcd both tell a client of changes to the keys it watches, as Pulsar's metadata
cache uses them: a look at a watched, unchanged key then asks the server nothing. A parked fetch
looks at its partitions several times a second, a produce reads its topic, and a Spark stream
looks at its topics (and lists them, subscribed by pattern) at every trigger.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from ..metadata_store import UNPROBED, Unprobed

Mark = tuple[int, int] | None


class Watches:
    """Keys' probe tokens and listings, each kept until the server tells of its next change, a
    write through this process changes it, or the watch is away (what changed meanwhile may go
    untold).

    An answer is kept only if nothing was told of its key between the request and the answer
    being kept: a client hands events to a thread of its own, which may run first. So a request
    takes a ``mark`` before it is sent and ``keep``s its answer with it. While the watch is not
    standing (``away(standing=False)`` until ``standing()``), no mark keeps anything."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, Hashable | None] = {}
        self._listings: dict[str, Any] = {}
        self._told: dict[str, int] = {}  # changes told of (or made here), each key's
        self._away = 0  # times the watch was away
        self._standing = True
        self._looked_at: set[str] = set()

    def mark(self, path: str) -> Mark:
        """Taken before a request whose answer is kept for ``path``."""
        with self._lock:
            return self._mark(path)

    def _mark(self, path: str) -> Mark:
        return (self._away, self._told.get(path, 0)) if self._standing else None

    def keep(self, path: str, mark: Mark, token: Hashable | None) -> None:
        with self._lock:
            if mark is not None and mark == self._mark(path):  # nothing told of it since the request
                self._tokens[path] = token

    def look(self, path: str) -> Hashable | Unprobed | None:
        """The token kept for ``path`` (UNPROBED if none); reads of it are kept from now on."""
        with self._lock:
            self._looked_at.add(path)
            return self._tokens.get(path, UNPROBED)

    def looked_at(self, path: str) -> bool:
        with self._lock:
            return path in self._looked_at

    def listing(self, path: str) -> Any | None:
        """What was listed under ``path``, while unchanged."""
        with self._lock:
            return self._listings.get(path)

    def keep_listing(self, path: str, mark: Mark, listing: Any) -> None:
        with self._lock:
            if mark is not None and mark == self._mark(path):
                self._listings[path] = listing

    def changed(self, path: str) -> None:
        with self._lock:
            self._told[path] = self._told.get(path, 0) + 1
            self._tokens.pop(path, None)
            self._listings.pop(path, None)

    def written(self, path: str, made: bool) -> None:
        """A write of ``path``, told by the server or made through this process; a key ``made``
        (or removed) changes its parents' listings too."""
        for changed in [path, *(_parents(path) if made else ())]:
            self.changed(changed)

    def away(self, standing: bool = True) -> None:
        """Forget everything kept; ``standing=False``: and keep nothing until ``standing()``."""
        with self._lock:
            self._away += 1
            self._standing = standing
            self._tokens.clear()
            self._listings.clear()

    def standing(self) -> None:
        with self._lock:
            self._standing = True


def _parents(path: str) -> list[str]:
    """``a/b/c`` -> [``a/b``, ``a``, ``""``], ``/a/b`` -> [``/a``, ``""``]: the listings above it."""
    parts = path.split("/")
    return ["/".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)] + ([""] if parts[0] else [])
