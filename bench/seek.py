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
# A day ago, a record a millisecond: within retention, and behind the broker's clock (up to 86M records).
BASE_TS = (int(time.time()) - 86_400) * 1000


def fill(b: Broker, topic: str, n: int) -> None:
    values = pa.array([b"x" * 100] * BATCH, pa.binary())
    for start in range(0, n, 100 * BATCH):
        batches = [
            encode_arrow(
                values,
                timestamps_ms=pa.array(range(BASE_TS + at, BASE_TS + at + BATCH), pa.int64()),
                batch_bytes=1 << 30,
            )[0]
            for at in range(start, min(n, start + 100 * BATCH), BATCH)
        ]
        b.produce_batches(topic, 0, [bytes(batch) for batch in batches])


def seek_once(root: str, topic: str, n: int, rng: random.Random) -> tuple[float, float]:
    """Seconds to the first record at a random offset, and to the offset of a random timestamp, by a
    cold reader: no entry table cached, as a new reader would be."""
    ledger._TABLES = ledger._TableCache()
    with Broker(root) as b:
        o = rng.randrange(n)
        t = time.perf_counter()
        assert b.fetch(topic, 0, o, max_records=1)[0].offset == o
        offset_s = time.perf_counter() - t
        ts = BASE_TS + rng.randrange(n)
        t = time.perf_counter()
        found = b.list_offsets(topic, 0, ts)
        assert found == ts - BASE_TS, (found, ts - BASE_TS)
        return offset_s, time.perf_counter() - t


def run(max_exponent: int = 7, seeks: int = 50):
    """Rows of (benchmark, size, median ms, ratio to the smallest size) for offsets and timestamps.
    Each size is its own partition, and the seeks go round the sizes in turn, so that a slow spell
    of the machine falls on every size alike rather than on the one measured last."""
    rng = random.Random(1)
    sizes = [10**exp for exp in range(4, max_exponent + 1)]
    times: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 100, "retention.ms": -1}) as b:
            for n in sizes:
                b.create_topic(f"t{n}", partitions=1)
                fill(b, f"t{n}", n)
        os.sync()  # no writeback of what was just produced competing with the seeks
        for n in sizes:  # warm-up: imports and first-call costs are not seeks
            seek_once(root, f"t{n}", n, rng)
        for _ in range(seeks):
            for n in sizes:
                times[n].append(seek_once(root, f"t{n}", n, rng))
    medians = {n: [sorted(column)[len(column) // 2] for column in zip(*times[n], strict=True)] for n in sizes}
    base = medians[sizes[0]]
    rows = []
    for n in sizes:
        rows.append(("seek offset", n, medians[n][0] * 1e3, base[0] / medians[n][0]))
        rows.append(("seek timestamp", n, medians[n][1] * 1e3, base[1] / medians[n][1]))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-exponent", type=int, default=7)
    ap.add_argument("--seeks", type=int, default=50)
    a = ap.parse_args()
    for name, size, ms, ratio in run(a.max_exponent, a.seeks):
        print(f"{name:<15} {size:>10} records  {ms:8.3f} ms median  {ratio:5.2f}x the speed at 10^4")
