"""The metadata store as one object per key on an object store, changed by conditional writes.

A key is the object ``<prefix>/<key>.json`` holding ``{"version": n, "value": ...}``. Version 1 is
written only if no object exists (S3 and Azure: ``If-None-Match: *``; GCS: generation 0); version
n+1 only over the object of version n (S3 and Azure: ``If-Match`` its e-tag; GCS: its generation,
``x-goog-if-generation-match``), so of writers that read the same version exactly one wins. The
version is kept inside the value because an e-tag is no version: on S3 it is a hash of the
content, and the same content written twice has the same one. With the version inside, no two
versions of a key have the same content, so an e-tag, once replaced, never comes back. A deletion
writes ``null`` as the next version. Nothing is ever pruned: the store keeps one object per key,
replaced whole.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import obstore

from ...errors import BadVersionError, MetadataStoreUnavailableError, StorageError
from ..metadata_store import MetadataStore, Versioned, check_key, decode_value, encode_value
from ..object_store import CONDITION_FAILED, MISSING, ObjectLocation, open_store, refused

if TYPE_CHECKING:
    from obstore import ObjectMeta, UpdateVersion


class ObjectMetadataStore(MetadataStore):
    requests_billed = True
    probe_max_age_s = math.inf  # a probe is the e-tag a listing gives: every put stores a new version in it

    def __init__(self, location: ObjectLocation, options: Mapping[str, str], *, timeout_s: float):
        self.location = location
        self._store = open_store(location, options, timeout_s)
        self._timeout = timeout_s
        # The object (e-tag and generation: each store checks one of them) of the version of each
        # key last read or written here: a compare-and-set against that version needs it, and
        # re-reading for it would double every write's cost.
        self._objects: dict[str, tuple[int, UpdateVersion]] = {}
        self._lock = threading.Lock()
        self._listings = _RecentListings()

    def _call(self, action: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self._store, *args, **kwargs)
        except MISSING + CONDITION_FAILED:
            raise
        except Exception as e:  # obstore's own errors
            text, answered = refused(e)
            if answered:
                raise StorageError(f"cannot {action} metadata {key} on {self.location.display}: {text}") from e
            raise MetadataStoreUnavailableError(  # no answer, a timeout, or the store failing
                f"cannot {action} metadata {key} on {self.location.display} within "
                f"{self._timeout:g} s (metadataStoreOperationTimeoutSeconds): {text}"
            ) from e

    def _path(self, key: str) -> str:
        return "/".join(check_key(key)) + ".json"

    def _read(self, key: str) -> tuple[Versioned, UpdateVersion | None]:
        try:
            result = self._call("read", key, obstore.get, self._path(key))
            data = bytes(self._call("read", key, lambda _s: result.bytes()))
        except MISSING:
            return Versioned(None, 0), None
        stored = decode_value(data, f"{key} on {self.location.display}")
        if not isinstance(stored, dict) or not isinstance(stored.get("version"), int):
            raise StorageError(f"metadata {key} on {self.location.display} is not a versioned value")
        value = stored.get("value")
        return Versioned(value if isinstance(value, dict) else None, stored["version"]), _identity(result.meta)

    def get(self, key: str) -> Versioned:
        current, obj = self._read(key)
        if obj is not None:
            with self._lock:
                self._objects[key] = (current.version, obj)
        return current

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        new_version = expected_version + 1
        data = encode_value({"version": new_version, "value": value})
        try:
            if expected_version == 0:
                result = self._call("create", key, obstore.put, self._path(key), data, mode="create")
            else:
                over = self._object_at(key, expected_version)
                result = self._call("write", key, obstore.put, self._path(key), data, mode=over)
        except MISSING:  # metadata objects are never deleted: no bucket
            raise StorageError(f"cannot write metadata {key}: {self.location.display} does not exist") from None
        except CONDITION_FAILED:
            raise BadVersionError(f"metadata {key} is past version {expected_version}") from None
        self._listings.wrote(self._path(key).rpartition("/")[0])
        written = _identity(result)
        with self._lock:
            if written is not None:
                self._objects[key] = (new_version, written)
            else:
                self._objects.pop(key, None)
        return new_version

    def _object_at(self, key: str, version: int) -> UpdateVersion:
        with self._lock:
            known = self._objects.get(key)
        if known is not None and known[0] == version:
            return known[1]
        current, obj = self._read(key)
        if current.version != version or obj is None:
            raise BadVersionError(f"metadata {key} is past version {version}")
        return obj

    def probe_many(self, keys: Sequence[str], within_s: float = 0.0) -> dict[str, Hashable | None]:
        """Each key's object's identity (None if it has none, or no object), from listings: a
        request for up to a thousand keys of one directory, where reading each key cost a fetch
        of a hundred partitions a hundred requests. A directory is listed from its first key asked
        to its last, as a topic's partitions lie together. An identity never comes back once
        replaced: the version is inside the value (see the module). A listing taken here within
        ``within_s``, with no write here since, stands in for a new one."""
        out: dict[str, Hashable | None] = dict.fromkeys(keys)
        by_dir: dict[str, dict[str, str]] = {}
        for key in keys:
            path = self._path(key)
            by_dir.setdefault(path.rpartition("/")[0], {})[path] = key
        for directory, wanted in by_dir.items():
            first, last = min(wanted), max(wanted)
            listing = functools.partial(self._call, "probe", wanted[first], _listed, directory, first, last)
            for meta in self._listings.listed(directory, first, last, within_s, listing):
                if meta["path"] in wanted:
                    identity = _identity(meta)
                    out[wanted[meta["path"]]] = None if identity is None else tuple(sorted(identity.items()))
        return out

    def list_keys(self, prefix: str) -> list[str]:
        base = "/".join(check_key(prefix)) if prefix else None
        # Listing is by whole path segments: "a/b.json" is under "a", "a.json" (the key "a") is not.
        pages = self._call("list", prefix or "keys", lambda store: list(obstore.list(store, base)))
        paths = (str(m["path"]) for page in pages for m in page)
        return sorted(path[: -len(".json")] for path in paths if path.endswith(".json"))

    def __repr__(self) -> str:
        return f"ObjectMetadataStore({self.location.display!r})"


# Listings older than this go when their directory is listed again: a server's consumers move
# between topics, and the listings of the keys they no longer look at would stay.
_LISTINGS_KEPT_S = 300.0


class _Listing(NamedTuple):
    taken_at: float  # time.monotonic()
    first: str
    last: str
    objects: list[ObjectMeta]

    def covers(self, first: str, last: str, within_s: float, now: float) -> bool:
        return now - self.taken_at <= within_s and self.first <= first and last <= self.last


class _RecentListings:
    """Recent listings of each directory, kept for probes that may take one a little old: a
    consumer's parked fetch looks at its partitions every 50 ms, a LIST request each on an object
    store (and billed), and each idle consumer of a topic listed its partitions apart. Such probes
    of the same keys list in turn, so that one waits for a listing under way rather than make its
    own beside it: the members of a group look at about the same moments. A write through this
    store drops its directory's listings, and one under way when the write ends is not kept: a
    fetch this server wakes for its own append lists again."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._kept: dict[str, dict[tuple[str, str], _Listing]] = {}  # by directory, by first and last
        self._writes: dict[str, int] = {}  # writes made here, by directory
        self._turns: dict[tuple[str, str, str], _Turn] = {}  # of probes of the same keys, while any waits

    def listed(
        self, directory: str, first: str, last: str, within_s: float, listing: Callable[[], list[ObjectMeta]]
    ) -> list[ObjectMeta]:
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

    def _list(self, directory: str, first: str, last: str, listing: Callable[[], list[ObjectMeta]]) -> list[ObjectMeta]:
        now = self._monotonic()
        with self._lock:
            writes = self._writes.get(directory, 0)
        objects = listing()
        with self._lock:
            if self._writes.get(directory, 0) == writes:
                kept = self._kept.setdefault(directory, {})
                for stale in [r for r, k in kept.items() if now - k.taken_at > _LISTINGS_KEPT_S]:
                    del kept[stale]
                kept[(first, last)] = _Listing(now, first, last, objects)
        return objects

    def wrote(self, directory: str) -> None:
        with self._lock:
            self._writes[directory] = self._writes.get(directory, 0) + 1
            self._kept.pop(directory, None)


@dataclass(slots=True)
class _Turn:
    lock: threading.Lock
    users: int = 0  # probes holding or waiting for the lock


def _listed(store: Any, directory: str, first: str, last: str) -> list[ObjectMeta]:
    """The objects of ``directory`` from path ``first`` to ``last``; no page after it is asked for.
    A listing starts after its offset: ``first`` less its last character comes before it."""
    out: list[ObjectMeta] = []
    for chunk in obstore.list(store, directory or None, offset=first[:-1], chunk_size=1000):
        out.extend(m for m in chunk if m["path"] <= last)
        if chunk and chunk[-1]["path"] >= last:
            break
    return out


def _identity(meta: Mapping[str, Any]) -> UpdateVersion | None:
    """What identifies an object's content for a conditional write over it (an object's meta or
    a put's result): None if the store gave neither an e-tag nor a generation."""
    found: UpdateVersion = {}
    if meta.get("e_tag"):
        found["e_tag"] = meta["e_tag"]
    if meta.get("version"):
        found["version"] = meta["version"]
    return found or None
