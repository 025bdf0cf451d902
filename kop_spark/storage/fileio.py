"""The store's files: one interface over the root's filesystem, chosen by the root's URI scheme.

A local path or ``file://`` root is a POSIX filesystem (``local_fileio``): writers append to their
open ledgers, fsync and truncate them. An ``s3://``, ``gs://``, ``az://`` or ``abfs[s]://`` root is an
object store (``object_fileio``): objects are written whole, once, and never changed, so a writer
seals a ledger before it uploads it (``supports_append`` tells which). Paths given to the methods
are relative to the root. Every failure leaves here as a ``StorageError`` naming the file and what
was being done to it.
"""

from __future__ import annotations

import abc
import errno
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Protocol

from ..errors import FileMissingError, StorageError
from .object_store import is_object_store_uri


def storage_error(action: str, path: str, e: BaseException) -> StorageError:
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    cls = FileMissingError if isinstance(e, FileNotFoundError) else StorageError
    return cls(f"cannot {action} {path}: {reason}")


def write_all(fd: int, data: bytes | memoryview, position: int | None = None) -> int:
    """Write every byte of ``data`` (at ``position``, or at the file offset), resuming short
    writes; a write that makes no progress is a full disk. Returns the bytes written."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        chunk = view[done:]
        n = os.write(fd, chunk) if position is None else os.pwrite(fd, chunk, position + done)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done += n
    return done


class RandomAccess(Protocol):
    """A file open for reading at any position."""

    def read_at(self, nbytes: int, offset: int) -> bytes: ...

    def __enter__(self) -> RandomAccess: ...

    def __exit__(self, *exc: object) -> None: ...


class NewFile(Protocol):
    """A file being written by its one writer. ``position`` is where the next write goes; ``sync``
    makes what was written durable (on an object store: uploads it, once); ``torn`` says a write
    failed part way and left bytes past ``position``."""

    torn: bool

    @property
    def position(self) -> int: ...

    def write(self, data: bytes | memoryview) -> int: ...

    def write_parts(self, parts: Sequence[bytes | memoryview]) -> int: ...

    def sync(self) -> None: ...

    def truncate(self, length: int) -> None: ...

    def close(self) -> None: ...


class FileIO(abc.ABC):
    """Files under one root URI."""

    supports_append: bool = False  # files can be reopened, appended to and renamed
    # Reads of up to this many bytes cost about what a read of one byte does: a ledger's reader
    # then takes a small ledger whole rather than its trailer, table and entries in turn.
    small_read_bytes: int = 0
    read_parallelism: int = 1  # reads of different files worth running at once (see ``at_once``)
    write_parallelism: int = 1  # and writes

    def __init__(self, uri: str, root: str, *, sync: bool = True):
        self.uri = uri
        self.root = root.rstrip("/")
        self.sync = sync

    def full_path(self, path: str) -> str:
        """The file's name in messages."""
        return f"{self.root}/{path}" if path else self.root

    # -- reads --------------------------------------------------------------------------------

    @abc.abstractmethod
    def open_input(self, path: str) -> RandomAccess: ...

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        with self.open_input(path) as f:
            return f.read_at(length, offset)

    def read_view(self, path: str, offset: int, length: int) -> bytes | memoryview:
        """As ``read_at``, for a large read of bytes no writer changes any more (a ledger's
        confirmed part): a backend may hand out a read-only view of them instead of a copy."""
        return self.read_at(path, offset, length)

    @abc.abstractmethod
    def size(self, path: str) -> int: ...

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Names in a directory; empty if it does not exist."""

    @abc.abstractmethod
    def walk_files(self, path: str) -> list[tuple[str, float]]:
        """``(path relative to the root, modification time in seconds)`` of every file under ``path``."""

    # -- writes -------------------------------------------------------------------------------

    @abc.abstractmethod
    def create(self, path: str, direct: bool = False) -> NewFile:
        """A new file (never an existing one) for its one writer. ``direct``: a large file written
        once and read later, which a local disk takes around the page cache where it can."""

    def reopen(self, path: str, length: int) -> NewFile:
        """Reopen a file this writer created, dropping anything after ``length``."""
        raise StorageError(f"cannot reopen {self.full_path(path)}: {self.uri} does not support appends")

    def rename(self, moves: Sequence[tuple[str, str]]) -> None:
        """Move files (source, target) within the root, each atomically; durable together."""
        raise StorageError(f"cannot move {self.full_path(moves[0][0])}: {self.uri} does not support renames")

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Delete a file; nothing if it is not there."""

    @abc.abstractmethod
    def delete_tree(self, path: str) -> None:
        """Delete everything under ``path``; nothing if there is nothing."""

    @abc.abstractmethod
    def delete_dir_if_empty(self, path: str) -> None:
        """Remove an empty directory, where there are directories."""

    @abc.abstractmethod
    def touch(self, path: str) -> None:
        """Create the file if need be and set its modification time to now: a heartbeat."""

    @abc.abstractmethod
    def ensure_writable_root(self) -> None:
        """Fail early, naming the root, when it cannot be written."""

    def write_whole(self, path: str, data: bytes) -> None:
        """Store a new file's whole content in one go: how files are written without appends."""
        raise StorageError(f"cannot write {self.full_path(path)} whole on {self.uri}")

    def disk_usage(self) -> tuple[int, int] | None:
        """The total and usable bytes of the filesystem the root is on (what DescribeLogDirs
        tells, KIP-827); None on an object store."""
        local = optional_local_dir(self.uri)
        if local is None:
            return None
        while not os.path.exists(local):  # a root nothing was written to yet: the disk it will be on
            local = os.path.dirname(local)
        usage = shutil.disk_usage(local)
        return usage.total, usage.free


class WholeFile:
    """A new file written whole, once: writes gather in memory until ``sync`` hands them to
    ``FileIO.write_whole``; after that it is immutable. Closed without a sync, nothing was stored."""

    def __init__(self, io: FileIO, path: str):
        self.path = path
        self._io = io
        self._data = bytearray()
        self._uploaded = False
        self.torn = False

    @property
    def position(self) -> int:
        return len(self._data)

    def _check_open(self) -> None:
        if self._uploaded:
            raise StorageError(f"cannot change {self._io.full_path(self.path)}: files written whole are immutable")

    def write(self, data: bytes | memoryview) -> int:
        return self.write_parts([data])

    def write_parts(self, parts: Sequence[bytes | memoryview]) -> int:
        self._check_open()
        at = len(self._data)
        for p in parts:
            self._data += p
        return at

    def sync(self) -> None:
        if not self._uploaded:
            self._io.write_whole(self.path, bytes(self._data))
            self._uploaded = True

    def truncate(self, length: int) -> None:
        if length != len(self._data):
            self._check_open()
            del self._data[length:]

    def close(self) -> None:
        self._data = bytearray()


# Databricks' FUSE mounts of cloud storage: whole sequential files only (no append, no link).
WHOLE_FILE_MOUNTS = ("/Volumes/", "/dbfs/")


def takes_whole_files_only(uri: str, whole_files: bool = False) -> bool:
    """Whether ``uri`` is a local path where files must be written whole (``wholeFileWrites``)."""
    local = optional_local_dir(uri)
    return local is not None and (whole_files or (local + "/").startswith(WHOLE_FILE_MOUNTS))


def open_fileio(
    uri: str,
    *,
    sync: bool = True,
    options: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    whole_files: bool = False,
    cache_bytes: int = 0,
) -> FileIO:
    """The files under ``uri``: an object store for its schemes, else a local or pyarrow filesystem,
    written whole under ``WHOLE_FILE_MOUNTS`` or with ``whole_files``. ``options`` are object-store
    settings (credentials, endpoints) over the environment's; ``cache_bytes``: how much of the
    objects uploaded lately an object store keeps for reads (``WrittenObjects``)."""
    if is_object_store_uri(uri):
        from .object_fileio import ObjectFileIO
        from .object_store import parse_location

        return ObjectFileIO(uri, parse_location(uri), options or {}, timeout_s=timeout_s, cache_bytes=cache_bytes)
    from .local_fileio import LocalFileIO, WholeFileIO

    return (WholeFileIO if takes_whole_files_only(uri, whole_files) else LocalFileIO)(uri, sync=sync)


def optional_local_dir(uri: str) -> str | None:
    """The local directory a URI names, or None when it is not on the local filesystem."""
    if "://" not in uri:
        return os.path.abspath(uri)
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None
