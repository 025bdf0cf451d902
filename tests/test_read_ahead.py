"""``ReadAhead``: what is expected is opened ahead, up to its window at once, and each key answers
what opening it in turn would, its error included; keys asked for out of the expected order, and
a window of one, are opened in the asking thread."""

from __future__ import annotations

import sys
import threading
import traceback

import pytest

from kop_spark.storage.read_ahead import ReadAhead

from .test_at_once import WAIT_S, Running


class Opener:
    """Opens a key as its square, and ``7`` as an error; remembers the threads it ran in."""

    def __init__(self) -> None:
        self.threads: dict[int, set[str]] = {}

    def __call__(self, key: int) -> int:
        self.threads.setdefault(key, set()).add(threading.current_thread().name)
        if key == 7:
            raise FileNotFoundError(f"ledger {key}")
        return key * key


def _pool_stacks() -> str:
    frames = sys._current_frames()
    return "\n".join(
        f"{t.name}:\n{''.join(traceback.format_stack(frames[t.ident]))}"
        for t in threading.enumerate()
        if t.name.startswith("kop-reads") and t.ident in frames
    )


def _got(ahead: ReadAhead[int, int], key: int) -> int | str:
    try:
        return ahead.get(key)
    except FileNotFoundError as e:
        return str(e)


def test_expected_keys_are_opened_ahead_up_to_the_window_at_once() -> None:
    together = threading.Barrier(4, timeout=WAIT_S)  # broken (and raising) unless 4 open at once
    running, opener = Running(), Opener()

    def open_(key: int) -> int:
        running.call(together.wait)()
        return opener(key)

    ahead = ReadAhead(open_, 4)
    ahead.expect(range(12))
    try:
        got = [_got(ahead, k) for k in range(12)]
    except threading.BrokenBarrierError:  # say what held the shared pool's threads, should it be that
        pytest.fail(f"4 keys were never opened at once; the shared pool's threads were at:\n{_pool_stacks()}")
    assert got == [k * k if k != 7 else "ledger 7" for k in range(12)]
    assert running.most == 4
    assert all(t.startswith("kop-reads") for threads in opener.threads.values() for t in threads)


def test_keys_asked_out_of_order_are_opened_when_asked_and_the_skipped_dropped() -> None:
    opener = Opener()
    ahead = ReadAhead(opener, 3)
    ahead.expect([0, 1, 2, 3, 4, 5])
    assert [_got(ahead, k) for k in (2, 99, 3, 4, 5)] == [4, 99 * 99, 9, 16, 25]
    here = threading.current_thread().name
    assert opener.threads[99] == {here}, "not expected: opened when asked"
    assert _got(ahead, 0) == 0, "a key dropped from ahead is opened again when asked"
    assert here in opener.threads[0]
    ahead.expect([7, 8])
    ahead.close()
    assert _got(ahead, 7) == "ledger 7" and here in opener.threads[7]


@pytest.mark.parametrize("window", [0, 1])
def test_a_window_of_one_opens_each_key_when_asked(window: int) -> None:
    opener = Opener()
    ahead = ReadAhead(opener, window)
    ahead.expect(range(5))
    assert not opener.threads
    assert [_got(ahead, k) for k in range(5)] == [0, 1, 4, 9, 16]
    assert set().union(*opener.threads.values()) == {threading.current_thread().name}
