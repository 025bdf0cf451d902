"""The metadata store as a directory of versioned files: the default beside a POSIX root.

Each key is a directory of immutable version files ``<version>.json``. A compare-and-set writes
the new value to a temporary file, then hard-links it to the name of the next version: ``link``
fails if that name exists, so of several writers that read the same version exactly one wins,
and a reader never sees a half-written value. This holds on local disks and on POSIX shared
filesystems (NFSv3+ makes link atomic). Old versions are pruned; see ``_link`` for why that stays
safe. Values stay plain JSON, readable with any tool.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import uuid
from collections.abc import Hashable

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import BadVersionError, CorruptMetadataError, StorageError
from ..fileio import write_all
from ..metadata_store import MetadataStore, Versioned, check_key

_KEEP_VERSIONS = 4  # older versions are pruned; readers that listed them retry
# A key's directory changes with every write (a temporary file made, a version linked, old ones
# pruned), so its status tells a reader cheaply whether the key changed, once the clock is this
# far past its last change: a write within the filesystem's timestamp granularity of the one
# before may leave the times as they were (git's "racily clean" entries), a later one may not.
_SETTLED_MS = 1000

log = logging.getLogger(__name__)


class FileMetadataStore(MetadataStore):
    # Updates wait on the filesystem's journal, which takes their fsyncs in turn: past four at once,
    # a 32- or 128-partition sink commit ran no faster and spent more CPU.
    update_parallelism = 4
    read_parallelism = 1  # a read of a local file waits on no one
    unprobed_when_changed = True  # see probe: a directory changed within _SETTLED_MS

    def __init__(self, directory: str, *, sync: bool = True, clock: Clock = SYSTEM_CLOCK):
        self.directory = os.path.abspath(directory)
        self._sync = sync
        self._clock = clock

    def _dir(self, key: str) -> str:
        return _key_dir(self.directory, key)

    @staticmethod
    def _versions(d: str) -> list[int]:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot list metadata {d}: {e.strerror}") from e
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def get(self, key: str) -> Versioned:
        d = self._dir(key)
        for _ in range(100):
            versions = self._versions(d)
            if not versions:
                return Versioned(None, 0)
            path = os.path.join(d, f"{versions[-1]:020d}.json")
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue  # pruned under us by a newer write: look again
            except OSError as e:
                raise StorageError(f"cannot read metadata {path}: {e.strerror}") from e
            try:
                return Versioned(json.loads(data), versions[-1])
            except ValueError as e:
                raise CorruptMetadataError(
                    f"metadata file {path} is not valid JSON ({e}); `kop repair` restores the last whole version"
                ) from e
        raise StorageError(f"metadata {d} keeps changing under the reader")

    def probe(self, key: str) -> Hashable | None:
        try:
            st = os.stat(self._dir(key))
        except OSError:
            return None
        if st.st_mtime_ns // 1_000_000 > self._clock.now_ms() - _SETTLED_MS:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_ctime_ns

    def put(self, key: str, value: dict | None, expected_version: int) -> int:
        d = self._dir(key)
        new_version = expected_version + 1
        target = os.path.join(d, f"{new_version:020d}.json")
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        tmp = os.path.join(d, f".tmp.{uuid.uuid4().hex}")
        try:
            os.makedirs(d, exist_ok=True)
            try:
                self._write_temporary(tmp, data)
                self._link(key, d, tmp, target, expected_version)
            finally:
                _unlink_quietly(tmp)
        except BadVersionError:
            raise
        except OSError as e:
            raise StorageError(f"cannot write metadata {target}: {e.strerror or e}") from e
        # The new version is published: from here on nothing may report the write as failed, or
        # a caller would retry what is already stored. Making the directory entry durable and
        # pruning are clean-up.
        try:
            if self._sync:
                _fsync_dir(d)
            self._prune(d, new_version)
        except OSError as e:
            log.warning("metadata %s: version %d is written, but clean-up failed: %s", key, new_version, e)
        return new_version

    def _write_temporary(self, tmp: str, data: bytes) -> None:
        """The whole value, synced, in a file nobody reads: only complete values get linked in."""
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, data)
            if self._sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _link(self, key: str, d: str, tmp: str, target: str, expected_version: int) -> None:
        with _KeyLock(d, exclusive=False):
            # Pruning frees old names, so linking is only an exact compare-and-set while the
            # expected version still exists: pruning (under the exclusive lock) deletes versions
            # oldest first and always keeps the newest, so if ours is there, no newer one can have
            # been pruned.
            if expected_version > 0:
                if not os.path.exists(os.path.join(d, f"{expected_version:020d}.json")):
                    raise BadVersionError(f"metadata {key} is past version {expected_version}")
            elif self._versions(d):
                raise BadVersionError(f"metadata {key} already exists")
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise BadVersionError(
                    f"metadata {key} was changed concurrently (version {expected_version + 1} exists)"
                ) from None

    def _prune(self, d: str, latest: int) -> None:
        if latest <= _KEEP_VERSIONS:
            return
        lock = _KeyLock(d, exclusive=True, blocking=False)
        if not lock.acquire():
            return  # a writer is mid-CAS; the next write prunes
        try:
            for old in self._versions(d):
                if old > latest - _KEEP_VERSIONS:
                    break
                try:
                    os.unlink(os.path.join(d, f"{old:020d}.json"))
                except FileNotFoundError:
                    pass
        finally:
            lock.release()

    def discard_unreadable(self, key: str, dry_run: bool = False) -> list[str]:
        """Remove the newest versions of ``key`` that cannot be parsed (torn writes of earlier
        versions of kop), so that the last whole one is current again; the files removed (with
        ``dry_run``, the files that would be)."""
        d = self._dir(key)
        removed = []
        with _KeyLock(d, exclusive=True):
            for version in reversed(self._versions(d)):
                path = os.path.join(d, f"{version:020d}.json")
                try:
                    with open(path, "rb") as f:
                        json.loads(f.read())
                    break
                except ValueError:
                    if not dry_run:
                        os.unlink(path)
                    removed.append(path)
        return removed

    def list_keys(self, prefix: str) -> list[str]:
        base = self._dir(prefix) if prefix else self.directory
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            if dirpath != base and any(n.endswith(".json") for n in filenames):
                out.append(os.path.relpath(dirpath, self.directory).replace(os.sep, "/"))
        return sorted(out)

    def __repr__(self) -> str:
        return f"FileMetadataStore({self.directory!r})"


@functools.lru_cache(maxsize=1 << 16)  # a parked fetch probes each partition's key many times a second
def _key_dir(directory: str, key: str) -> str:
    return os.path.join(directory, *check_key(key))


class _KeyLock:
    """An flock on a key's lock file: the kernel drops it when its holder dies, even by kill -9."""

    def __init__(self, d: str, *, exclusive: bool, blocking: bool = True):
        self._path = os.path.join(d, ".lock")
        self._mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB)
        self._fd = -1

    def acquire(self) -> bool:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, self._mode)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            return False
        return True

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1

    def __enter__(self) -> _KeyLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("cannot remove temporary metadata file %s: %s", path, e)


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
