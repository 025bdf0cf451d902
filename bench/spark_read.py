"""Benchmark 2: ``readStream.format("kop")`` into the ``noop`` sink, against (a) a Python data source
yielding pre-built Arrow batches of the same records (the ceiling of the Python Data Source API)
and (b) Spark's Parquet source reading the same records. All three run as AvailableNow streaming
queries over two partitions on a local[2] session; ratios are speed relative to each baseline.

    python bench/spark_read.py [--records 5000000] [--repeat 5]
"""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
from _spark import PARTITIONS, best_times, cli, records, run_available_now, session, write_ipc, write_parquet

from kop_spark import Broker
from kop_spark.record.arrow import encode_arrow

BATCH_RECORDS = 500  # records per produced batch, as the codec benchmark


def produce(root: str, parts) -> None:
    with Broker(root, conf={"retention.ms": -1}) as b:
        b.create_topic("bench", partitions=len(parts))
        for p, rb in enumerate(parts):
            millis = pc.divide(rb.column("timestamp").cast(pa.int64()), 1000)
            batches = encode_arrow(rb.column("value"), rb.column("key"), millis, batch_bytes=BATCH_RECORDS * 125 - 1)
            for start in range(0, len(batches), 100):
                b.produce_batches("bench", p, batches[start : start + 100])


def run(n: int = 5_000_000, repeat: int = 5):
    """Rows of (source, seconds, records/s, speed vs ceiling, speed vs Parquet)."""
    spark = session()
    spark.dataSource.register(__import__("baselines").ArrowCeiling)
    with tempfile.TemporaryDirectory() as tmp:
        parts = [records(n // PARTITIONS, p) for p in range(PARTITIONS)]
        root = os.path.join(tmp, "store")
        produce(root, parts)
        ipc, parquet = [], os.path.join(tmp, "parquet")
        os.makedirs(parquet)
        for p, rb in enumerate(parts):
            ipc.append(os.path.join(tmp, f"part-{p}.arrow"))
            write_ipc(rb, ipc[-1])
            write_parquet(rb, os.path.join(parquet, f"part-{p}.parquet"))
        schema = spark.read.parquet(parquet).schema
        del parts
        os.sync()  # no writeback of the set-up competing with the timed queries
        runs = [0]

        def query(load):
            def go():
                runs[0] += 1
                run_available_now(load(), "noop", os.path.join(tmp, f"checkpoint-{runs[0]}"))

            return go

        sources = {
            "kop": query(
                lambda: (
                    spark.readStream.format("kop")
                    .option("kop.root", root)
                    .option("subscribe", "bench")
                    .option("startingOffsets", "earliest")
                    .load()
                )
            ),
            "pre-built Arrow (ceiling)": query(
                lambda: spark.readStream.format("arrow_ceiling").option("paths", ",".join(ipc)).load()
            ),
            "Parquet": query(lambda: spark.readStream.schema(schema).parquet(parquet)),
        }
        times = best_times(sources, repeat)
    spark.stop()
    ceiling, parquet_time = times["pre-built Arrow (ceiling)"], times["Parquet"]
    return [(name, t, n / t, ceiling / t, parquet_time / t) for name, t in times.items()]


if __name__ == "__main__":
    cli(run)
