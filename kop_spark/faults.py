"""Crash points for tests of what a crashed driver leaves behind.

A test sets ``KOP_SPARK_CRASH_POINTS=1`` in its processes' environment and creates
``<root>/_faults/<point>`` holding a number N; the process that reaches that point for the N-th
time removes the file and dies there at once, as kill -9 would. Without the variable nothing is
looked up: on an object store the look was a request, made by every step of every sink commit.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .errors import FileMissingError
from .layout import fault_file
from .storage.fileio import FileIO

CRASH_POINTS_ENV = "KOP_SPARK_CRASH_POINTS"


def crash_point(fileio: FileIO, point: str, reached: int, settle: Callable[[], object] | None = None) -> None:
    """Die here if a test asked for it at the ``reached``-th time this point is reached; ``settle``
    first, where the steps before it run at once with it (it waits for them to end)."""
    path = fault_file(point)
    if os.environ.get(CRASH_POINTS_ENV) != "1" or not fileio.exists(path):
        return
    try:
        armed = int(fileio.read_at(path, 0, 32).decode().strip() or 0)
    except FileMissingError:
        return  # the step it was armed for, running at once with this one, took it
    if armed == reached:
        fileio.delete(path)
        if settle is not None:
            settle()
        os._exit(137)
