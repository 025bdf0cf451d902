"""The heartbeats of a Python worker's running sink tasks: while a task writes, its staging directory
says it is alive, so ``kop maintenance`` leaves the output of a live job alone until none of its
tasks has beaten its heart for ``SINK_LEASE_MS``.

One thread beats for every task of the process, started once: Spark runs task after task in a
reused worker, and a thread of each task's own, started and beating once before the task went on,
held a task of 1,000 records up by a fifth (11.9 ms against 9.5 ms inside Spark, where the worker
shares its cores with the JVM). Until a task's first beat its files' own modification times say
it is alive.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Beat = Callable[[], None]


class TaskHeartbeats:
    """Beats registered with ``start``, each at once and then every ``interval_s`` seconds, from one
    daemon thread started with the first of them (and again in a forked child, which inherits no
    threads). No beat runs after its ``stop`` has returned: a task's clean-up deletes the directory a
    late beat would make again."""

    def __init__(self, interval_s: float):
        self._interval_s = interval_s
        self._changed = threading.Condition()
        self._beating = threading.Lock()  # held while beats run, and by ``stop``
        self._beats: dict[int, Beat] = {}
        self._due: dict[int, float] = {}  # each beat's next time (monotonic)
        self._tokens = itertools.count(1)
        self._thread_pid: int | None = None

    def start(self, beat: Beat) -> int:
        """Beat ``beat`` from now on; returns the token ``stop`` takes."""
        with self._changed:
            token = next(self._tokens)
            self._beats[token] = beat
            self._due[token] = time.monotonic()
            if self._thread_pid != os.getpid():
                self._thread_pid = os.getpid()
                threading.Thread(target=self._run, daemon=True, name="kop-sink-heartbeat").start()
            self._changed.notify()
        return token

    def stop(self, token: int) -> None:
        with self._beating, self._changed:
            self._beats.pop(token, None)
            self._due.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(self._any_due, self._until_next())
            with self._beating:
                for beat in self._take_due():
                    try:
                        beat()
                    except Exception as e:  # the thread beats for every task: it must outlive a failed beat
                        log.warning("staging heartbeat failed: %s", e)

    def _any_due(self) -> bool:
        now = time.monotonic()
        return any(at <= now for at in self._due.values())

    def _until_next(self) -> float | None:
        return max(0.0, min(self._due.values()) - time.monotonic()) if self._due else None

    def _take_due(self) -> list[Beat]:
        with self._changed:
            now = time.monotonic()
            due = [token for token, at in self._due.items() if at <= now]
            for token in due:
                self._due[token] = now + self._interval_s
            return [self._beats[token] for token in due]
