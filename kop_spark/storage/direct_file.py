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
import threading
from collections.abc import Sequence

from .fileio import storage_error

_BLOCK = 4096  # O_DIRECT offsets and sizes: a multiple of the device's logical block, 4096 at most
# A file's buffer while few are open: on the bench machine's VM each write costs a VM exit, and
# 256 KiB writes cost a sink task a quarter more CPU than 1 MiB ones; larger ones cost no less.
MAX_BUFFER_BYTES = 1 << 20
MIN_BUFFER_BYTES = 128 << 10
BUFFER_BUDGET = 32 << 20  # what open files' buffers should take, and the most kept free


class BufferPool:
    """Page-aligned buffers for direct writes, sized to what open files hold and kept for reuse once
    their file is closed, as Kafka's producer pools its batch buffers.

    A file gets 1 MiB while the open files' buffers fit the budget, and less (down to 128 KiB) past
    it: a task writing 128 partitions holds 128 at once. A fresh anonymous mapping faults in, zeroed,
    every page it is first written to, which cost such a task a fifth of its time, so freed buffers
    are kept (up to the budget): a Spark worker's next task gets the same pages back."""

    def __init__(self, budget: int = BUFFER_BUDGET):
        self._budget = budget
        self._lock = threading.Lock()
        self._free: dict[int, list[mmap.mmap]] = {}
        self._free_bytes = 0
        self._in_use = 0

    def take(self) -> mmap.mmap:
        with self._lock:
            size = MAX_BUFFER_BYTES
            while size > MIN_BUFFER_BYTES and self._in_use + size > self._budget:
                size //= 2
            self._in_use += size
            free = self._free.get(size)
            if free:
                self._free_bytes -= size
                return free.pop()
        return mmap.mmap(-1, size)  # anonymous mappings are page-aligned

    def give(self, buffer: mmap.mmap) -> None:
        size = len(buffer)
        with self._lock:
            self._in_use -= size
            if self._free_bytes + size <= self._budget:
                self._free.setdefault(size, []).append(buffer)
                self._free_bytes += size
                return
        buffer.close()


_POOL = BufferPool()


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
    """A file one writer appends to through an aligned buffer (``BufferPool``), written with ``O_DIRECT``
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
        size = len(self._buffer)
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                n = min(len(view), size - self._filled)
                self._buffer[self._filled : self._filled + n] = view[:n]
                self._filled += n
                view = view[n:]
                if self._filled == size:
                    self._write_buffer(size)
                    self._written += size
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
