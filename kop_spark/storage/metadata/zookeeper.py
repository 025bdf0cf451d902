"""The metadata store in ZooKeeper, as Pulsar keeps it (``metadataStoreUrl=zk:host:port[,...][/chroot]``).

A key is the znode ``<chroot>/<key>``; our version is the znode's data version plus one, so a key
that never existed is at 0 and a created one at 1. A deletion stores ``null`` instead of removing
the znode, so versions keep increasing through deletions and recreations. Compare-and-set is
ZooKeeper's own: ``create`` for version 0, ``set`` with the data version otherwise. Every call
waits at most the operation timeout: kazoo queues requests while it reconnects, and would
otherwise wait for as long as the server is away.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from ...errors import BadVersionError, ConfigError, MetadataStoreUnavailableError, StorageError
from ..metadata_store import MetadataStore, Unprobed, Versioned, check_key, decode_value, encode_value
from .watches import Watches

try:
    from kazoo import exceptions as zk_errors
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
except ImportError:  # an optional dependency: only stores that use ZooKeeper need it
    KazooClient = None

_MAX_ZNODE = 0xFFFFF - 1024  # ZooKeeper's default jute.maxbuffer, less the request's own fields
_sessions: dict[tuple[str, int], _Session] = {}
_sessions_lock = threading.Lock()


class Children(NamedTuple):
    names: list[str]
    holds_data: bool  # a key's znode, not one made only as the parent of deeper keys


class _ZooKeeperWatches(Watches):
    """The znodes a session watches (see ``Watches``). Only znodes looked at (probed) are
    watched: reads set a watch on them, and a watch on a key only read and written (a CAS's)
    would cost an event at each write. A watch fires once: its event drops what was kept."""

    def told(self, event: Any) -> None:
        """kazoo's watch callback. One naming no znode follows ``away``: kazoo drops every watch
        when its connection is lost, and sets none again."""
        if event.path is not None:
            self.changed(event.path)


class _Session:
    """A kazoo client that keeps (re)connecting in the background, whether it is connected, and the
    znodes it watches.

    Requests are sent only while connected: kazoo would queue them while it reconnects and send
    them whenever the server is back, long after the caller was told they failed."""

    def __init__(self, hosts: str, session_timeout_s: float):
        self._connected = threading.Event()
        self.watches = _ZooKeeperWatches()
        self.client = KazooClient(
            hosts=hosts, timeout=session_timeout_s, connection_retry={"max_tries": -1, "max_delay": 1}
        )
        self.client.add_listener(self._state_changed)
        self.client.start_async()

    def _state_changed(self, state: str) -> None:
        if state == "CONNECTED":
            self._connected.set()
        else:
            self._connected.clear()
            self.watches.away()

    def wait_connected(self, timeout_s: float) -> bool:
        return self._connected.wait(timeout_s) and self.client.connected


def close_sessions(hosts: str | None = None) -> None:
    """Stop this process's session with the ensemble ``hosts`` (with every ensemble: None), for a
    process done with it: a session otherwise keeps reconnecting in the background for as long as
    the process lives. A store used after opens another."""
    with _sessions_lock:
        keys = [k for k in _sessions if k[1] == os.getpid() and hosts in (None, k[0])]
        closing = [_sessions.pop(k) for k in keys]
    for session in closing:
        session.client.stop()
        session.client.close()


def parse_zk_url(url: str) -> tuple[str, str]:
    """``zk:h1:2181,h2:2181/chroot`` -> (``h1:2181,h2:2181``, ``/chroot``)."""
    spec = url[len("zk:") :].removeprefix("//")
    hosts, _, chroot = spec.partition("/")
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not name or not colon or not port.isdigit():
            raise ConfigError(f"metadataStoreUrl {url!r}: expected zk:host:port[,host:port...][/chroot], got {host!r}")
    if chroot:
        check_key(chroot.rstrip("/"))
    return hosts, "/" + chroot.rstrip("/") if chroot else ""


class ZooKeeperMetadataStore(MetadataStore):
    def __init__(self, url: str, *, timeout_s: float, session_timeout_s: float):
        if KazooClient is None:
            raise ConfigError(f"metadataStoreUrl {url!r} needs the kazoo package: pip install 'kop-spark[zookeeper]'")
        self.url = url
        self.hosts, self.chroot = parse_zk_url(url)
        self._timeout = timeout_s
        self._session_timeout = session_timeout_s

    def _session(self) -> _Session:
        # One session per process and ensemble, shared by every store on it; a forked child (a
        # Spark worker) opens its own, since a session cannot cross a fork.
        key = (self.hosts, os.getpid())
        with _sessions_lock:
            session = _sessions.get(key)
            if session is None:
                session = _sessions[key] = _Session(self.hosts, self._session_timeout)
        if not session.wait_connected(self._timeout):
            raise self._unavailable("connect to")
        return session

    def _unavailable(self, action: str) -> MetadataStoreUnavailableError:
        return MetadataStoreUnavailableError(
            f"cannot {action} ZooKeeper {self.hosts} (metadataStoreUrl {self.url}): no answer within "
            f"{self._timeout:g} s (metadataStoreOperationTimeoutSeconds)"
        )

    def _wait(self, action: str, call: Any) -> Any:
        try:
            return call.get(timeout=self._timeout)
        except (
            KazooTimeoutError,
            zk_errors.ConnectionLoss,
            zk_errors.SessionExpiredError,
            zk_errors.ConnectionClosedError,
        ):
            raise self._unavailable(action) from None

    def _path(self, key: str) -> str:
        return f"{self.chroot}/{'/'.join(check_key(key))}"

    def get(self, key: str) -> Versioned:
        session, path = self._session(), self._path(key)
        watches = session.watches
        watch, mark = watches.told if watches.looked_at(path) else None, watches.mark(path)
        try:
            data, stat = self._wait(f"read {key} from", session.client.get_async(path, watch=watch))
        except zk_errors.NoNodeError:
            return Versioned(None, 0)
        if watch is not None:
            watches.keep(path, mark, (stat.czxid, stat.mzxid))
        # A znode made only as the parent of deeper keys holds no data: an absent key.
        value = decode_value(data, f"{key} in ZooKeeper {self.hosts}") if data else None
        return Versioned(value if isinstance(value, dict) else None, stat.version + 1)

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        path, data = self._path(key), encode_value(value)
        if len(data) > _MAX_ZNODE:
            raise StorageError(
                f"metadata {key}: {len(data)} bytes (compressed) is more than a znode holds in ZooKeeper "
                f"{self.hosts} (jute.maxbuffer, {_MAX_ZNODE} bytes by default)"
            )
        session = self._session()
        client = session.client
        try:
            if expected_version == 0:
                self._wait(f"create {key} in", client.create_async(path, data, makepath=True))
                return 1
            stat = self._wait(f"write {key} to", client.set_async(path, data, version=expected_version - 1))
        except (zk_errors.NodeExistsError, zk_errors.BadVersionError, zk_errors.NoNodeError):
            raise BadVersionError(f"metadata {key} is past version {expected_version}") from None
        finally:
            # The watch's event, sent before the answer, may not have been handed on yet; a write
            # that failed for want of an answer may have been made. A create changes its parents'
            # children too (makepath may have made the parents).
            session.watches.written(path, made=expected_version == 0)
        return int(stat.version) + 1

    def probe(self, key: str) -> Hashable | None:
        """The token of a key this session watches (see ``Watches``), asking nothing; else None,
        for the caller to read it, which sets the watch."""
        token = self._session().watches.look(self._path(key))
        return None if isinstance(token, Unprobed) else token

    def probe_many(self, keys: Sequence[str], within_s: float = 0.0) -> dict[str, Hashable | None]:
        """Each key's znode's creation and last modification (None if it never existed): kept
        while watched (see ``Watches``), else asked all at once, setting a watch: the answers come
        back in order on the one session, so the keys cost a round trip between them, not one each."""
        session = self._session()
        watches, out = session.watches, {}
        asked = []
        for key in keys:
            path = self._path(key)
            token = watches.look(path)
            if isinstance(token, Unprobed):
                asked.append((key, path, watches.mark(path), session.client.exists_async(path, watch=watches.told)))
            else:
                out[key] = token
        for key, path, mark, call in asked:
            stat = self._wait(f"probe {key} in", call)
            out[key] = None if stat is None else (stat.czxid, stat.mzxid)
            watches.keep(path, mark, out[key])
        return {key: out[key] for key in keys}

    def list_keys(self, prefix: str) -> list[str]:
        """The znodes under ``prefix`` that hold data, found a level of the tree at a time: a
        level's znodes are asked for their children (and their own stat) all at once, so that a
        level costs a round trip, not one a znode (200 topics took 300 ms, asked in turn). What
        was listed is watched (see ``Watches``): listed again unchanged, it asks nothing."""
        session = self._session()
        out: list[str] = []
        level = [prefix] if prefix else []
        if not prefix:
            try:
                level = self._wait("list", session.client.get_children_async(self.chroot or "/"))
            except zk_errors.NoNodeError:
                return []
        while level:
            listed = self._children_of(session, level)
            level = []
            for key, children in listed.items():
                if children.holds_data and key != prefix:
                    out.append(key)
                level.extend(f"{key}/{c}" for c in children.names)
        return sorted(k for k in out if k != "zookeeper" and not k.startswith("zookeeper/"))

    def _children_of(self, session: _Session, keys: list[str]) -> dict[str, Children]:
        """Each key's children and whether it holds data: kept while watched, else asked all at
        once, watching them (and, where it holds none yet, its data: a put may give it some)."""
        watches, client, out, asked = session.watches, session.client, {}, []
        for key in keys:
            path = self._path(key)
            kept = watches.listing(path)
            if kept is not None:
                out[key] = kept
                continue
            mark, call = watches.mark(path), client.get_children_async(path, watch=watches.told, include_data=True)
            asked.append((key, path, mark, call))
        for key, path, mark, call in asked:
            try:
                names, stat = self._wait(f"list {key} in", call)
                if not stat.dataLength:  # a put may give it data, which no child watch tells of
                    stat = self._wait(f"list {key} in", client.exists_async(path, watch=watches.told))
            except zk_errors.NoNodeError:
                continue
            if stat is None:
                continue  # gone meanwhile
            out[key] = Children(names, bool(stat.dataLength))
            watches.keep_listing(path, mark, out[key])
        return {key: out[key] for key in keys if key in out}

    def __repr__(self) -> str:
        return f"ZooKeeperMetadataStore({self.url!r})"
