"""``each_at_once``: calls run together up to a bound, each answering with its result or its
exception in order, nested use never waiting on itself, and a forked child with threads of its own."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable

import pytest

from kop_spark.storage.at_once import POOL_THREADS, each_at_once

WAIT_S = 30  # a bound on a wait that succeeds at once when the code is right


class Running:
    """How many calls run at the same time, and the most that ever did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.most = 0

    def call(self, inner: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                return inner()
            finally:
                with self._lock:
                    self.now -= 1

        return run


@pytest.mark.parametrize("parallelism", [1, 4])
def test_each_call_answers_in_order_with_its_result_or_its_exception(parallelism: int) -> None:
    def call(i: int) -> Callable[[], int]:
        def run() -> int:
            if i % 3 == 0:
                raise OSError(f"call {i}")
            return i * i

        return run

    got = each_at_once([call(i) for i in range(20)], parallelism)
    assert [g if isinstance(g, int) else str(g) for g in got] == [
        f"call {i}" if i % 3 == 0 else i * i for i in range(20)
    ]


def test_calls_run_together_up_to_the_bound() -> None:
    together = threading.Barrier(4, timeout=WAIT_S)  # broken (and raising) unless 4 run at once
    running = Running()
    got = each_at_once([running.call(together.wait) for _ in range(12)], 4)
    assert not [g for g in got if isinstance(g, Exception)]
    assert running.most == 4


def test_calls_made_from_a_call_run_in_turn_and_never_wait_on_the_pool() -> None:
    """Were the inner calls queued behind the outer ones, which hold every thread, none would end."""
    every_thread_taken = threading.Barrier(POOL_THREADS, timeout=WAIT_S)

    def outer() -> list[int | Exception]:
        every_thread_taken.wait()
        return each_at_once([lambda: 1, lambda: 2], POOL_THREADS)

    done: list[object] = []
    worker = threading.Thread(target=lambda: done.extend(each_at_once([outer] * POOL_THREADS, POOL_THREADS)))
    worker.start()
    worker.join(WAIT_S * 2)
    assert done == [[1, 2]] * POOL_THREADS


def test_ctrl_c_raises_once_the_calls_running_have_ended_and_begins_no_more() -> None:
    """The caller's clean-up after Ctrl-C (a Spark task discarding the ledgers it staged) must not
    race a call still writing one."""
    interrupted, second_running, ended = threading.Event(), threading.Event(), []

    def on_sigint(*_: object) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    def ctrl_c() -> None:
        second_running.wait(WAIT_S)
        os.kill(os.getpid(), signal.SIGINT)
        interrupted.wait(WAIT_S)
        ended.append("ctrl-c")

    def writing() -> None:
        second_running.set()
        threading.Event().wait(0.5)  # a write still under way when Ctrl-C comes
        ended.append("writing")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            each_at_once([ctrl_c, writing, lambda: ended.append("begun after")], 2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(ended) == ["ctrl-c", "writing"]


def _in_a_child(answers: multiprocessing.Queue) -> None:
    together = threading.Barrier(2, timeout=WAIT_S)
    answers.put([g if isinstance(g, int) else repr(g) for g in each_at_once([together.wait] * 2, 2)])


def test_a_forked_child_runs_calls_on_threads_of_its_own() -> None:
    each_at_once([lambda: 1, lambda: 2], 2)  # the parent's pool has threads, which a fork does not copy
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    child = fork.Process(target=_in_a_child, args=(answers,))
    child.start()
    assert sorted(answers.get(timeout=WAIT_S)) == [0, 1]
    child.join(WAIT_S)
    assert child.exitcode == 0
