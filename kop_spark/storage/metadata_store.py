"""Key -> (value, version) with compare-and-set: the one place shared state changes.

Pulsar keeps this in ZooKeeper or etcd; kop can too, or keep it beside the data: versioned files
on a POSIX root, or one object per key changed by conditional writes on an object store. The
backends live in ``storage.metadata`` and are chosen by ``metadataStoreUrl`` (Pulsar's forms).

Versions are opaque increasing numbers: a key that never existed is at version 0, every write
(a deletion too) gives a greater one, and a write names the version it read. Backends do not
promise consecutive numbers (etcd's are its global revisions).
"""

from __future__ import annotations

import abc
import json
import re
import time
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ..errors import BadVersionError, CorruptMetadataError
from ..retry import retry_cas

_SEGMENT = re.compile(r"^[A-Za-z0-9._\-]+$")
# Values past this are stored zlib-compressed by the network backends: a managed ledger's list of
# ledgers is repetitive JSON that shrinks several times, and ZooKeeper (1 MiB per znode) and etcd
# (1.5 MiB per request) cap what one value may be.
_COMPRESS_FROM = 16 << 10
_ZLIB_HEADER = 0x78  # a zlib stream's first byte; JSON starts with '{' or 'n'
# What a ``ProbedCache`` keeps is kept this long at most, so that a filesystem whose clock runs more
# than a second behind ours (an NFS server's), where a write in the same tick as the one before
# could leave the probe's token as it was, shows the write within that time all the same.
PROBED_MAX_AGE_S = 5.0
# What a ``ProbedCache`` keeps goes once no look took it for this long, though its store's tokens
# are exact: a server's topics deleted by another process would otherwise stay as long as it runs.
# Longer than the log cleaner's 15 s between passes, which look at every topic.
PROBED_UNUSED_S = 60.0

T = TypeVar("T")


class Versioned(NamedTuple):
    """A key's value (None when absent or deleted) and its version (0 when it never existed)."""

    value: dict | None
    version: int


class MetadataStore(abc.ABC):
    # Updates of different keys worth running at once (a sink commit's partitions): each waits on a
    # server's round trip, which others can overlap.
    update_parallelism = 16
    # Reads of different keys worth running at once (a fetch's partitions, where they changed).
    read_parallelism = 16
    # Whether each request is billed (an object store's): those that poll look less often there.
    requests_billed = False
    # How long a value read may stand while its key's probe token is unchanged. Exact tokens (an
    # object's e-tag, from a listing made at the probe) stand until the key changes; a file's
    # modification time, and what a watch last told, only ``PROBED_MAX_AGE_S``.
    probe_max_age_s = PROBED_MAX_AGE_S
    # Whether a probe of None says the key changed a moment ago (a file's times, too coarse to
    # tell changes apart), rather than that there is no cheap probe: then nothing stands in.
    unprobed_when_changed = False

    @abc.abstractmethod
    def get(self, key: str) -> Versioned: ...

    @abc.abstractmethod
    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        """Set ``key`` to ``value`` (None deletes) if its version is still ``expected_version``.

        Returns the new version; raises ``BadVersionError`` if another writer got there first.
        """

    @abc.abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` that were ever written (some may since have been deleted), not
        ``prefix`` itself: what is listed is a directory (``topics``, a group's share states),
        and asking whether it is a key too cost a read at each listing."""

    def create(self, key: str, value: dict) -> int:
        """Create ``key``; ``BadVersionError`` if it already exists."""
        current = self.get(key)
        if current.value is not None:
            raise BadVersionError(f"metadata key {key} already exists")
        return self.put(key, value, current.version)

    def probe(self, key: str) -> Hashable | None:
        """A token that stays equal while ``key`` is unchanged, where the backend can tell that at a
        fraction of a read's cost; None where it cannot (then read). Equal tokens promise that no
        write came between them; a write may change the token without changing the value."""
        return None

    def probe_many(self, keys: Sequence[str], within_s: float = 0.0) -> dict[str, Hashable | None]:
        """``probe`` of each key, as one request where a server can answer for many keys at once
        (etcd, ZooKeeper), though it has no cheaper probe of one: a Kafka fetch reads many
        partitions, each a key, and a request a key cost a fetch of a hundred a hundred round trips.
        ``within_s``: probes this store took that recently may stand in, where it keeps them (an
        object store, whose probe is a billed listing); never past a write through this store."""
        return {key: self.probe(key) for key in keys}

    def written_probe(self, key: str, version: int) -> Hashable | None:
        """What ``probe`` of ``key`` will give while it stays at ``version``, where this store
        wrote that version and can tell; None otherwise."""
        return None

    def check_writable(self) -> None:
        """Raise if no write can succeed here, before a caller writes anything elsewhere."""
        return None

    def discard_unreadable(self, key: str, dry_run: bool = False) -> list[str]:
        """Remove versions of ``key`` that cannot be parsed (torn writes); what was (or would be)
        removed. Only the file backend could ever leave such versions."""
        return []


class Unprobed:
    """No probe taken yet (a probe may be None)."""


UNPROBED = Unprobed()


class ProbedCache:
    """What was read of (or made from) keys of a store, kept while the store's probe says each key
    is unchanged, its ``probe_max_age_s`` at most: a fetch looks at each partition it reads several
    times a second, and a produce or a Metadata request reads its topics, where the read and parse
    of a key cost a hundred times the probe (a stat of the key's directory, on the file backend;
    on an object store, a share of one listing of many keys, where each read is a billed request).
    Backends without a probe read every time."""

    def __init__(self, store: MetadataStore, monotonic: Callable[[], float] = time.monotonic):
        self._store = store
        self._max_age_s = store.probe_max_age_s
        self._kept: dict[str, _Kept] = {}
        self._monotonic = monotonic
        self._swept_at = monotonic()

    def get(
        self,
        key: str,
        load: Callable[[], T],
        token: Hashable | Unprobed | None = UNPROBED,
        unprobed_within_s: float = 0.0,
        usable: Callable[[T], bool] = lambda _: True,
    ) -> T:
        """The value ``load`` gives for ``key``, or the one kept while the key is unchanged, if
        ``usable``; ``token``: the key's probe, taken by the caller (``probe_many``) before this
        call. ``unprobed_within_s``: where there is no probe (None), a value loaded that recently,
        with none either, stands in: a caller that may act on a second-old value need not read."""
        if isinstance(token, Unprobed):
            token = self._store.probe(key)  # probed before the load: a write after it changes it
        if self._store.unprobed_when_changed:
            unprobed_within_s = 0.0  # a key another process just changed (a topic's settings) is read
        kept, now = self._kept.get(key), self._monotonic()
        if now - self._swept_at >= PROBED_MAX_AGE_S:
            self._sweep(now)
        max_age_s = self._max_age_s if token is not None else unprobed_within_s
        if kept is not None and kept.token == token and now - kept.loaded_at < max_age_s and usable(kept.value):
            kept.used_at = now
            return kept.value  # what the load gave when the key was as it is
        value = load()
        if token is None and unprobed_within_s <= 0:
            self._kept.pop(key, None)  # kept only for callers that may take it
        else:
            self._kept[key] = _Kept(token, now, now, value)
        return value

    def seed(self, key: str, token: Hashable | None, make: Callable[[], Any]) -> None:
        """Keep ``make()`` for ``key`` while its probe gives ``token`` (None: nothing is kept):
        the value of a version written here, which a look need not read."""
        if token is not None:
            now = self._monotonic()
            self._kept[key] = _Kept(token, now, now, make())

    def forget(self, key: str) -> None:
        """Drop what is kept of ``key``: written here, with no probe to tell."""
        self._kept.pop(key, None)

    def _sweep(self, now: float) -> None:
        """Drop what is kept past its age, which no look would take, and what no look took for
        ``PROBED_UNUSED_S``: a server's topics deleted by another process, or not looked at since,
        would otherwise stay for as long as it runs."""
        self._swept_at = now
        for key, kept in list(self._kept.items()):  # other threads may add meanwhile
            gone = now - kept.loaded_at >= self._max_age_s or now - kept.used_at >= PROBED_UNUSED_S
            if gone and self._kept.get(key) is kept:
                self._kept.pop(key, None)

    def __len__(self) -> int:
        return len(self._kept)


@dataclass(slots=True)
class _Kept:
    token: Hashable
    loaded_at: float
    used_at: float
    value: Any


class Unchanged(Exception):
    """Raised by a change given to ``update`` to leave the key as it is."""


def update(store: MetadataStore, key: str, change: Callable[[dict | None], dict | None]) -> Versioned:
    """Set ``key`` to ``change(current value)`` (None deletes it) by compare-and-set, on a fresh
    read each time another writer got there first. ``change`` may raise ``Unchanged`` to stop
    without writing, or any error to refuse. Returns the version the change was applied to."""

    def attempt() -> Versioned:
        current = store.get(key)
        try:
            new = change(current.value)
        except Unchanged:
            return current
        store.put(key, new, current.version)
        return current

    return retry_cas(f"metadata {key}", attempt)


def check_key(key: str) -> list[str]:
    """The key's segments; ``ValueError`` for a key that could name something outside the store."""
    parts = key.split("/")
    for p in parts:
        if not _SEGMENT.match(p) or p in (".", ".."):
            raise ValueError(f"illegal metadata key {key!r}")
    return parts


def encode_value(value: object) -> bytes:
    """A value as the network and object-store backends keep it: JSON, compressed when large."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else data


def decode_value(data: bytes, where: str) -> object:
    """What ``encode_value`` made; ``CorruptMetadataError`` naming ``where`` for anything else."""
    try:
        if data[:1] == bytes([_ZLIB_HEADER]):
            data = zlib.decompress(data)
        return json.loads(data)
    except (ValueError, zlib.error) as e:
        raise CorruptMetadataError(f"metadata {where} is not a stored value ({e})") from e
