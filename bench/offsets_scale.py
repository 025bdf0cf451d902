"""Benchmark 6: the offsets topic under many committers. Four processes commit in turn to groups of
one offsets partition (each turn fences the last writer's ledger); commit latency and a cold load
of a group (a restarted driver's first fetch_offsets) after 100 commits and after 10,000 must stay
flat: within 2x. Without merging small ledgers in passing, 2,800 commits left 2,579 ledgers and a
721 KB managed-ledger value rewritten on every commit (20 ms commits grew to 430 ms, cold loads
took 23 s).

    python bench/offsets_scale.py [--small 100] [--large 10000] [--processes 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark import Broker
from kop_spark.group.offsets_topic import partition_for_group

WINDOW = 100  # commits whose latencies are compared: around the small count, and the last ones


def groups_of_one_partition(n: int, partitions: int = 50) -> list[str]:
    """``n`` group names that Kafka's hash puts on the same offsets partition."""
    target = partition_for_group("committer-0", partitions)
    return [g for g in (f"committer-{i}" for i in range(10_000)) if partition_for_group(g, partitions) == target][:n]


def _commit(args) -> list[tuple[float, float]]:
    """(when it finished, latency) of each commit of one process."""
    root, group, count, start = args
    b = Broker(root)
    start.wait()
    out = []
    for i in range(count):
        t = time.perf_counter()
        b.commit_offsets(group, {("t", 0): i})
        out.append((time.time(), time.perf_counter() - t))
    b.close()
    return out


def _cold_load_ms(root: str, group: str) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        with Broker(root) as b:
            b.fetch_offsets(group)
        best = min(best, time.perf_counter() - t)
    return best * 1000


def _committed(root: str, groups: list[str], total: int, processes: int) -> list[float]:
    """Latencies of ``total`` commits made by ``processes`` at once, in the order they finished."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(processes) as pool:
            pending = pool.map_async(_commit, [(root, g, total // processes, start) for g in groups])
            start.set()
            done = sorted(x for per_process in pending.get() for x in per_process)
    return [latency for _, latency in done]


def run(small: int = 100, large: int = 10_000, processes: int = 4):
    """Rows of (benchmark, value, unit, ratio to its baseline, baseline's name)."""
    groups = groups_of_one_partition(processes)
    with tempfile.TemporaryDirectory() as tmp:
        cold = []
        for total in (small, large):
            root = os.path.join(tmp, str(total))
            Broker(root).create_topic("t", 1)
            latencies = _committed(root, groups, total, processes)
            cold.append(_cold_load_ms(root, groups[0]))
        b = Broker(root)
        ledgers = b.describe_topic(b.groups.topic).partitions[b.groups.partition_for(groups[0])].ledgers
    # Latency while the log held about ``small`` commits, and while it held about ``large``, in
    # the same run: the same contention between the processes either way.
    early = latencies[max(small - WINDOW // 2, 0) : small + WINDOW // 2]
    late = latencies[-WINDOW:]
    rows = []
    for what, pick in (("median", statistics.median), ("p99", lambda xs: sorted(xs)[int(len(xs) * 0.99) - 1])):
        a, z = pick(early) * 1000, pick(late) * 1000
        rows.append((f"commit latency {what}, around commit {small}", a, "ms", 1.0, f"around commit {small}"))
        rows.append((f"commit latency {what}, last {WINDOW} of {large}", z, "ms", z / a, f"around commit {small}"))
    rows.append((f"cold group load after {small} commits", cold[0], "ms", 1.0, f"after {small}"))
    rows.append((f"cold group load after {large} commits", cold[1], "ms", cold[1] / cold[0], f"after {small}"))
    rows.append((f"ledgers in the offsets partition after {large} commits", ledgers, "", 1.0, "-"))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=100)
    p.add_argument("--large", type=int, default=10_000)
    p.add_argument("--processes", type=int, default=4)
    args = p.parse_args()
    for name, value, unit, ratio, baseline in run(args.small, args.large, args.processes):
        print(f"{name:<60} {value:>10.1f} {unit:<3} {ratio:>6.2f}x  (vs {baseline})")


if __name__ == "__main__":
    main()
