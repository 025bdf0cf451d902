"""Benchmark 5: consumer-group offsets. Commits per second to the offsets topic, against one-record
produces to a plain topic (the cost of a durable append, which a commit is plus its bookkeeping);
and the time to load a group partition of the offsets topic after 10^5 commits, with and without
compaction (the log cleaner's job), as a fresh coordinator (a restarted driver) does on first use.

    python bench/groups.py [--commits 2000] [--history 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark import Broker, Record
from kop_spark.group.offsets_topic import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from kop_spark.record import build_record_batch

PARTITIONS = 10
GROUP = "bench"


def per_second(fn, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t)


def commit_rates(b: Broker, n: int):
    produce = per_second(lambda i: b.produce("plain", [Record(value=b"x" * 40, key=b"k")], partition=0), n)
    commit = per_second(lambda i: b.commit_offsets(GROUP, {("t", i % PARTITIONS): i}), n)
    return commit, produce


def write_history(b: Broker, history: int) -> tuple[str, int]:
    """``history`` offset commits of one group, written as the coordinator writes them (same keys
    and values) but many to a batch, so that building a long history takes seconds, not minutes."""
    coordinator = b.groups
    topic, p = coordinator.topic, coordinator.partition_for(GROUP)
    now = int(time.time() * 1000)
    records = [
        Record(
            encode_group_value(GroupMetadataValue(protocol_type="consumer", current_state_timestamp=now)),
            encode_key(GroupMetadataKey(GROUP)),
            now,
        )
    ]
    for i in range(history):
        records.append(
            Record(
                encode_offset_value(OffsetCommitValue(i, "", now, -1)),
                encode_key(OffsetCommitKey(GROUP, "t", i % PARTITIONS)),
                now,
            )
        )
    for start in range(0, len(records), 1000):
        b.produce_batches(topic, p, [build_record_batch(records[start : start + 1000])])
    return topic, p


def load_time(root: str, p: int, repeat: int = 5) -> float:
    """Best time for a fresh coordinator to bring the partition's table up to the log end."""
    best = float("inf")
    for _ in range(repeat):
        with Broker(root) as b:
            coordinator = b.groups
            t = time.perf_counter()
            state = coordinator._load(p)  # replay only: fetch_offsets would also compact in passing
            best = min(best, time.perf_counter() - t)
            assert state.groups[GROUP].offsets[(b.admin.kafka_name(b.topic_name("t")), 0)].offset >= 0
    return best


def run(commits: int = 2000, history: int = 100_000):
    """Rows of (benchmark, value, unit, ratio to its baseline, baseline's name)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        with Broker(root, conf={"retention.ms": -1}) as b:
            b.create_topic("t", partitions=PARTITIONS)
            b.create_topic("plain", partitions=1)
            commit, produce = commit_rates(b, commits)
        history_root = os.path.join(tmp, "history")
        with Broker(history_root) as b:
            b.create_topic("t", partitions=PARTITIONS)
            _topic, p = write_history(b, history)
        raw = load_time(history_root, p)
        with Broker(history_root) as b:
            b.groups.compact([p])
            with_compaction = load_time(history_root, p)
            assert b.fetch_offsets(GROUP)[("t", (history - 1) % PARTITIONS)].offset == history - 1
    return [
        ("offset commits", commit, "commits/s", commit / produce, "one-record produces/s"),
        (f"group load after {history:,} commits, not compacted", raw * 1e3, "ms", 1.0, "itself"),
        (
            f"group load after {history:,} commits, compacted",
            with_compaction * 1e3,
            "ms",
            raw / with_compaction,
            "not compacted",
        ),
    ]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--history", type=int, default=100_000)
    a = ap.parse_args()
    for name, value, unit, ratio, baseline in run(a.commits, a.history):
        print(f"{name:<50} {value:10.1f} {unit:<10} {ratio:6.2f}x {baseline}")
