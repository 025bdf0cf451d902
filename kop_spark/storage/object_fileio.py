"""The store's files on an object store (S3, GCS, Azure Blob) through obstore.

Objects are written whole and never changed. A new file gathers its bytes in memory and ``sync``
uploads them, once, as an object that must not exist yet (``If-None-Match: *``): so an object is
either absent or complete, and a writer that dies before its upload leaves nothing; one that dies
after it leaves an orphan that maintenance removes. Nothing is written to local disk. There are
no directories: a directory is the prefix of the objects under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import obstore

from ..errors import FileMissingError, StorageError
from .fileio import FileIO, NewFile, RandomAccess, WholeFile
from .object_store import CONDITION_FAILED, MISSING, ObjectLocation, open_store, refused
from .written_objects import WrittenObjects


class ObjectFileIO(FileIO):
    supports_append = False
    # A request's latency (tens of ms on S3 for its first byte) is the transfer of megabytes: a
    # quarter of one stays a small share of it, and reading a small ledger whole saves two requests.
    small_read_bytes = 256 << 10
    read_parallelism = 16  # each read waits on a round trip, which others can overlap
    write_parallelism = 16  # as each write does

    def __init__(
        self,
        uri: str,
        location: ObjectLocation,
        options: Mapping[str, str],
        *,
        timeout_s: float,
        cache_bytes: int = 0,
    ):
        super().__init__(uri, uri)
        self.location = location
        self._timeout = timeout_s
        self.store = open_store(location, options, timeout_s)
        self._written = WrittenObjects(cache_bytes, self.small_read_bytes)  # managedLedgerCacheSizeMB

    def call(self, action: str, path: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(store, ...)``; obstore's errors as a ``StorageError`` naming the object."""
        try:
            return fn(self.store, *args, **kwargs)
        except MISSING as e:
            raise FileMissingError(f"cannot {action} {self.full_path(path)}: no such object") from e
        except CONDITION_FAILED:
            raise
        except Exception as e:  # obstore's own errors
            text, answered = refused(e)
            hint = "" if answered else f" (no answer within {self._timeout:g} s, metadataStoreOperationTimeoutSeconds)"
            raise StorageError(f"cannot {action} {self.full_path(path)}: {text}{hint}") from e

    # -- reads --------------------------------------------------------------------------------

    def open_input(self, path: str) -> RandomAccess:
        return _ObjectInput(self, path)

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        kept = self._written.read(path, offset, length)
        if kept is not None:
            return kept
        return bytes(self.call("read", path, obstore.get_range, path, start=offset, length=length))

    def size(self, path: str) -> int:
        return int(self.call("read", path, obstore.head, path)["size"])

    def exists(self, path: str) -> bool:
        try:
            self.call("look for", path, obstore.head, path)
        except FileMissingError:
            return False
        return True

    def list_dir(self, path: str) -> list[str]:
        listed = self.call("list", path, obstore.list_with_delimiter, path or None)
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"]]
        names += [str(m["path"]).rsplit("/", 1)[-1] for m in listed["objects"]]
        return sorted(names)

    def walk_files(self, path: str) -> list[tuple[str, float]]:
        pages = self.call("list", path, lambda store: list(obstore.list(store, path or None)))
        return [(str(m["path"]), m["last_modified"].timestamp()) for page in pages for m in page]

    # -- writes -------------------------------------------------------------------------------

    def create(self, path: str, direct: bool = False) -> NewFile:
        return WholeFile(self, path)

    def delete(self, path: str) -> None:
        self._written.deleted([path])
        try:
            self.call("delete", path, obstore.delete, path)
        except FileMissingError:
            pass

    def delete_tree(self, path: str) -> None:
        files = [p for p, _ in self.walk_files(path)]
        self._written.deleted(files)
        if files:
            self.call("delete", path, obstore.delete, files)

    def delete_dir_if_empty(self, path: str) -> None:
        """Nothing to do: a prefix with no objects under it is no directory."""

    def touch(self, path: str) -> None:
        self.call("write", path, obstore.put, path, b"")

    def ensure_writable_root(self) -> None:
        """A bucket or container that does not exist, or credentials it refuses, are named now,
        before anything is written."""
        pages = self.call("list", "", lambda store: next(iter(obstore.list(store, None, chunk_size=1)), []))
        del pages

    def write_whole(self, path: str, data: bytes) -> None:
        """Upload ``data`` as a new object; one that exists already is never replaced."""
        try:
            self.call("upload", path, obstore.put, path, data, mode="create")
        except CONDITION_FAILED:
            raise StorageError(f"cannot upload {self.full_path(path)}: the object exists already") from None
        self._written.wrote(path, data)


class _ObjectInput:
    def __init__(self, io: ObjectFileIO, path: str):
        self._io, self._path = io, path

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self._io.read_at(self._path, offset, nbytes)

    def __enter__(self) -> _ObjectInput:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
