"""Appends from several threads to one partition share one write and one CAS (group commit), on a
local root and on S3, and each keeps its own offsets, idempotence and all-or-nothing."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kop_spark import Broker, Record
from kop_spark.errors import StorageError
from kop_spark.record import build_record_batch
from kop_spark.storage.managed_ledger import AppendResult, ManagedLedger

from . import servers


@pytest.fixture(params=["local", "s3"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    if request.param == "local":
        return Broker(str(tmp_path / "store"), {"managedLedgerMergeInPassing": 0})
    request.getfixturevalue("running")
    return Broker(f"s3://{servers.BUCKET}/gc-{uuid.uuid4().hex[:8]}", {"managedLedgerMergeInPassing": 0})


def _batch(value: str) -> bytes:
    return build_record_batch([Record(value=value.encode())])


class _HeldCas:
    """Holds the first CAS of a managed ledger until released, so that appends pile up behind it."""

    def __init__(self, ml: ManagedLedger, monkeypatch: pytest.MonkeyPatch):
        self.inside, self.release = threading.Event(), threading.Event()
        self.fail_next = False
        real = ml.store.put

        def put(key: str, value: Any, version: int) -> int:
            if key == ml.key and not self.release.is_set():
                self.inside.set()
                assert self.release.wait(60)
            elif key == ml.key and self.fail_next:
                self.fail_next = False
                raise StorageError("injected: the group's CAS failed")
            return real(key, value, version)

        monkeypatch.setattr(ml.store, "put", put)


def _run(fn: Callable[[], AppendResult], out: dict[str, Any], name: str) -> threading.Thread:
    def target() -> None:
        try:
            out[name] = fn()
        except Exception as e:  # handed to the test's thread to check
            out[name] = e

    t = threading.Thread(target=target)
    t.start()
    return t


def _group_behind_a_held_cas(ml: ManagedLedger, held: _HeldCas, appends: dict[str, Any]) -> dict[str, Any]:
    """Run ``appends`` from threads queued behind a leader whose CAS is held, release it, and
    return each one's result (or error), the leader's under "leader"."""
    out: dict[str, Any] = {}
    leader = _run(lambda: ml.append([_batch("leader")]), out, "leader")
    assert held.inside.wait(60)
    followers = [_run(fn, out, name) for name, fn in appends.items()]
    deadline = time.monotonic() + 60
    while len(ml._appends._waiting) < len(appends):  # queued behind the leader (checked, not slept on)
        assert time.monotonic() < deadline, "the followers never queued"
        time.sleep(0.001)
    held.release.set()
    for t in [leader, *followers]:
        t.join(60)
    return out


def test_appends_that_arrive_together_share_one_write_and_one_cas(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("t", 1)
    ml = broker.managed_ledger("t", 0)
    held = _HeldCas(ml, monkeypatch)
    version = ml.view().version
    appends = {f"f{i}": (lambda i=i: ml.append([_batch(f"f{i}-a"), _batch(f"f{i}-b")])) for i in range(4)}
    out = _group_behind_a_held_cas(ml, held, appends)
    assert out["leader"] == AppendResult(0, 1)
    # Each follower got two consecutive offsets of its own, after the leader's, in one group.
    bases = sorted(out[f"f{i}"].base_offset for i in range(4))
    assert bases == [1, 3, 5, 7] and all(out[f"f{i}"].record_count == 2 for i in range(4))
    assert ml.view().version - version == 2, "one CAS for the leader, one for the four that queued"
    got = {r.offset: r.value.decode() for r in broker.fetch("t", 0, 0)}
    for i in range(4):
        base = out[f"f{i}"].base_offset
        assert (got[base], got[base + 1]) == (f"f{i}-a", f"f{i}-b")


def test_a_retry_in_the_same_group_gets_its_originals_offsets(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker.create_topic("t", 1)
    ml = broker.managed_ledger("t", 0)
    held = _HeldCas(ml, monkeypatch)
    same = ("producer-1", 0)
    appends = {n: (lambda n=n: ml.append([_batch("once")], idempotence_key=same)) for n in ("first", "retry")}
    out = _group_behind_a_held_cas(ml, held, appends)
    assert {out["first"].base_offset, out["retry"].base_offset} == {1}
    assert sorted(r.duplicate for r in (out["first"], out["retry"])) == [False, True]
    assert [r.value for r in broker.fetch("t", 0, 0)] == [b"leader", b"once"]


def test_a_failed_group_fails_every_append_in_it_and_stores_none(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("t", 1)
    ml = broker.managed_ledger("t", 0)
    held = _HeldCas(ml, monkeypatch)
    appends = {f"f{i}": (lambda i=i: ml.append([_batch(f"f{i}")])) for i in range(3)}
    held.fail_next = True  # the leader's held CAS goes through; the next one, the group's, fails
    out = _group_behind_a_held_cas(ml, held, appends)
    assert out["leader"] == AppendResult(0, 1)
    assert all(isinstance(out[f"f{i}"], StorageError) for i in range(3))
    assert ml.append([_batch("after")]) == AppendResult(1, 1)
    assert [r.value for r in broker.fetch("t", 0, 0)] == [b"leader", b"after"]


def test_threads_hammering_one_partition(broker: Broker) -> None:
    broker.create_topic("t", 1)
    results: dict[str, list] = {}

    def producer(name: str) -> None:
        results[name] = [broker.produce("t", [Record(value=f"{name}/{i}".encode())], partition=0) for i in range(30)]

    threads = [threading.Thread(target=producer, args=(f"p{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    got = broker.fetch("t", 0, 0, max_records=1000)
    assert [r.offset for r in got] == list(range(180))
    by_offset = {r.offset: r.value.decode() for r in got}
    for name, acks in results.items():
        assert [by_offset[base] for ((_, base, _),) in acks] == [f"{name}/{i}" for i in range(30)]
