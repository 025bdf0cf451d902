"""The metadata store's backends, chosen by ``metadataStoreUrl`` in Pulsar's forms:

- a directory, ``file://`` URI, or empty beside a POSIX root: versioned files (``file``);
- ``zk:host:port[,host:port...][/chroot]``: ZooKeeper (``zookeeper``);
- ``etcd:http://host:port[,http://host:port...]``: etcd v3 (``etcd``);
- ``s3://``, ``gs://``, ``az://``, ``abfs[s]://``: one object per key (``object_store``).

Each backend module is imported only when a store uses it, so kazoo is needed only for ZooKeeper.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...errors import ConfigError, StorageError
from ..metadata_store import MetadataStore, Versioned
from ..object_store import is_object_store_uri, parse_location

NETWORK_SCHEMES = ("zk:", "etcd:")  # the backends that live off the store root
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def open_metadata_store(
    url: str,
    *,
    sync: bool = True,
    timeout_s: float = 30.0,
    session_timeout_s: float = 30.0,
    options: Mapping[str, str] | None = None,
) -> MetadataStore:
    """The store ``url`` names. Parsing errors are ``ConfigError`` naming ``metadataStoreUrl``;
    nothing is contacted until the first operation."""
    scheme = _SCHEME.match(url)
    name = scheme.group(1).lower() if scheme else ""
    if name == "zk":
        from .zookeeper import ZooKeeperMetadataStore

        return ZooKeeperMetadataStore(url, timeout_s=timeout_s, session_timeout_s=session_timeout_s)
    if name == "etcd":
        from .etcd import EtcdMetadataStore

        return EtcdMetadataStore(url, timeout_s=timeout_s)
    if is_object_store_uri(url):
        from .object_store import ObjectMetadataStore

        try:
            location = parse_location(url)
        except ConfigError as e:
            raise ConfigError(f"metadataStoreUrl: {e}") from None
        return ObjectMetadataStore(location, options or {}, timeout_s=timeout_s)
    if name in ("", "file") or len(name) == 1:  # a path (C: on Windows) or file://
        from .file import FileMetadataStore

        return FileMetadataStore(url[len("file://") :] if name == "file" else url, sync=sync)
    raise ConfigError(
        f"metadataStoreUrl {url!r}: unknown scheme {name!r}; expected a directory, zk:host:port, "
        f"etcd:http://host:port, or an s3://, gs://, az:// URI"
    )


class RefusedMetadataStore(MetadataStore):
    """Where no metadata store can be: everything reads as empty, and the first write is refused
    with ``reason``, so nothing half-made is left behind."""

    def __init__(self, reason: str):
        self.reason = reason

    def get(self, key: str) -> Versioned:
        return Versioned(None, 0)

    def check_writable(self) -> None:
        raise StorageError(self.reason)

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        raise StorageError(self.reason)

    def list_keys(self, prefix: str) -> list[str]:
        return []
