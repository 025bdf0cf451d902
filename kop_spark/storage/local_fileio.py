"""The store's files on a POSIX filesystem: appends, fsync, truncate, rename, as writers need them.

Reads go through pyarrow, so a root on any filesystem pyarrow knows (hdfs://...) can be read (large
reads of a local disk are mapped instead); writes need the root on a local or mounted POSIX
filesystem.
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import FileMissingError, StorageError
from .direct_file import DirectFile, open_direct
from .fileio import FileIO, NewFile, WholeFile, storage_error, write_all

_DELETE_TREE_ATTEMPTS = 10
_IOV_MAX = 1024  # buffers one pwritev takes on Linux and the BSDs
_WRITEBACK_BYTES = 8 << 20
_FADV_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None)
_MAP_MIN_BYTES = 256 << 10  # below this, copying a read costs less than mapping and unmapping it


class AppendFile:
    """A file that one writer appends to: write, sync, truncate back to a known-good length.

    ``position`` is where the next write goes. A write that fails part way (a full disk, an I/O
    error, an exception in the middle) may leave bytes past it: the file is then ``torn`` until
    its owner truncates it back to a length it knows to be good."""

    def __init__(self, path: str, fd: int, position: int, sync: bool):
        self.path = path
        self._fd = fd
        self.position = position
        self.torn = False
        self._sync = sync
        self._hinted = position  # written back up to here, or asked to be

    def _start_writeback(self) -> None:
        # A large file written and synced at the end (a staged ledger) would make that sync wait
        # for all of it: ask the kernel to start writing back as we go, as PostgreSQL's
        # pg_flush_data does, so the final sync waits for the tail only. A hint: never waits.
        if self._sync and self.position - self._hinted >= _WRITEBACK_BYTES and _FADV_DONTNEED is not None:
            try:
                os.posix_fadvise(self._fd, self._hinted, self.position - self._hinted, _FADV_DONTNEED)
            except OSError:
                pass
            self._hinted = self.position

    def write(self, data: bytes | memoryview) -> int:
        """Append ``data``; return the position it was written at."""
        return self.write_parts([data])

    def write_parts(self, parts: Sequence[bytes | memoryview]) -> int:
        """Append the concatenation of ``parts`` in one gathered write, without joining them first."""
        if self.torn:  # an earlier write failed part way: drop what it left first
            self.truncate(self.position)
        at = self.position
        total = sum(len(p) for p in parts)
        self.torn = True  # until every byte is written
        try:
            gathered = hasattr(os, "pwritev") and 1 < len(parts) <= _IOV_MAX
            n = os.pwritev(self._fd, parts, at) if gathered else 0
            if n < total:  # one part, too many parts, or a short gathered write: finish plainly
                rest = memoryview(b"".join(parts) if len(parts) > 1 else parts[0])[n:]
                write_all(self._fd, rest, at + n)
        except OSError as e:
            raise storage_error("write to", self.path, e) from e
        self.position = at + total
        self.torn = False
        self._start_writeback()
        return at

    def sync(self) -> None:
        if self._sync:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise storage_error("sync", self.path, e) from e

    def truncate(self, length: int) -> None:
        try:
            os.ftruncate(self._fd, length)
        except OSError as e:
            raise storage_error("truncate", self.path, e) from e
        self.position = length
        self.torn = False

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


class LocalFileIO(FileIO):
    """Files under a POSIX root (or, read-only, any filesystem pyarrow knows: hdfs://...)."""

    supports_append = True

    def __init__(self, uri: str, *, sync: bool = True):
        try:
            if "://" in uri:
                self.fs, root = pafs.FileSystem.from_uri(uri)
            else:
                self.fs, root = pafs.LocalFileSystem(), os.path.abspath(uri)
        except (pa.ArrowInvalid, OSError) as e:
            raise StorageError(f"cannot open store root {uri!r}: {e}") from e
        super().__init__(uri, root, sync=sync)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self._maps = self.is_local and os.name == "posix"  # Windows cannot delete a mapped file

    # -- reads (any filesystem) -------------------------------------------------------------

    def open_input(self, path: str) -> pa.NativeFile:
        full = self.full_path(path)
        try:
            return self.fs.open_input_file(full)
        except (OSError, pa.ArrowException) as e:
            raise storage_error("open", full, e) from e

    def read_at(self, path: str, offset: int, length: int) -> bytes:
        with self.open_input(path) as f:
            try:
                return f.read_at(length, offset)
            except (OSError, pa.ArrowException) as e:
                raise storage_error("read", self.full_path(path), e) from e

    def read_view(self, path: str, offset: int, length: int) -> bytes | memoryview:
        """The bytes mapped into memory, not copied, on a local disk: copying them out of the page
        cache took a fifth of a Spark read task's CPU time (bench/spark_read.py). The
        mapping lives as long as a view of it. The bytes must be ones no writer truncates: a file
        cut short under a mapping kills the process that touches the lost pages (SIGBUS), and kop's
        writers truncate a ledger only past its confirmed length. A file already shorter than the
        read, or one that cannot be mapped (some FUSE mounts), is read as ``read_at`` reads it."""
        if not self._maps or length < _MAP_MIN_BYTES:
            return self.read_at(path, offset, length)
        full = self.full_path(path)
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError as e:
            raise storage_error("open", full, e) from e
        try:
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            # ValueError: the file ends before the read does (Python checks), read short below
            mapped = mmap.mmap(fd, offset + length - start, prot=mmap.PROT_READ, offset=start)
            return memoryview(mapped)[offset - start :]
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)
        return self.read_at(path, offset, length)

    def size(self, path: str) -> int:
        full = self.full_path(path)
        info = self.fs.get_file_info(full)
        if info.type != pafs.FileType.File:
            raise FileMissingError(f"cannot read {full}: no such file")
        return info.size

    def exists(self, path: str) -> bool:
        full = self.full_path(path)
        try:
            return self.fs.get_file_info(full).type == pafs.FileType.File
        except (OSError, pa.ArrowException) as e:
            raise storage_error("look for", full, e) from e

    def list_dir(self, path: str) -> list[str]:
        """Names in a directory; empty if it does not exist."""
        full = self.full_path(path)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(full, allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            raise storage_error("list", full, e) from e
        return sorted(i.base_name for i in infos)

    # -- writes (POSIX) --------------------------------------------------------------------

    def _require_local(self, action: str, path: str) -> str:
        if not self.is_local:
            raise StorageError(
                f"cannot {action} {self.full_path(path)}: writing needs the store root on a local or mounted "
                f"POSIX filesystem; {self.uri!r} is {self.fs.type_name}"
            )
        return self.full_path(path)

    def create(self, path: str, direct: bool = False) -> NewFile:
        """Create a new file (never an existing one) for appending; ``direct``: written with
        ``O_DIRECT`` (``direct_file``) where the filesystem takes it."""
        full = self._require_local("create", path)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fd = open_direct(full) if direct else None
            f: NewFile
            if fd is not None:
                f = DirectFile(full, fd, self.sync)
            else:
                f = AppendFile(full, os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), 0, self.sync)
        except OSError as e:
            raise storage_error("create", full, e) from e
        try:
            self.sync_dir(os.path.dirname(full))
        except BaseException:
            f.close()
            raise
        return f

    def reopen(self, path: str, length: int) -> AppendFile:
        """Reopen a file this writer created, dropping anything after ``length``."""
        full = self._require_local("reopen", path)
        try:
            fd = os.open(full, os.O_WRONLY)
        except OSError as e:
            raise storage_error("reopen", full, e) from e
        f = AppendFile(full, fd, length, self.sync)
        try:
            f.truncate(length)
        except BaseException:
            f.close()
            raise
        return f

    def delete(self, path: str) -> None:
        full = self.full_path(path)
        try:
            self.fs.delete_file(full)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as e:
            if self.fs.get_file_info(full).type == pafs.FileType.NotFound:
                return
            raise storage_error("delete", full, e) from e

    def delete_dir_if_empty(self, path: str) -> None:
        if self.is_local:
            try:
                os.rmdir(self.full_path(path))
            except OSError:
                pass

    def rename(self, moves: Sequence[tuple[str, str]]) -> None:
        """Move files within the root (each atomic on POSIX), creating the targets' directories;
        each directory moved into is synced once, after the last move: a partition's commit moves
        one staged ledger per Spark task into it."""
        targets: set[str] = set()
        for src, dst in moves:
            full_src, full_dst = self._require_local("move", src), self._require_local("move", dst)
            target = os.path.dirname(full_dst)
            try:
                if target not in targets:
                    os.makedirs(target, exist_ok=True)
                    targets.add(target)
                os.rename(full_src, full_dst)
            except OSError as e:
                raise storage_error(f"move {full_src} to", full_dst, e) from e
        for directory in sorted(targets):
            self.sync_dir(directory)

    def touch(self, path: str) -> None:
        """Create the file if need be and set its modification time to now: a heartbeat."""
        full = self._require_local("touch", path)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.close(os.open(full, os.O_WRONLY | os.O_CREAT, 0o644))
            os.utime(full)
        except OSError as e:
            raise storage_error("touch", full, e) from e

    def delete_tree(self, path: str) -> None:
        """Delete a directory and everything in it; nothing if it does not exist. A file made
        in it meanwhile (a task still writing into its job's staging as the job is aborted,
        which removes what it makes after) is taken by a removal again."""
        full = self._require_local("delete", path)
        for attempt in range(_DELETE_TREE_ATTEMPTS):
            try:
                shutil.rmtree(full)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.ENOTEMPTY or attempt == _DELETE_TREE_ATTEMPTS - 1:
                    raise storage_error("delete", full, e) from e

    def walk_files(self, path: str) -> list[tuple[str, float]]:
        """``(path relative to the root, modification time in seconds)`` of every file under ``path``."""
        full = self.full_path(path)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(full, recursive=True, allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            raise storage_error("list", full, e) from e
        return [(i.path[len(self.root) + 1 :], i.mtime.timestamp()) for i in infos if i.type == pafs.FileType.File]

    def sync_dir(self, full_dir: str) -> None:
        """Make a directory's new entries durable (POSIX needs the directory itself fsynced)."""
        if not self.sync:
            return
        try:
            fd = os.open(full_dir, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def ensure_writable_root(self) -> None:
        """Fail early, naming the root, when it cannot be created or written."""
        full = self._require_local("write to", "")
        try:
            os.makedirs(full, exist_ok=True)
        except OSError as e:
            raise storage_error("create store root", full, e) from e
        if not os.access(full, os.W_OK | os.X_OK):
            raise StorageError(f"cannot write to store root {full}: permission denied")


class WholeFileIO(LocalFileIO):
    """A local path that takes only whole files written sequentially: a Databricks UC Volume or
    /dbfs mount, which refuse appends, random writes and hard links and have no atomic create.
    Ledgers are written as objects are on an object store (sealed, then written once); nothing
    here appends, truncates, renames, links or locks."""

    supports_append = False

    def create(self, path: str, direct: bool = False) -> NewFile:
        return WholeFile(self, path)

    def reopen(self, path: str, length: int) -> AppendFile:
        raise StorageError(f"cannot reopen {self.full_path(path)}: {self.uri} takes whole files only")

    def rename(self, moves: Sequence[tuple[str, str]]) -> None:
        raise StorageError(f"cannot move {self.full_path(moves[0][0])}: {self.uri} takes whole files only")

    def write_whole(self, path: str, data: bytes) -> None:
        full = self._require_local("write", path)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
                f.flush()
                if self.sync:
                    os.fsync(f.fileno())
        except OSError as e:
            raise storage_error("write", full, e) from e

    def touch(self, path: str) -> None:
        self.write_whole(path, b"")
