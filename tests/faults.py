"""Fault injection for the storage layer: every call that changes a file is a step, and a fault
can be made to land at any one of them.

``FaultyOS`` stands in for the ``os`` module inside ``kop_spark.storage.fileio``, ``local_fileio``,
``direct_file`` and ``kop_spark.storage.metadata.file`` (and ``FileIO.delete``, which goes through
pyarrow, is wrapped too). At step ``at`` it raises instead of making the call, makes the call and then raises (the
case kill -9 never shows: the step happened and clean-up code runs), or writes half of what it
was asked to and returns the short count.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kop_spark import layout
from kop_spark.storage import direct_file, local_fileio
from kop_spark.storage import fileio as fileio_module
from kop_spark.storage.metadata import file as metadata_module

CHANGING = ("open", "pwrite", "pwritev", "write", "fsync", "ftruncate", "link", "unlink", "rename", "makedirs")


class Boom(Exception):
    """An exception of the user's own (a callback's, a library's) landing inside a write."""


@dataclass(frozen=True)
class Fault:
    name: str
    make: Callable[[], BaseException] | None  # None: a short write
    after: bool = False  # raise once the real call has been made

    def __str__(self) -> str:
        return self.name


FAULTS = (
    Fault("KeyboardInterrupt before", KeyboardInterrupt),
    Fault("KeyboardInterrupt after", KeyboardInterrupt, after=True),
    Fault("ENOSPC", lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))),
    Fault("EIO after", lambda: OSError(errno.EIO, os.strerror(errno.EIO)), after=True),
    Fault("custom exception after", lambda: Boom("boom"), after=True),
    Fault("short write", None),
)


class Injector:
    def __init__(self, at: int | None = None, fault: Fault | None = None):
        self.at = at
        self.fault = fault
        self.steps = 0
        self.fired: str | None = None
        self._lock = threading.Lock()  # steps taken at once (a topic's partitions deleted together) count apart

    def step(self, name: str, call: Callable, *args, **kwargs):
        with self._lock:
            self.steps += 1
            step = self.steps
        if step != self.at or self.fault is None:
            return call(*args, **kwargs)
        self.fired = f"{self.fault} {name} (step {step})"
        if self.fault.make is None:
            return self._short(name, call, *args)
        if not self.fault.after:
            raise self.fault.make()
        call(*args, **kwargs)
        raise self.fault.make()

    @staticmethod
    def _short(name: str, call: Callable, *args):
        """Half of a write; other calls go through untouched."""
        if name == "pwrite":
            fd, data, position = args
            return call(fd, memoryview(data)[: max(len(data) // 2, 1)], position)
        if name == "write":
            fd, data = args
            return call(fd, memoryview(data)[: max(len(data) // 2, 1)])
        if name == "pwritev":
            fd, parts, position = args
            return call(fd, list(parts)[:1], position) if len(parts) > 1 else call(*args)
        return call(*args)


class FaultyOS:
    def __init__(self, injector: Injector):
        self._injector = injector

    def __getattr__(self, name: str):
        real = getattr(os, name)
        if name not in CHANGING:
            return real
        return lambda *args, **kwargs: self._injector.step(name, real, *args, **kwargs)


@contextlib.contextmanager
def injected(monkeypatch, injector: Injector) -> Iterator[Injector]:
    faulty = FaultyOS(injector)
    with monkeypatch.context() as m:
        m.setattr(fileio_module, "os", faulty)  # write_all
        m.setattr(local_fileio, "os", faulty)
        m.setattr(direct_file, "os", faulty)
        m.setattr(metadata_module, "os", faulty)
        real_delete = local_fileio.LocalFileIO.delete
        m.setattr(
            local_fileio.LocalFileIO, "delete", lambda self, path: injector.step("delete", real_delete, self, path)
        )
        yield injector


def arm_crash_point(root: str, point: str, reached: int) -> None:
    """The next process under local ``root`` to come to ``kop_spark.faults.crash_point`` ``point`` for
    the ``reached``-th time dies there, as kill -9 would (conftest lets the tests' processes)."""
    path = os.path.join(root, layout.fault_file(point))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(str(reached))
