"""What the Spark benchmarks share: a local session, the records, and the baselines' data sources.

The records are those of the codec benchmark (16-byte keys, 100-byte values, increasing
timestamps), generated once as Arrow and written three ways: as kop topic partitions, as Arrow IPC
files (what the ceiling source memory-maps) and as Parquet files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))
from kop_spark.record.arrow import kafka_source_schema  # noqa: E402 - importable only once the checkout is on sys.path

# A day ago, a record a millisecond: within retention, and behind the broker's clock (up to 86M records).
BASE_TS_MS = (int(time.time()) - 86_400) * 1000
PARTITIONS = 2  # one task per core
FLUSH_ROWS = 32_768  # rows per Arrow batch handed to Spark, as kop's reader


def session():
    # Spark's Python workers import the baseline sources from this directory.
    os.environ["PYTHONPATH"] = (
        BENCH + os.pathsep + os.path.dirname(BENCH) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName("kop-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def records(n: int, partition: int) -> pa.RecordBatch:
    """``n`` records of one partition in Spark's Kafka source layout (key, value, topic, ...)."""
    raw = os.urandom(n * 116)

    def binary(width: int, data: bytes) -> pa.Array:
        ends = pa.array(range(0, width * n + 1, width), pa.int32()).buffers()[1]
        return pa.Array.from_buffers(pa.binary(), n, [None, ends, pa.py_buffer(data)])

    return pa.RecordBatch.from_arrays(
        [
            binary(16, raw[: 16 * n]),
            binary(100, raw[16 * n :]),
            pa.array(["bench"] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array(range(BASE_TS_MS * 1000, (BASE_TS_MS + n) * 1000, 1000), pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=kafka_source_schema(False),
    )


def write_ipc(rb: pa.RecordBatch, path: str) -> None:
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, rb.schema) as w:
        for start in range(0, rb.num_rows, FLUSH_ROWS):
            w.write_batch(rb.slice(start, FLUSH_ROWS))


def write_parquet(rb: pa.RecordBatch, path: str) -> None:
    pq.write_table(pa.Table.from_batches([rb]), path)


class Rounds:
    """Each run's seconds in every round of a benchmark (``timed_rounds``), and speeds from them."""

    def __init__(self, seconds: dict[str, list[float]]):
        self.seconds = seconds

    def best(self, name: str) -> float:
        return min(self.seconds[name])

    def speed(self, name: str, baseline: str) -> float:
        """Best against best: how fast ``name`` can go relative to how fast ``baseline`` can."""
        return self.best(baseline) / self.best(name)

    def paired_speed(self, name: str, baseline: str) -> float:
        """The median over rounds of each round's speed relative to the baseline in that round. The
        two ran within the same minute, so a slow spell of the machine falls on both; the ratio of
        bests instead compares each one's luckiest round, which on a noisy machine may come from
        minutes apart."""
        return statistics.median(b / t for t, b in zip(self.seconds[name], self.seconds[baseline], strict=True))

    def rows(self, n: int, names: list[str], first: str, second: str) -> list[tuple]:
        """A row per run of ``names``: (name, best seconds, records/s, speed vs ``first``, vs
        ``second``, paired speed vs ``first``)."""
        return [
            (
                name,
                self.best(name),
                n / self.best(name),
                self.speed(name, first),
                self.speed(name, second),
                self.paired_speed(name, first),
            )
            for name in names
        ]


def timed_rounds(runs: Mapping[str, Callable[[], float | None]], rounds: int) -> Rounds:
    """Each run's time in each of ``rounds`` rounds, in seconds, after an untimed round (as JMH's
    warm-up iterations): in it the JVM compiles the plans' hot code and the Python workers import
    and fill their caches, which fell on the first timed round and skewed its ratios. A round runs
    each once, in turn, so that machine noise falls on all of them alike, and in another order each
    round (a seeded shuffle), so that no run always follows the same one: a heavy run leaves work
    for the JVM's collector and the disk to whatever comes next. A run with set-up or clean-up that
    is not what is measured times itself and returns its seconds; otherwise the call is timed."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs.items())
    for r in range(-1, rounds):
        random.Random(r).shuffle(order)
        for name, fn in order:
            t = time.perf_counter()
            took = fn()
            if r >= 0:
                seconds[name].append(time.perf_counter() - t if took is None else took)
    return Rounds(seconds)


def run_available_now(stream_df, sink_format: str, checkpoint: str, **options) -> None:
    """Run a streaming query to the end of what is available, as a scheduled job would."""
    writer = stream_df.writeStream.format(sink_format).option("checkpointLocation", checkpoint)
    for k, v in options.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination()
    if q.exception():
        raise RuntimeError(q.exception())


def ipc_batches(paths: list[str]) -> Iterator[pa.RecordBatch]:
    for path in paths:
        reader = pa.ipc.open_file(pa.memory_map(path))
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def cli(
    run: Callable[[int, int], list],
    records: int = 5_000_000,
    repeat: int = 5,
    baselines: tuple[str, str] = ("ceiling", "Parquet"),
) -> None:
    """A Spark benchmark's command line: sizes in, a line per variant out (or the rows as JSON, what
    bench/run.py reads)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--repeat", type=int, default=repeat, help="rounds; the best of each is kept")
    ap.add_argument("--json", action="store_true", help="the rows as JSON")
    a = ap.parse_args()
    rows = run(a.records, a.repeat)
    if a.json:
        print(json.dumps(rows))
        return
    first, second = baselines
    for name, t, rate, vs_first, vs_second, paired in rows:
        print(
            f"{name:<34} {t:7.2f} s  {rate / 1e6:6.2f} M records/s  {vs_first:5.2f}x {first}  {vs_second:5.2f}x {second}"
            f"  (median of rounds {paired:5.2f}x {first})"
        )
