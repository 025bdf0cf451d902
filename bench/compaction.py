"""Benchmark 10: log compaction (the log cleaner's job, which kop serve runs in the background), in
records per second, against merging the same log (maintenance's rewrite of small ledgers into
large ones: every byte read, written and synced, nothing decoded), which is the cost of any
rewrite and so compaction's ceiling. Three shapes of log, 100-byte values:

- few keys: every key updated many times, so most batches keep nothing;
- distinct keys: nothing to drop, so every batch is kept as it is;
- every batch keeps some: each tenth record updates one key, so every batch is decoded and rebuilt;
- distinct keys, more than the offset map holds (``log.cleaner.dedupe.buffer.size`` of 8 MiB), so
  the compaction takes several passes, each a rewrite of the whole log;
- a tenth appended since the last compaction: a compacted log of distinct keys, then updates of
  every ninth key; the map holds those, and the compacted part is looked up in it.

    python bench/compaction.py [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark import Broker, Record

CONF = {"managedLedgerMaxEntriesPerLedger": 64, "managedLedgerMergeInPassing": 0, "file.delete.delay.ms": 0}
SMALL_MAP = {**CONF, "log.cleaner.dedupe.buffer.size": 8 << 20}


def _distinct(i: int, n: int) -> bytes:
    return b"key-%012d" % i


def _updated(i: int, n: int) -> bytes:  # the first nine tenths compacted, then every ninth key updated
    return _distinct(i if i < n * 9 // 10 else (i - n * 9 // 10) * 9, n)


# shape: (key of record i of n, settings, records compacted before the timed compaction)
SHAPES: dict[str, tuple[Callable[[int, int], bytes], dict, Callable[[int], int]]] = {
    "few keys (1,000)": (lambda i, n: b"key-%012d" % (i % 1000), CONF, lambda n: 0),
    "distinct keys": (_distinct, CONF, lambda n: 0),
    "every batch keeps some": (lambda i, n: b"key-%012d" % (i if i % 10 else 0), CONF, lambda n: 0),
    "distinct keys, 8 MiB map": (_distinct, SMALL_MAP, lambda n: 0),
    "a tenth appended since": (_updated, CONF, lambda n: n * 9 // 10),
}


def _build(root: str, records: int, key: Callable[[int, int], bytes], compacted: int) -> None:
    value = b"v" * 100
    with Broker(root, conf=CONF) as b:
        b.create_topic("t", 1, config={"cleanup.policy": "compact"})
        for base in range(0, records, 50_000):
            if base == compacted > 0:
                b.compact("t")
            b.produce("t", [Record(value, key=key(i, records)) for i in range(base, min(base + 50_000, records))], 0)


def _timed(source: str, work: str, conf: dict, operation: Callable[[Broker], object]) -> float:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    with Broker(work, conf=conf) as b:
        t = time.perf_counter()
        operation(b)
        return time.perf_counter() - t


def run(records: int = 1_000_000, repeat: int = 3) -> list[tuple[str, float, float]]:
    """Rows of (shape, compacted records/s, speed vs merging the same log)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        _build(os.path.join(tmp, "warm-up"), 1000, SHAPES["few keys (1,000)"][0], 0)
        Broker(os.path.join(tmp, "warm-up"), conf=CONF).compact("t")  # imports, once a process
        for shape, (key, conf, compacted) in SHAPES.items():
            source, work = os.path.join(tmp, "source"), os.path.join(tmp, "work")
            shutil.rmtree(source, ignore_errors=True)
            _build(source, records, key, compacted(records) // 50_000 * 50_000)
            compaction = merge = float("inf")
            for _ in range(repeat):  # in turn, so that a slow spell of the machine falls on both
                compaction = min(compaction, _timed(source, work, conf, lambda b: b.compact("t")))
                merge = min(
                    merge,
                    _timed(source, work, conf, lambda b: b.managed_ledger("t", 0).cleaner.merge_ledgers(1 << 30)),
                )
            rows.append((shape, records / compaction, merge / compaction))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for shape, rate, ratio in run(a.records, a.repeat):
        print(f"{shape:<26} {rate:12,.0f} records/s {ratio:6.2f}x merging")
