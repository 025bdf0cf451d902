"""A worker's sink tasks beat their hearts from one thread of the process (kop_spark.spark.task_heartbeats)."""

import threading

from kop_spark.spark.task_heartbeats import TaskHeartbeats

INTERVAL_S = 0.02
WAIT_S = 30  # a bound on a wait, never a pause: every wait below ends as soon as what it waits for happens


class Counted:
    """A beat that counts its calls and lets a test wait for the n-th."""

    def __init__(self) -> None:
        self.calls = 0
        self._changed = threading.Condition()

    def __call__(self) -> None:
        with self._changed:
            self.calls += 1
            self._changed.notify_all()

    def reaches(self, n: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.calls >= n, WAIT_S)


def _heartbeat_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "kop-sink-heartbeat"}


def test_a_task_beats_at_once_however_long_the_interval():
    beats = TaskHeartbeats(interval_s=WAIT_S * 100)
    first, second = Counted(), Counted()
    tokens = [beats.start(first), beats.start(second)]
    assert first.reaches(1) and second.reaches(1)
    for token in tokens:
        beats.stop(token)


def test_tasks_beat_every_interval_from_one_thread():
    before = _heartbeat_threads()
    beats = TaskHeartbeats(INTERVAL_S)
    first, second = Counted(), Counted()
    tokens = [beats.start(first), beats.start(second)]
    assert first.reaches(3) and second.reaches(3)
    assert len(_heartbeat_threads() - before) == 1
    for token in tokens:
        beats.stop(token)


def test_a_stopped_task_beats_no_more_and_the_others_go_on():
    beats = TaskHeartbeats(INTERVAL_S)
    stopped, running = Counted(), Counted()
    token = beats.start(stopped)
    other = beats.start(running)
    assert stopped.reaches(2)
    beats.stop(token)
    calls = stopped.calls
    assert running.reaches(running.calls + 3)
    assert stopped.calls == calls
    beats.stop(other)


def test_a_failing_beat_does_not_stop_the_thread():
    beats = TaskHeartbeats(INTERVAL_S)
    failures = Counted()

    def failing() -> None:
        failures()
        raise OSError(28, "No space left on device")

    healthy = Counted()
    tokens = [beats.start(failing), beats.start(healthy)]
    assert failures.reaches(3) and healthy.reaches(3)
    for token in tokens:
        beats.stop(token)


def test_stop_waits_for_a_beat_under_way_so_none_comes_after_the_task_has_cleaned_up():
    beats = TaskHeartbeats(INTERVAL_S)
    inside, release = threading.Event(), threading.Event()
    calls = Counted()

    def slow() -> None:
        calls()
        inside.set()
        assert release.wait(WAIT_S)

    token = beats.start(slow)
    assert inside.wait(WAIT_S)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (beats.stop(token), stopped.set()))
    stopper.start()
    assert not stopped.wait(0.2), "stop returned while a beat was under way"
    release.set()
    stopper.join(WAIT_S)
    assert stopped.is_set()
    after = calls.calls
    # a beat of a still-registered task comes at once; none of the stopped one's comes with it
    other = Counted()
    token = beats.start(other)
    assert other.reaches(3)
    assert calls.calls == after
    beats.stop(token)
