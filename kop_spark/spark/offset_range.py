"""Offset ranges and the arithmetic Spark's Kafka source does on them: splitting a batch into
tasks (``minPartitions``, ``maxRecordsPerPartition``) and admission control (``maxOffsetsPerTrigger``).
Pure functions of offsets, so they are tested without Spark."""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

from .options import PartitionOffsets, TopicPartition


class OffsetRange(NamedTuple):
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Split ranges into tasks as Spark's ``KafkaOffsetRangeCalculator``: first so that none holds
    more than ``max_records``; then, if there are fewer than ``min_partitions``, split the large
    ranges in proportion to their size (small ones stay whole)."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records is not None:
        ranges = [part for r in ranges for part in _divide(r, math.ceil(r.size / max_records))]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    whole = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    out = []
    for r in ranges:
        parts = 1 if r in whole else _part_count(r.size, split_total, split_min)
        out.extend(_divide(r, parts))
    return [r for r in out if r.size > 0]


def pack_ranges(ranges: list[OffsetRange], max_tasks: int | None) -> list[list[OffsetRange]]:
    """The ranges as at most ``max_tasks`` tasks (``maxPartitions``; None: a task a range, as
    Spark's Kafka source). Largest first, each range goes to the task with the fewest records so
    far, so the tasks come out about even; a task's ranges are read in topic-partition order."""
    if max_tasks is None or len(ranges) <= max_tasks:
        return [[r] for r in ranges]
    tasks: list[list[OffsetRange]] = [[] for _ in range(max_tasks)]
    loads = [(0, i) for i in range(max_tasks)]  # (records, task): a heap, ties to the first task
    for r in sorted(ranges, key=lambda r: (-r.size, r)):
        records, i = heapq.heappop(loads)
        tasks[i].append(r)
        heapq.heappush(loads, (records + r.size, i))
    return [sorted(t) for t in tasks if t]


def _part_count(size: int, total: int, min_partitions: int) -> int:
    return max(math.floor(size / total * min_partitions + 0.5), 1)  # Scala's Math.round


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1 or r.size <= 1:
        return [r]
    step = r.size / parts
    bounds = [r.start + int(step * i) for i in range(parts)] + [r.end]
    return [r._replace(start=bounds[i], end=bounds[i + 1]) for i in range(parts)]


def rate_limit(limit: int, start: PartitionOffsets, latest: PartitionOffsets) -> PartitionOffsets:
    """End offsets admitting about ``limit`` records, shared in proportion to each partition's backlog
    as Spark's Kafka source does; no partition with a backlog is starved of at least one."""
    backlog: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = end - start.get(tp, end)
        if size > 0:
            backlog[tp] = size
    total = sum(backlog.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in backlog:
            out[tp] = end
            continue
        share = limit * (backlog[tp] / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(start[tp] + take, end)
    return out
