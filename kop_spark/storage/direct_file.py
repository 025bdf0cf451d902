"""A new file written around the page cache (``O_DIRECT``), for large files written once and read
by others later: a Spark task's staged ledger.

Writing through the page cache copies every byte into pages the kernel must first find, and on
a virtual machine whose free memory goes back to the host those pages fault in the hypervisor as
well: bench/spark_write.py measured a task spending most of its CPU time in that copy. With
``O_DIRECT`` the device reads the bytes straight from one reused, page-aligned buffer, as
BookKeeper's direct-I/O entry logger does. The file's bytes are staged in that buffer and written
a whole buffer at a time; ``sync`` writes the tail too (padded to a block, then cut back), so what
was written before a ``sync`` is in the file for any reader, durable when ``sync`` is on.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Sequence

from .fileio import storage_error

_BLOCK = 4096  # O_DIRECT offsets and sizes: a multiple of the device's logical block, 4096 at most
_BUFFER_BYTES = 256 << 10  # per open file: a task writing 128 partitions holds 128 (writes of 1 MiB were no faster)
_POOL_BYTES = 32 << 20  # free buffers kept for the next files


class _BufferPool:
    """Page-aligned buffers kept for reuse once their file is closed, as Kafka's producer pools its
    batch buffers: a fresh anonymous mapping faults in, zeroed, every page it is first written to,
    which cost a task writing 128 partitions a fifth of its time; a Spark worker's next task gets
    the same pages back."""

    def __init__(self, limit: int):
        self._free: list[mmap.mmap] = []
        self._limit = limit // _BUFFER_BYTES

    def take(self) -> mmap.mmap:
        try:
            return self._free.pop()
        except IndexError:
            return mmap.mmap(-1, _BUFFER_BYTES)  # anonymous mappings are page-aligned

    def give(self, buffer: mmap.mmap) -> None:
        if len(self._free) < self._limit:
            self._free.append(buffer)
        else:
            buffer.close()


_POOL = _BufferPool(_POOL_BYTES)


def open_direct(path: str) -> int | None:
    """A new file at ``path`` opened for direct writes, or None where the filesystem refuses them
    (tmpfs and some FUSE mounts: EINVAL), with nothing created."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        # read and write: a truncate reads back the block it cuts into
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flag, 0o644)
    except OSError as e:
        if e.errno == errno.EINVAL:  # no direct I/O here
            return None
        raise


class DirectFile:
    """A file one writer appends to through an aligned buffer of 256 KiB, written with ``O_DIRECT``
    (see the module). ``position`` is where the next write goes; a write that fails part way leaves the file
    ``torn`` until ``truncate`` takes it back to a length known to be good."""

    def __init__(self, path: str, fd: int, sync: bool):
        self.path = path
        self._fd = fd
        self._sync = sync
        self._buffer = _POOL.take()
        self._written = 0  # bytes of the file on the device before the buffer's: whole blocks
        self._filled = 0  # bytes in the buffer, which stand at ``_written`` in the file
        self._good = 0  # the position before the last write: where a torn file is taken back to
        self.torn = False

    @property
    def position(self) -> int:
        return self._written + self._filled

    def write(self, data: bytes | memoryview) -> int:
        return self.write_parts([data])

    def write_parts(self, parts: Sequence[bytes | memoryview]) -> int:
        if self.torn:
            self.truncate(self._good)
        at = self._good = self.position
        self.torn = True  # until every byte is in
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                n = min(len(view), _BUFFER_BYTES - self._filled)
                self._buffer[self._filled : self._filled + n] = view[:n]
                self._filled += n
                view = view[n:]
                if self._filled == _BUFFER_BYTES:
                    self._write_buffer(_BUFFER_BYTES)
                    self._written += _BUFFER_BYTES
                    self._filled = 0
        self.torn = False
        return at

    def _write_buffer(self, size: int) -> None:
        try:
            n = os.pwrite(self._fd, memoryview(self._buffer)[:size], self._written)
        except OSError as e:
            raise storage_error("write to", self.path, e) from e
        if n != size:  # the rest would be unaligned: a full device, as a short write is elsewhere
            raise storage_error("write to", self.path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    def sync(self) -> None:
        """Put the buffered tail in the file (a whole block, then cut back to ``position``), and
        make the file durable when syncing is on."""
        if self.torn:
            self.truncate(self._good)
        if self._filled:
            padded = -(-self._filled // _BLOCK) * _BLOCK
            self._buffer[self._filled : padded] = bytes(padded - self._filled)
            self._write_buffer(padded)
        try:
            os.ftruncate(self._fd, self.position)
            if self._sync:
                os.fsync(self._fd)
        except OSError as e:
            raise storage_error("sync", self.path, e) from e

    def truncate(self, length: int) -> None:
        """Take the file back to ``length``. Below what is on the device already, the buffer then
        holds the file from the block boundary below ``length``, read back from the device."""
        try:
            if length >= self._written:
                self._filled = length - self._written
            else:
                start = length - length % _BLOCK
                if length > start:
                    got = os.preadv(self._fd, [memoryview(self._buffer)[:_BLOCK]], start)
                    if got < length - start:
                        raise OSError(errno.EIO, f"read {got} bytes back, not {length - start}")
                self._written, self._filled = start, length - start
            os.ftruncate(self._fd, length)
        except OSError as e:
            raise storage_error("truncate", self.path, e) from e
        self.torn = False

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
            _POOL.give(self._buffer)
