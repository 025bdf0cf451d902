"""Benchmark 2: ``read.format("kop")`` and ``readStream.format("kop")`` into the ``noop`` sink, against
(a) a Python data source yielding pre-built Arrow batches of the same records (the ceiling of the
Python Data Source API) and (b) Spark's Parquet source reading the same records, over two partitions
on a local[2] session. kop reads the records as a producer batching 500 records sent them, and as
one sending 10 at a time (a low-traffic producer's batches: a read's cost per batch shows). Each is
read twice: by a batch query, where what is timed is the read, and by an AvailableNow streaming
query, whose planning and commits (about a second for a Python source) fall on kop and the ceiling
alike. Ratios are speed relative to each baseline read the same way.

A second group reads a topic of many small partitions (``WIDE`` partitions, a fiftieth of the
records) by a batch query: a task a partition, as Spark's Kafka source plans it, against
``maxPartitions=2`` (a task per core, each reading its partitions in turn), and against the ceiling
read a task a partition too. A Python data source's task costs tens of milliseconds whatever it
reads, and that is what the group shows.

    python bench/spark_read.py [--records 5000000] [--repeat 5]
"""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
from _spark import PARTITIONS, cli, records, run_available_now, session, timed_rounds, write_ipc, write_parquet

from kop_spark import Broker
from kop_spark.record.arrow import encode_arrow

BATCH_RECORDS = 500  # records per produced batch, as the codec benchmark
SMALL_BATCH_RECORDS = 10
WIDE = 200  # partitions of the topic of many small partitions
WIDE_NAME = f"batch, {WIDE} partitions"


def produce(root: str, parts, topic: str = "bench", batch_records: int = BATCH_RECORDS) -> None:
    with Broker(root, conf={"retention.ms": -1}) as b:
        b.create_topic(topic, partitions=len(parts))
        for p, rb in enumerate(parts):
            millis = pc.divide(rb.column("timestamp").cast(pa.int64()), 1000)
            batches = encode_arrow(rb.column("value"), rb.column("key"), millis, batch_bytes=batch_records * 125 - 1)
            for start in range(0, len(batches), 1000):
                b.produce_batches(topic, p, [bytes(batch) for batch in batches[start : start + 1000]])


def run(n: int = 5_000_000, repeat: int = 5):
    """Rows of (source, seconds, records/s, speed vs ceiling, speed vs Parquet, paired speed vs ceiling)."""
    spark = session()
    spark.dataSource.register(__import__("baselines").ArrowCeiling)
    with tempfile.TemporaryDirectory() as tmp:
        parts = [records(n // PARTITIONS, p) for p in range(PARTITIONS)]
        root = os.path.join(tmp, "store")
        produce(root, parts)
        produce(root, parts, "small", SMALL_BATCH_RECORDS)
        ipc, parquet = [], os.path.join(tmp, "parquet")
        os.makedirs(parquet)
        for p, rb in enumerate(parts):
            ipc.append(os.path.join(tmp, f"part-{p}.arrow"))
            write_ipc(rb, ipc[-1])
            write_parquet(rb, os.path.join(parquet, f"part-{p}.parquet"))
        schema = spark.read.parquet(parquet).schema
        wide = [records(n // 50 // WIDE, p) for p in range(WIDE)]
        produce(root, wide, "wide")
        wide_ipc = [os.path.join(tmp, f"wide-{p}.arrow") for p in range(WIDE)]
        for rb, path in zip(wide, wide_ipc, strict=True):
            write_ipc(rb, path)
        del parts, wide
        os.sync()  # no writeback of the set-up competing with the timed queries
        runs = [0]

        def stream(load):
            def go():
                runs[0] += 1
                run_available_now(load(spark.readStream), "noop", os.path.join(tmp, f"checkpoint-{runs[0]}"))

            return go

        def batch(load):
            return lambda: load(spark.read).write.format("noop").mode("overwrite").save()

        def kop(topic: str, **options: str):
            return lambda r: (
                r.format("kop")
                .option("kop.root", root)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .options(**options)
                .load()
            )

        loads = {
            "kop": kop("bench"),
            f"kop, {SMALL_BATCH_RECORDS}-record batches": kop("small"),
            "pre-built Arrow (ceiling)": lambda r: r.format("arrow_ceiling").option("paths", ",".join(ipc)).load(),
            "Parquet": lambda r: r.schema(schema).parquet(parquet),
        }
        wide_loads = {
            "kop, a task a partition": kop("wide"),
            "kop, maxPartitions=2": kop("wide", maxPartitions="2"),
            "pre-built Arrow, a task a partition (ceiling)": lambda r: (
                r.format("arrow_ceiling").option("paths", ",".join(wide_ipc)).load()
            ),
        }
        queries = {"batch": batch, "stream": stream}
        timed = {f"{mode}: {name}": query(load) for mode, query in queries.items() for name, load in loads.items()}
        timed.update({f"{WIDE_NAME}: {name}": batch(load) for name, load in wide_loads.items()})
        times = timed_rounds(timed, repeat)
    spark.stop()
    rows = []
    for mode in queries:
        names = [f"{mode}: {name}" for name in loads]
        rows += times.rows(n, names, f"{mode}: pre-built Arrow (ceiling)", f"{mode}: Parquet")
    wide_names = [f"{WIDE_NAME}: {name}" for name in wide_loads]
    return rows + times.rows(n // 50 // WIDE * WIDE, wide_names, wide_names[2], wide_names[0])


if __name__ == "__main__":
    cli(run)
