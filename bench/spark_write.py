"""Benchmark 3: ``writeStream.format("kop")`` of the read benchmark's records (16-byte keys, so
murmur2 placement, into a two-partition topic), against (a) a no-op Arrow stream writer (the
ceiling of the Python Data Source write API) and (b) Spark's Parquet sink. Every query reads the
same Parquet files as an AvailableNow stream, so what differs is the sink; ratios are speed
relative to each baseline.

    python bench/spark_write.py [--records 5000000] [--repeat 5]
"""

from __future__ import annotations

import os
import shutil
import tempfile

from _spark import PARTITIONS, best_times, cli, records, run_available_now, session, write_parquet

from kop_spark import Broker


def run(n: int = 5_000_000, repeat: int = 5):
    """Rows of (sink, seconds, records/s, speed vs ceiling, speed vs Parquet)."""
    spark = session()
    spark.dataSource.register(__import__("baselines").ArrowNoop)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "source")
        os.makedirs(source)
        for p in range(PARTITIONS):
            write_parquet(
                records(n // PARTITIONS, p).select(["key", "value", "timestamp"]),
                os.path.join(source, f"part-{p}.parquet"),
            )
        schema = spark.read.parquet(source).schema
        os.sync()  # no writeback of the set-up competing with the timed queries
        runs = [0]

        def query(sink, **options):
            def go():
                runs[0] += 1
                out = os.path.join(tmp, f"out-{runs[0]}")
                if sink == "kop":
                    with Broker(out) as b:
                        b.create_topic("bench", partitions=PARTITIONS)
                    options.update({"kop.root": out, "topic": "bench"})
                elif sink == "parquet":
                    options["path"] = out
                run_available_now(
                    spark.readStream.schema(schema).parquet(source),
                    sink,
                    os.path.join(tmp, f"checkpoint-{runs[0]}"),
                    **options,
                )
                if sink == "kop":
                    with Broker(out) as b:
                        written = sum(b.list_offsets("bench", p, "latest") for p in range(PARTITIONS))
                    assert written == n, f"kop wrote {written} records of {n}"
                shutil.rmtree(out, ignore_errors=True)

            return go

        times = best_times(
            {"kop": query("kop"), "no-op Arrow writer (ceiling)": query("arrow_noop"), "Parquet": query("parquet")},
            repeat,
        )
    spark.stop()
    ceiling, parquet = times["no-op Arrow writer (ceiling)"], times["Parquet"]
    return [(name, t, n / t, ceiling / t, parquet / t) for name, t in times.items()]


if __name__ == "__main__":
    cli(run)
