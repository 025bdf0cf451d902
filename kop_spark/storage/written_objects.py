"""The bytes of the objects a process uploaded lately, kept for its own reads of them: a consumer
tailing a partition reads each ledger moments after the server uploaded it, and the writer merging
small ledgers in passing reads them back, a GET each on an object store where the bytes were in
memory a moment before (Pulsar's broker serves tailing reads from its managed-ledger cache alike).
An object is written once and never changed, so what is kept stays true until it is deleted."""

from __future__ import annotations

import threading
from collections import OrderedDict


class WrittenObjects:
    """Up to ``capacity`` bytes of uploaded objects, the oldest dropped first; an object larger
    than ``largest``, or than a sixteenth of the capacity, is not kept: a produce's ledger is small,
    where the ledgers a compaction or a Spark task writes are large and read by others, later, if
    at all (a compaction kept its output, and a process compacting held it all)."""

    def __init__(self, capacity: int, largest: int):
        self._capacity = capacity
        self._largest = min(largest, capacity // 16)
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def wrote(self, path: str, data: bytes) -> None:
        if not data or len(data) > self._largest:
            return
        with self._lock:
            self._drop(path)
            self._kept[path] = data
            self._size += len(data)
            while self._size > self._capacity:
                self._drop(next(iter(self._kept)))

    def read(self, path: str, offset: int, length: int) -> bytes | None:
        """The bytes asked for, if the object is kept and holds them all; else None."""
        with self._lock:
            data = self._kept.get(path)
        if data is None or offset < 0 or offset + length > len(data):
            return None
        return data[offset : offset + length]

    def deleted(self, paths: list[str]) -> None:
        with self._lock:
            for path in paths:
                self._drop(path)

    def _drop(self, path: str) -> None:
        data = self._kept.pop(path, None)
        if data is not None:
            self._size -= len(data)
