"""The metadata store in etcd v3 (``metadataStoreUrl=etcd:http://host:port[,http://host:port...]``).

Spoken through etcd's HTTP/JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``), which every etcd
since 3.4 serves on its client port: no gRPC stack to install beside Spark's protobuf. Our version
is the key's ``mod_revision``, etcd's global revision at its last write: 0 for a key that never
existed, and greater at every write. A compare-and-set is one transaction comparing it. A deletion
stores ``null`` rather than removing the key, so ``list_keys`` still names it, as the other
backends do. A path after the first endpoint (``etcd:http://h:2379/kop``) prefixes every key.

Looks (probes and listings) are answered by a watch of the store's keys once one stands (see
``etcd_watch``): a look at unchanged keys then asks etcd nothing. Only looks that come again and
again (a fetch's, a stream's) start the watch, which brings every write's value.

Each thread keeps its connection to each endpoint open between calls (HTTP keep-alive): a new
connection a call made a read take 1.4 ms where a kept one takes 0.9 ms, and every append is a
read and a compare-and-set.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Hashable, Sequence

from ...errors import BadVersionError, ConfigError, MetadataStoreUnavailableError, StorageError
from ..metadata_store import MetadataStore, Unprobed, Versioned, check_key, decode_value, encode_value
from .etcd_watch import b64, prefix_end, running_watch, watch_of
from .watches import Watches

_MAX_REQUEST = (3 << 19) - 4096  # etcd's default --max-request-bytes (1.5 MiB), less the envelope
_MAX_TXN_OPS = 128  # etcd's default --max-txn-ops


def parse_etcd_url(url: str) -> tuple[list[str], str]:
    """``etcd:http://h1:2379,http://h2:2379/kop`` -> ([``http://h1:2379``, ``http://h2:2379``], ``kop/``)."""
    endpoints, prefix = [], ""
    for part in url[len("etcd:") :].split(","):
        parsed = urllib.parse.urlsplit(part)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port is None:
            raise ConfigError(
                f"metadataStoreUrl {url!r}: expected etcd:http://host:port[,http://host:port...], got {part!r}"
            )
        endpoints.append(f"{parsed.scheme}://{parsed.netloc}")
        if parsed.path.strip("/"):
            prefix = "/".join(check_key(parsed.path.strip("/"))) + "/"
    return endpoints, prefix


class _Connections(threading.local):
    """This thread's open connections, by endpoint; none survive a fork (a child sharing its
    parent's socket would read the parent's answers)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.by_endpoint: dict[str, http.client.HTTPConnection] = {}

    def get(self, endpoint: str, timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to ``endpoint`` and whether it was kept from an earlier call."""
        if self.pid != os.getpid():
            self.pid, self.by_endpoint = os.getpid(), {}
        kept = self.by_endpoint.pop(endpoint, None)
        if kept is not None:
            kept.timeout = timeout_s
            if kept.sock is not None:
                kept.sock.settimeout(timeout_s)
            return kept, True
        parsed = urllib.parse.urlsplit(endpoint)
        cls = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
        return cls(parsed.netloc, timeout=timeout_s), False

    def keep(self, endpoint: str, connection: http.client.HTTPConnection) -> None:
        self.by_endpoint[endpoint] = connection


class EtcdMetadataStore(MetadataStore):
    def __init__(self, url: str, *, timeout_s: float):
        self.url = url
        self.endpoints, self._prefix = parse_etcd_url(url)
        self._timeout = timeout_s
        self._connections = _Connections()

    def _call(self, api: str, body: dict, action: str) -> dict:
        """POST to the first endpoint that answers, within the operation timeout overall."""
        deadline = time.monotonic() + self._timeout
        data = json.dumps(body).encode()
        failures = []
        for endpoint in self.endpoints:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                status, reply = self._post(endpoint, api, data, remaining)
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out
                failures.append(f"{endpoint}: {e!r}")
                continue
            if status != 200:
                detail = reply.decode(errors="replace")[:300]
                raise StorageError(f"etcd {endpoint} refused to {action}: HTTP {status} {detail}")
            try:
                return dict(json.loads(reply))
            except ValueError as e:  # not etcd at all
                failures.append(f"{endpoint}: {e}")
        raise MetadataStoreUnavailableError(
            f"cannot {action} etcd (metadataStoreUrl {self.url}): no answer within {self._timeout:g} s "
            f"(metadataStoreOperationTimeoutSeconds): {'; '.join(failures) or 'timed out'}"
        )

    def _post(self, endpoint: str, api: str, data: bytes, timeout_s: float) -> tuple[int, bytes]:
        """The status and body of one POST, on this thread's kept connection to ``endpoint``. A
        kept connection found closed (etcd restarted while it idled) is replaced once. Sending a
        request again cannot apply a write twice: a write compares the version it replaces."""
        while True:
            connection, kept = self._connections.get(endpoint, timeout_s)
            try:
                connection.request("POST", f"/v3/{api}", data, {"Content-Type": "application/json"})
                response = connection.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if kept:
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            if not response.will_close:
                self._connections.keep(endpoint, connection)
            return response.status, body

    def _path(self, key: str) -> str:
        """The key in etcd: the store's prefix, then the key."""
        return self._prefix + "/".join(check_key(key))

    def _watching(self) -> Watches:
        """What the watch of the store's keys kept, started if it is not running (for a look)."""
        return watch_of(self.endpoints, self._prefix.encode()).watches

    def _watched(self) -> Watches | None:
        """What the watch of the store's keys kept, if it runs (for a read or a write)."""
        watch = running_watch(self.endpoints, self._prefix.encode())
        return None if watch is None else watch.watches

    def get(self, key: str) -> Versioned:
        path, watches = self._path(key), self._watched()
        mark = watches.mark(path) if watches is not None and watches.looked_at(path) else None
        reply = self._call("kv/range", {"key": b64(path.encode())}, f"read {key} from")
        kvs = reply.get("kvs") or []
        if watches is not None:
            watches.keep(path, mark, int(kvs[0]["mod_revision"]) if kvs else None)
        if not kvs:
            return Versioned(None, 0)
        value = decode_value(base64.b64decode(kvs[0].get("value", "")), f"{key} in etcd")
        return Versioned(value if isinstance(value, dict) else None, int(kvs[0]["mod_revision"]))

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        path, data = self._path(key), encode_value(value)
        if len(data) > _MAX_REQUEST:
            raise StorageError(
                f"metadata {key}: {len(data)} bytes (compressed) is more than etcd takes in one request "
                f"(--max-request-bytes, 1.5 MiB by default)"
            )
        # The gateway leaves out fields at their zero value: an absent "succeeded" is false and an
        # absent "mod_revision" compares with 0, which is what a key that never existed has.
        raw = b64(path.encode())
        txn = {
            "compare": [{"key": raw, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected_version)}],
            "success": [{"request_put": {"key": raw, "value": b64(data)}}],
        }
        try:
            reply = self._call("kv/txn", txn, f"write {key} to")
        finally:
            # The watch's event may come after the answer; a write that failed for want of an
            # answer may have been made. A key made is a change of its parents' listings too.
            watches = self._watched()
            if watches is not None:
                watches.written(path, made=expected_version == 0)
        if not reply.get("succeeded"):
            raise BadVersionError(f"metadata {key} is past version {expected_version}")
        return int(reply["header"]["revision"])

    def probe(self, key: str) -> Hashable | None:
        """The ``mod_revision`` kept for a key while a watch stands (see ``etcd_watch``), asking
        nothing; else None, for the caller to read it, which keeps it. A look at one key (a
        produce's at its topic, a Spark task's) starts no watch: that would bring every write
        in the store to every producer and task for a minute, where only looks again and
        again (``probe_many``, ``list_keys``: a fetch's, a stream's) are worth it."""
        watches = self._watched()
        if watches is None:
            return None
        token = watches.look(self._path(key))
        return None if isinstance(token, Unprobed) else token

    def probe_many(self, keys: Sequence[str], within_s: float = 0.0) -> dict[str, Hashable | None]:
        """Each key's ``mod_revision`` (None if it never existed): kept while the watch stands,
        else read in transactions of ranges that return no values, one request for up to
        ``_MAX_TXN_OPS`` keys."""
        watches, paths = self._watching(), {key: self._path(key) for key in keys}
        out: dict[str, Hashable | None] = {}
        asked = []
        for key, path in paths.items():
            token = watches.look(path)
            if isinstance(token, Unprobed):
                asked.append(key)
            else:
                out[key] = token
        for at in range(0, len(asked), _MAX_TXN_OPS):
            chunk = asked[at : at + _MAX_TXN_OPS]
            marks = [watches.mark(paths[k]) for k in chunk]
            ranges = [{"request_range": {"key": b64(paths[k].encode()), "keys_only": True}} for k in chunk]
            reply = self._call("kv/txn", {"success": ranges}, f"probe {chunk[0]} and {len(chunk) - 1} more keys in")
            answers = reply.get("responses") or [{}] * len(chunk)
            for key, mark, answer in zip(chunk, marks, answers, strict=True):
                kvs = answer.get("response_range", {}).get("kvs") or []
                out[key] = int(kvs[0]["mod_revision"]) if kvs else None
                watches.keep(paths[key], mark, out[key])
        return {key: out[key] for key in keys}

    def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``: kept while the watch stands and no key under it was made."""
        watches = self._watching()
        path = self._path(prefix) if prefix else self._prefix.rstrip("/")
        kept = watches.listing(path)
        if kept is not None:
            return list(kept)
        mark = watches.mark(path)
        start = self._prefix.encode() + (("/".join(check_key(prefix)) + "/").encode() if prefix else b"")
        start = start or b"\0"  # etcd refuses an empty key; from NUL on is every key
        body = {"key": b64(start), "range_end": b64(prefix_end(start)), "keys_only": True}
        reply = self._call("kv/range", body, f"list {prefix or 'keys'} in")
        keys = [base64.b64decode(kv["key"]).decode()[len(self._prefix) :] for kv in reply.get("kvs") or []]
        watches.keep_listing(path, mark, tuple(sorted(keys)))
        return sorted(keys)

    def __repr__(self) -> str:
        return f"EtcdMetadataStore({self.url!r})"
