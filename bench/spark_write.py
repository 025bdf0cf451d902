"""Benchmark 3: ``df.write.format("kop")`` and ``writeStream.format("kop")`` of the read benchmark's
records (16-byte keys, so murmur2 placement, into a two-partition topic), against (a) a no-op Arrow
writer (the ceiling of the Python Data Source write API), (b) a writer that puts the Arrow buffers
it is handed in a file as they are, with kop's direct writes, synced (durability without a format,
so the gap between it and kop is the Kafka format's) and (c) Spark's Parquet sink, each fed three
ways:

- batch, cached: a batch write of a DataFrame cached in memory, so what is timed is the sink;
- stream, cached: one micro-batch of the same cached DataFrame (a one-row ``rate-micro-batch``
  stream cross-joined with it, the row broadcast), so streaming's own costs show beside the batch;
- stream, Parquet files: an AvailableNow stream of Parquet files, as a scheduled job reads them,
  where reading the files falls on every sink alike.

One more run writes the batch feed into a topic of 128 partitions: what a topic of many partitions
costs (each task stages a ledger per partition, and Spark's Arrow batches give each a sliver).

Ratios are speed relative to each baseline fed the same way.

    python bench/spark_write.py [--records 5000000] [--repeat 5]
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable

from _spark import PARTITIONS, cli, records, run_available_now, session, timed_rounds, write_parquet
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kop_spark import Broker

SINKS = {
    "kop": "kop",
    "no-op Arrow writer (ceiling)": "arrow_noop",
    "Arrow buffers written as they come (durable, no format)": "arrow_dump",
    "Parquet": "parquet",
}
FEEDS = ("batch, cached", "stream, cached", "stream, Parquet files")
MANY = 128  # partitions of one more batch run of kop: what a topic of many partitions costs
MANY_NAME = f"batch, cached: kop, {MANY} partitions"


def run(n: int = 5_000_000, repeat: int = 5) -> list[tuple]:
    """Rows of (feed and sink, seconds, records/s, speed vs ceiling, speed vs Parquet, paired speed vs
    ceiling)."""
    spark = session()
    baselines = __import__("baselines")
    spark.dataSource.register(baselines.ArrowNoop)
    spark.dataSource.register(baselines.ArrowDump)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "source")
        os.makedirs(source)
        for p in range(PARTITIONS):
            write_parquet(
                records(n // PARTITIONS, p).select(["key", "value", "timestamp"]),
                os.path.join(source, f"part-{p}.parquet"),
            )
        cached = spark.read.parquet(source).cache()
        assert cached.count() == n
        schema = cached.schema
        os.sync()  # no writeback of the set-up competing with the timed queries
        runs = [0]

        def write(feed: str, sink: str, partitions: int = PARTITIONS) -> Callable[[], float]:
            def go() -> float:
                runs[0] += 1
                out, checkpoint = os.path.join(tmp, f"out-{runs[0]}"), os.path.join(tmp, f"ck-{runs[0]}")
                options = _sink_options(sink, out, partitions)
                start = time.perf_counter()  # the write alone: not the topic's creation, the check, the clean-up
                if feed == "batch, cached":
                    cached.write.format(sink).options(**options).mode("append").save()
                elif feed == "stream, cached":
                    tick = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load().select()
                    _stream_once(F.broadcast(tick).crossJoin(cached), sink, checkpoint, options)
                else:
                    run_available_now(spark.readStream.schema(schema).parquet(source), sink, checkpoint, **options)
                took = time.perf_counter() - start
                if sink == "kop":
                    with Broker(out) as b:
                        written = sum(b.list_offsets("bench", p, "latest") for p in range(partitions))
                    assert written == n, f"kop wrote {written} records of {n} ({feed})"
                shutil.rmtree(out, ignore_errors=True)
                return took

            return go

        contenders = {f"{feed}: {name}": write(feed, sink) for feed in FEEDS for name, sink in SINKS.items()}
        contenders[MANY_NAME] = write("batch, cached", "kop", MANY)
        times = timed_rounds(contenders, repeat)
    cached.unpersist()
    spark.stop()
    rows = []
    for feed in FEEDS:
        names = [f"{feed}: {name}" for name in SINKS]
        if feed == "batch, cached":
            names.insert(1, MANY_NAME)
        rows += times.rows(n, names, f"{feed}: no-op Arrow writer (ceiling)", f"{feed}: Parquet")
    return rows


def _sink_options(sink: str, out: str, partitions: int) -> dict[str, str]:
    if sink == "kop":
        with Broker(out) as b:
            b.create_topic("bench", partitions=partitions)
        return {"kop.root": out, "topic": "bench"}
    if sink == "arrow_dump":
        os.makedirs(out)
    return {"path": out} if sink in ("parquet", "arrow_dump") else {}


def _stream_once(df: DataFrame, sink: str, checkpoint: str, options: dict[str, str]) -> None:
    q = df.writeStream.format(sink).option("checkpointLocation", checkpoint).options(**options)
    query = q.trigger(once=True).start()
    query.awaitTermination()
    if query.exception():
        raise RuntimeError(query.exception())


if __name__ == "__main__":
    cli(run)
