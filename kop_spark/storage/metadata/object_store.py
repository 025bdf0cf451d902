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

import functools
import math
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import obstore

from ...errors import BadVersionError, MetadataStoreUnavailableError, StorageError
from ..metadata_store import MetadataStore, Versioned, check_key, decode_value, encode_value
from ..object_store import CONDITION_FAILED, MISSING, ObjectLocation, open_store, refused
from .listings import Listed, RecentListings

if TYPE_CHECKING:
    from obstore import UpdateVersion


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
        self._listings = RecentListings()

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
        written = _identity(result)
        self._listings.wrote(self._path(key), None if written is None else {"path": self._path(key), **written})
        with self._lock:
            if written is not None:
                self._objects[key] = (new_version, written)
            else:
                self._objects.pop(key, None)
        return new_version

    def written_probe(self, key: str, version: int) -> Hashable | None:
        known = self._known(key, version)
        return None if known is None else _probe(known)

    def _known(self, key: str, version: int) -> UpdateVersion | None:
        """The object of ``key`` at ``version``, if this store last read or wrote that version."""
        with self._lock:
            known = self._objects.get(key)
        return known[1] if known is not None and known[0] == version else None

    def _object_at(self, key: str, version: int) -> UpdateVersion:
        known = self._known(key, version)
        if known is not None:
            return known
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
        ``within_s`` stands in for a new one, with the writes made here since in it."""
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
                    out[wanted[meta["path"]]] = _probe(meta)
        return out

    def list_keys(self, prefix: str) -> list[str]:
        base = "/".join(check_key(prefix)) if prefix else None
        # Listing is by whole path segments: "a/b.json" is under "a", "a.json" (the key "a") is not.
        pages = self._call("list", prefix or "keys", lambda store: list(obstore.list(store, base)))
        paths = (str(m["path"]) for page in pages for m in page)
        return sorted(path[: -len(".json")] for path in paths if path.endswith(".json"))

    def __repr__(self) -> str:
        return f"ObjectMetadataStore({self.location.display!r})"


def _listed(store: Any, directory: str, first: str, last: str) -> list[Listed]:
    """The objects of ``directory`` from path ``first`` to ``last``; no page after it is asked for.
    A listing starts after its offset: ``first`` less its last character comes before it."""
    out: list[Listed] = []
    for chunk in obstore.list(store, directory or None, offset=first[:-1], chunk_size=1000):
        out.extend(m for m in chunk if m["path"] <= last)
        if chunk and chunk[-1]["path"] >= last:
            break
    return out


def _probe(meta: Mapping[str, Any]) -> Hashable | None:
    """An object's e-tag, or its version where it has none, as a listing and a put's answer give
    it alike, so that a listing patched with a write here probes as a new one would: a put's answer
    has the generation too where a listing may not, and Azure quotes its e-tag there, not here."""
    e_tag = meta.get("e_tag")
    return e_tag.strip('"') if e_tag else meta.get("version") or None


def _identity(meta: Mapping[str, Any]) -> UpdateVersion | None:
    """What identifies an object's content for a conditional write over it (an object's meta or
    a put's result): None if the store gave neither an e-tag nor a generation."""
    found: UpdateVersion = {}
    if meta.get("e_tag"):
        found["e_tag"] = meta["e_tag"]
    if meta.get("version"):
        found["version"] = meta["version"]
    return found or None
