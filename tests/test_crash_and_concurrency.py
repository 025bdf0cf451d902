"""Invariants 1, 2 and 4 of DESIGN.md §2 under kill -9 and concurrent writer processes."""

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter

from kop_spark import Broker

from .conftest import PYTHON, python_subprocess_env

WRITER = os.path.join(os.path.dirname(__file__), "writer_process.py")


def start_writer(root, name, appends, max_entries=4, conf=None):
    p = subprocess.Popen(
        [PYTHON, WRITER, root, name, str(appends), str(max_entries), json.dumps(conf or {})],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_subprocess_env(),
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def go(procs):
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def confirmed_lines(lines):
    out = {}
    for line in lines:
        i, base, count = map(int, line.split())
        out[i] = (base, count)
    return out


def finish_writers(procs):
    """Wait for writer processes to end well; what each confirmed, by writer name."""
    confirmed = {}
    for n, p in procs.items():
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        confirmed[n] = confirmed_lines(out.splitlines())
    return confirmed


def check_log(root, confirmed, conf=None):
    """No gap, no duplicate, and every confirmed append is there at the offsets it was told."""
    b = Broker(root, conf)
    start, end = b.list_offsets("t", 0, "earliest"), b.list_offsets("t", 0, "latest")
    assert start == 0
    records, off = [], 0
    while off < end:
        got = b.fetch("t", 0, off, max_records=10_000)
        records += got
        off = got[-1].offset + 1
    assert [r.offset for r in records] == list(range(end)), "offsets must be exactly 0..end-1"
    values = [r.value.decode() for r in records]
    dupes = [v for v, n in Counter(values).items() if n > 1]
    assert not dupes, f"duplicated records: {dupes[:5]}"
    by_value = {v: r.offset for v, r in zip(values, records, strict=False)}
    for name, appends in confirmed.items():
        for i, (base, count) in appends.items():
            for j in range(count):
                assert by_value.get(f"{name}/{i}/{j}") == base + j, f"confirmed {name}/{i}/{j} lost or moved"
    return values


def test_kill_9_writers_at_random_points(tmp_path):
    root = str(tmp_path / "store")
    Broker(root).create_topic("t", 1)
    rng = random.Random(20261121)
    confirmed = {}
    for cycle in range(8):
        names = [f"c{cycle}w{k}" for k in range(rng.choice([1, 2]))]
        procs = {n: start_writer(root, n, 10_000, max_entries=rng.choice([1, 3, 50])) for n in names}
        go(procs.values())
        victim = rng.choice(names)
        lines = {n: [] for n in names}
        # Let the victim confirm a random number of appends, then kill every writer of the cycle
        # while they are busy appending: the kill lands at an arbitrary point of an append.
        target = rng.randint(1, 40)
        while len(lines[victim]) < target:
            lines[victim].append(procs[victim].stdout.readline())
        # Not synchronisation: a random delay puts the kill anywhere in the next append.
        time.sleep(rng.uniform(0, 0.005))
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
        for n, p in procs.items():
            p.wait()
            lines[n] += [l for l in p.stdout.read().splitlines() if l.strip()]
            confirmed[n] = confirmed_lines(l for l in lines[n] if l.strip())
        check_log(root, confirmed)
    # After all the crashes a new writer appends right after the last offset.
    b = Broker(root)
    end = b.list_offsets("t", 0, "latest")
    from kop_spark import Record

    assert b.produce("t", [Record(b"after")], partition=0) == [(0, end, 1)]


def test_concurrent_writer_processes_on_one_partition(tmp_path):
    root = str(tmp_path / "store")
    Broker(root).create_topic("t", 1)
    names = ["a", "b", "c"]
    procs = {n: start_writer(root, n, 150, max_entries=3) for n in names}
    go(procs.values())
    confirmed = finish_writers(procs)
    for n in names:
        assert len(confirmed[n]) == 150
    values = check_log(root, confirmed)
    assert len(values) == sum(c for appends in confirmed.values() for _, c in appends.values())
    for n in names:  # each writer's appends keep their order
        mine = [v for v in values if v.startswith(n + "/")]
        assert mine == sorted(mine, key=lambda v: tuple(map(int, v.split("/")[1:])))
