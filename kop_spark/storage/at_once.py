"""Reads of many keys or files run at once, where each waits on a server's round trip: a fetch of a
hundred partitions, or a Spark stream's offsets, on an object store at tens of milliseconds a
request, took seconds with the requests made in turn.

One pool of threads per process serves every store and broker in it; a call made from one of its
threads runs its calls in turn, so nested use can never wait on itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
POOL_THREADS = 16

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # with the pid that made it: a fork has no threads
_in_pool = threading.local()


def each_at_once(calls: Sequence[Callable[[], T]], parallelism: int) -> list[T | Exception]:
    """Each call's result, or the exception it raised, in order; up to ``parallelism`` at once."""
    if parallelism <= 1 or len(calls) <= 1 or getattr(_in_pool, "yes", False):
        return [_result(call) for call in calls]
    pool = _shared_pool()
    ahead = threading.Semaphore(parallelism)

    def run(call: Callable[[], T]) -> T | Exception:
        try:
            return _result(call)
        finally:
            ahead.release()

    futures: list[Future[T | Exception]] = []
    try:
        for call in calls:
            ahead.acquire()
            futures.append(pool.submit(run, call))
        return [f.result() for f in futures]
    except BaseException:
        # Interrupted (Ctrl-C): the calls not begun never are, and those running are waited for,
        # so that the caller's clean-up (a task discarding what it staged) races no write.
        for f in futures:
            f.cancel()
        wait(futures)
        raise


def all_at_once(calls: Sequence[Callable[[], T]], parallelism: int) -> list[T]:
    """Each call's result, in order, as ``each_at_once`` runs them; the first exception raised
    once every call has run (so none is left half done behind it)."""
    done = each_at_once(calls, parallelism)
    failed = next((d for d in done if isinstance(d, Exception)), None)
    if failed is not None:
        raise failed
    return [d for d in done if not isinstance(d, Exception)]


def start(call: Callable[[], T]) -> Future[T]:
    """``call`` running on the shared pool, to be waited for later (a read ahead of its turn); run
    now, in the caller's thread, when that is one of the pool's."""
    if getattr(_in_pool, "yes", False):
        done: Future[T] = Future()
        try:
            done.set_result(call())
        except Exception as e:  # raised where the result is asked for, as from the pool
            done.set_exception(e)
        return done
    return _shared_pool().submit(call)


def _result(call: Callable[[], T]) -> T | Exception:
    try:
        return call()
    except Exception as e:  # that call's answer; the others go on
        return e


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(POOL_THREADS, "kop-reads", initializer=_mark_thread))
        return _pool[1]


def _mark_thread() -> None:
    _in_pool.yes = True
