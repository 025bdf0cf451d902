"""The metadata store in etcd v3 (``metadataStoreUrl=etcd:http://host:port[,http://host:port...]``).

Spoken through etcd's HTTP/JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``), which every etcd
since 3.4 serves on its client port: no gRPC stack to install beside Spark's protobuf. Our version
is the key's ``mod_revision``, etcd's global revision at its last write: 0 for a key that never
existed, and greater at every write. A compare-and-set is one transaction comparing it. A deletion
stores ``null`` rather than removing the key, so ``list_keys`` still names it, as the other
backends do. A path after the first endpoint (``etcd:http://h:2379/kop``) prefixes every key.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request

from ...errors import BadVersionError, ConfigError, MetadataStoreUnavailableError, StorageError
from ..metadata_store import MetadataStore, Versioned, check_key, decode_value, encode_value

_MAX_REQUEST = (3 << 19) - 4096  # etcd's default --max-request-bytes (1.5 MiB), less the envelope


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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdMetadataStore(MetadataStore):
    def __init__(self, url: str, *, timeout_s: float):
        self.url = url
        self.endpoints, self._prefix = parse_etcd_url(url)
        self._timeout = timeout_s

    def _call(self, api: str, body: dict, action: str) -> dict:
        """POST to the first endpoint that answers, within the operation timeout overall."""
        deadline = time.monotonic() + self._timeout
        data = json.dumps(body).encode()
        failures = []
        for endpoint in self.endpoints:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            request = urllib.request.Request(f"{endpoint}/v3/{api}", data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=remaining) as response:
                    return dict(json.loads(response.read()))
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:300]
                raise StorageError(f"etcd {endpoint} refused to {action}: HTTP {e.code} {detail}") from e
            except (OSError, ValueError) as e:  # refused, reset, timed out, or not etcd at all
                failures.append(f"{endpoint}: {getattr(e, 'reason', e)}")
        raise MetadataStoreUnavailableError(
            f"cannot {action} etcd (metadataStoreUrl {self.url}): no answer within {self._timeout:g} s "
            f"(metadataStoreOperationTimeoutSeconds): {'; '.join(failures) or 'timed out'}"
        )

    def _key(self, key: str) -> bytes:
        return (self._prefix + "/".join(check_key(key))).encode()

    def get(self, key: str) -> Versioned:
        reply = self._call("kv/range", {"key": _b64(self._key(key))}, f"read {key} from")
        kvs = reply.get("kvs") or []
        if not kvs:
            return Versioned(None, 0)
        value = decode_value(base64.b64decode(kvs[0].get("value", "")), f"{key} in etcd")
        return Versioned(value if isinstance(value, dict) else None, int(kvs[0]["mod_revision"]))

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        raw, data = self._key(key), encode_value(value)
        if len(data) > _MAX_REQUEST:
            raise StorageError(
                f"metadata {key}: {len(data)} bytes (compressed) is more than etcd takes in one request "
                f"(--max-request-bytes, 1.5 MiB by default)"
            )
        # The gateway leaves out fields at their zero value: an absent "succeeded" is false and an
        # absent "mod_revision" compares with 0, which is what a key that never existed has.
        txn = {
            "compare": [{"key": _b64(raw), "target": "MOD", "result": "EQUAL", "mod_revision": str(expected_version)}],
            "success": [{"request_put": {"key": _b64(raw), "value": _b64(data)}}],
        }
        reply = self._call("kv/txn", txn, f"write {key} to")
        if not reply.get("succeeded"):
            raise BadVersionError(f"metadata {key} is past version {expected_version}")
        return int(reply["header"]["revision"])

    def list_keys(self, prefix: str) -> list[str]:
        start = self._prefix.encode() + (("/".join(check_key(prefix)) + "/").encode() if prefix else b"")
        start = start or b"\0"  # etcd refuses an empty key; from NUL on is every key
        body = {"key": _b64(start), "range_end": _b64(_prefix_end(start)), "keys_only": True}
        reply = self._call("kv/range", body, f"list {prefix or 'keys'} in")
        keys = [base64.b64decode(kv["key"]).decode()[len(self._prefix) :] for kv in reply.get("kvs") or []]
        if prefix and self.get(prefix).version:
            keys.append(prefix)
        return sorted(keys)

    def __repr__(self) -> str:
        return f"EtcdMetadataStore({self.url!r})"


def _prefix_end(prefix: bytes) -> bytes:
    """The first key past every key starting with ``prefix`` (etcd's range_end for a prefix)."""
    if prefix == b"\0":
        return b"\0"  # etcd's "every key from here on"
    end = bytearray(prefix)
    end[-1] += 1  # keys here are ASCII, so the last byte is below 0xff
    return bytes(end)
