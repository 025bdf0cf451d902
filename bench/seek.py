"""Benchmark 4: time to the first record at a random offset and at a random timestamp as a partition
grows from 10^4 records (must stay flat: binary searches over ledgers and entry tables, no scans).
Ratios are to the time at the smallest size, measured in the same run.

    python bench/seek.py [--max-exponent 7] [--seeks 50]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark import Broker
from kop_spark.record.arrow import encode_arrow
from kop_spark.storage import ledger

BATCH = 1000  # records per produced batch
BASE_TS = 1_900_000_000_000


def fill(b: Broker, first: int, end: int) -> None:
    values = pa.array([b"x" * 100] * BATCH, pa.binary())
    for start in range(first, end, 100 * BATCH):
        batches = [
            encode_arrow(
                values,
                timestamps_ms=pa.array(range(BASE_TS + at, BASE_TS + at + BATCH), pa.int64()),
                batch_bytes=1 << 30,
            )[0]
            for at in range(start, min(end, start + 100 * BATCH), BATCH)
        ]
        b.produce_batches("t", 0, batches)


def seek_times(root: str, n: int, seeks: int, rng: random.Random):
    offsets, stamps = [], []
    for _ in range(seeks):
        ledger._TABLES.__init__()  # cold: no entry table cached, as a new reader would be
        with Broker(root) as b:
            o = rng.randrange(n)
            t = time.perf_counter()
            assert b.fetch("t", 0, o, max_records=1)[0].offset == o
            offsets.append(time.perf_counter() - t)
            ts = BASE_TS + rng.randrange(n)
            t = time.perf_counter()
            found = b.list_offsets("t", 0, ts)
            assert found == ts - BASE_TS, (found, ts - BASE_TS)
            stamps.append(time.perf_counter() - t)
    return sorted(offsets)[len(offsets) // 2], sorted(stamps)[len(stamps) // 2]


def run(max_exponent: int = 7, seeks: int = 50):
    """Rows of (benchmark, size, median ms, ratio to the smallest size) for offsets and timestamps."""
    rng = random.Random(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 100, "retention.ms": -1})
        b.create_topic("t", partitions=1)
        size, base = 0, None
        for exp in range(4, max_exponent + 1):
            fill(b, size, 10**exp)
            size = 10**exp
            b.close()
            os.sync()  # no writeback of what was just produced competing with the seeks
            if base is None:
                seek_times(root, size, 5, rng)  # warm-up: imports and first-call costs are not seeks
            t_off, t_ts = seek_times(root, size, seeks, rng)
            base = base or (t_off, t_ts)
            rows.append(("seek offset", size, t_off * 1e3, base[0] / t_off))
            rows.append(("seek timestamp", size, t_ts * 1e3, base[1] / t_ts))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-exponent", type=int, default=7)
    ap.add_argument("--seeks", type=int, default=50)
    a = ap.parse_args()
    for name, size, ms, ratio in run(a.max_exponent, a.seeks):
        print(f"{name:<15} {size:>10} records  {ms:8.3f} ms median  {ratio:5.2f}x the speed at 10^4")
