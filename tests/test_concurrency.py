"""Invariants 1 and 2 of DESIGN.md §2 when threads share a Broker, and when each housekeeping
operation (maintenance's merging and orphan removal, retention, compaction, the background
cleaner's compaction, offset expiry, topic deletion) runs in one process while others write."""

import subprocess
import threading
from collections import defaultdict

import pytest

from kop_spark import Broker, Record

from .conftest import PYTHON, python_subprocess_env, read_partition
from .test_crash_and_concurrency import check_log, finish_writers, go, start_writer

HOUSEKEEPER = __file__.replace("test_concurrency.py", "housekeeper_process.py")
COMMITTER = __file__.replace("test_concurrency.py", "committer_process.py")
CREATOR = __file__.replace("test_concurrency.py", "creator_process.py")


def _start(script, *args):
    p = subprocess.Popen(
        [PYTHON, script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_subprocess_env(),
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_threads_sharing_a_broker(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 3})
    b.create_topic("t", 2)
    acked = defaultdict(dict)
    commits = {}
    errors = []

    def producer(k):
        try:
            for i in range(60):
                ((p, base, n),) = b.produce("t", [Record(f"{k}/{i}/{j}".encode()) for j in range(3)], partition=i % 2)
                for j in range(n):
                    acked[p][base + j] = f"{k}/{i}/{j}".encode()
        except BaseException as e:  # reported below: a thread's exception would otherwise vanish
            errors.append(e)

    def committer(k):
        try:
            for i in range(30):
                b.commit_offsets(f"g{k}", {("t", 0): i, ("t", 1): i + 1})
            commits[f"g{k}"] = {("t", 0): 29, ("t", 1): 30}
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=committer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    b.close()
    fresh = Broker(root)
    assert fresh.verify() == {}
    for p in (0, 1):
        start, end, records = read_partition(fresh, "t", p)
        assert [r.offset for r in records] == list(range(start, end)) and start == 0
        assert {r.offset: r.value for r in records} == acked[p]
    for group, offsets in commits.items():
        assert {tp: o.offset for tp, o in fresh.fetch_offsets(group).items()} == offsets


@pytest.mark.parametrize("operation", ["maintenance", "retention", "compaction", "cleaning", "deletion"])
def test_housekeeping_racing_writer_processes(tmp_path, operation):
    root = str(tmp_path / "store")
    config = {
        "retention": {"retention.bytes": 3000, "file.delete.delay.ms": 0},
        "compaction": {"cleanup.policy": "compact,delete", "file.delete.delay.ms": 0},
        # the background cleaner's compaction, as often as there is anything new
        "cleaning": {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0, "file.delete.delay.ms": 0},
    }.get(operation, {"file.delete.delay.ms": 0})
    Broker(root).create_topic("t", 1, config=config)
    writers = {n: start_writer(root, n, 120, max_entries=2) for n in ("a", "b")}
    keeper = _start(HOUSEKEEPER, root, operation)
    go(writers.values())
    confirmed = finish_writers(writers)
    out, _ = keeper.communicate("stop\n", timeout=300)
    assert keeper.returncode == 0 and int(out) > 0, "the housekeeper failed or never ran"
    b = Broker(root)
    assert b.verify() == {}
    if operation in ("maintenance", "deletion"):
        check_log(root, confirmed)
        assert b.maintenance(orphan_grace_ms=0).errors == []
        return
    start, end, records = read_partition(b, "t", 0)
    by_offset = {r.offset: r.value.decode() for r in records}
    if operation == "retention":
        assert sorted(by_offset) == list(range(start, end))
    else:
        assert len(by_offset) < end - start, "nothing was compacted"
    for name, appends in confirmed.items():
        last = max((base + count - 1, f"{name}/{i}/{count - 1}") for i, (base, count) in appends.items())
        for i, (base, count) in appends.items():
            for j in range(count):
                if operation == "retention" and base + j >= start:
                    assert by_offset.get(base + j) == f"{name}/{i}/{j}", f"acknowledged {name}/{i}/{j} lost"
        if operation in ("compaction", "cleaning"):  # every writer keys its records by its name: the last stays
            assert by_offset.get(last[0]) == last[1]


def test_expiry_racing_commits_in_other_processes(tmp_path):
    """Each group's offset is first committed already expired, then fresh: expiry that decided on
    the expired one must not erase the fresh one. One offsets partition, so all of it contends."""
    root = str(tmp_path / "store")
    first = Broker(root, conf={"offsetsTopicNumPartitions": 1})
    first.create_topic("t", 1)
    first.commit_offsets("creates-the-offsets-topic", {("t", 0): 0})
    committers = {g: _start(COMMITTER, root, g, "expired-then-fresh", 60) for g in ("c1", "c2", "c3")}
    keeper = _start(HOUSEKEEPER, root, "expiry")
    go(committers.values())
    for p in committers.values():
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and out.split()[-1] == "60"
    out, _ = keeper.communicate("stop\n", timeout=300)
    assert keeper.returncode == 0 and int(out) > 0
    b = Broker(root)
    erased = [
        f"{g}-{i}"
        for g in committers
        for i in range(1, 61)
        if {tp: o.offset for tp, o in b.fetch_offsets(f"{g}-{i}").items()} != {("t", 0): i + 1}
    ]
    assert not erased, f"fresh commits erased by expiry: {erased}"


def test_first_group_commits_of_two_processes_on_a_new_store(tmp_path):
    root = str(tmp_path / "store")
    Broker(root).create_topic("t", 1)
    committers = {g: _start(COMMITTER, root, g, "one-partition", 20) for g in ("first", "second")}
    go(committers.values())
    for g, p in committers.items():
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, f"{g} failed its first commits"
        assert out.split()[-1] == "20"
    b = Broker(root)
    assert {g: b.fetch_offsets(g)[("t", 0)].offset for g in committers} == {"first": 20, "second": 20}


def test_of_processes_creating_colliding_names_at_once_one_keeps_its_topic(tmp_path):
    """Kafka refuses a topic whose name differs from another's only by '.' for '_' (one metric
    name), and its one controller creates topics in turn; here any process may create one. Each
    round, two processes create "rN.x" and "rN_x" at the same moment."""
    root = str(tmp_path / "store")
    Broker(root).create_topic("warm", 1)
    creators = [_start(CREATOR, root) for _ in range(2)]
    outcomes = []
    for n in range(40):
        for p, name in zip(creators, (f"r{n}.x", f"r{n}_x"), strict=True):
            p.stdin.write(f"{name}\n")
            p.stdin.flush()
        outcomes.append(sorted(p.stdout.readline().strip() for p in creators))
    for p in creators:
        p.stdin.close()
        assert p.wait(60) == 0
    standing = Broker(root).list_topics()
    both = [n for n in range(40) if f"r{n}.x" in standing and f"r{n}_x" in standing]
    assert both == [], f"rounds where both colliding topics stand: {both}"
    assert outcomes == [["InvalidTopicError", "made"]] * 40
    assert len(standing) == 1 + 40, "a round where neither stands"
