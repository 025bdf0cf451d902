"""Benchmark 8: ``readStream.format("kop")`` from an ``s3://`` root (metadata in the bucket) into
the ``noop`` sink, against the same records stored as Parquet objects on the same S3 endpoint
(moto's server on loopback, as the tests use) and read by pyarrow through the same Python Data
Source API. Spark's own S3A connector needs hadoop-aws jars that pyspark does not ship, so the
Parquet peer is read in Python; kop on the local disk is the third line, to show what the
endpoint costs. AvailableNow queries over two partitions on local[2]; ratios are speed relative to
Parquet on S3.

    python bench/spark_s3_read.py [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pyarrow.fs
from _spark import PARTITIONS, cli, records, run_available_now, session, timed_rounds, write_parquet
from spark_read import produce

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import servers


def run(n: int = 1_000_000, repeat: int = 3):
    """Rows of (source, seconds, records/s, speed vs Parquet on S3, speed vs kop on the local disk)."""
    with tempfile.TemporaryDirectory() as tmp:
        moto = servers.moto_s3(Path(tmp) / "moto")
        moto.start()
        try:
            return _run(n, repeat, moto.port, tmp)
        finally:
            moto.stop()


def _run(n: int, repeat: int, port: int, tmp: str):
    env = servers.s3_env(port)
    os.environ.update(env)  # the Broker that produces the records
    servers.make_bucket(port)
    s3_root, local_root = f"s3://{servers.BUCKET}/bench", os.path.join(tmp, "store")
    parts = [records(n // PARTITIONS, p) for p in range(PARTITIONS)]
    produce(s3_root, parts)
    produce(local_root, parts)
    fs = pyarrow.fs.S3FileSystem(
        endpoint_override=env["AWS_ENDPOINT_URL"],
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env["AWS_REGION"],
    )
    parquet = []
    for p, rb in enumerate(parts):
        local = os.path.join(tmp, f"part-{p}.parquet")
        write_parquet(rb, local)
        parquet.append(f"{servers.BUCKET}/parquet/part-{p}.parquet")
        pyarrow.fs.copy_files(local, parquet[-1], destination_filesystem=fs)
    del parts
    spark = session()
    spark.dataSource.register(__import__("baselines").S3Parquet)
    # Spark's Python workers get the endpoint as options, not from the environment the JVM began with.
    kop_s3 = {f"kop.{name.lower()}": value for name, value in env.items()}
    s3 = {
        "endpoint": env["AWS_ENDPOINT_URL"],
        "key": env["AWS_ACCESS_KEY_ID"],
        "secret": env["AWS_SECRET_ACCESS_KEY"],
        "region": env["AWS_REGION"],
    }
    runs = [0]

    def query(reader):
        def go():
            runs[0] += 1
            run_available_now(reader().load(), "noop", os.path.join(tmp, f"checkpoint-{runs[0]}"))

        return go

    def kop(root: str, options: dict):
        stream = spark.readStream.format("kop").option("kop.root", root).options(**options)
        return stream.option("subscribe", "bench").option("startingOffsets", "earliest")

    sources = {
        "kop on s3://": query(lambda: kop(s3_root, kop_s3)),
        "Parquet on the same S3 (pyarrow)": query(
            lambda: spark.readStream.format("s3_parquet").option("paths", ",".join(parquet)).options(**s3)
        ),
        "kop on the local disk": query(lambda: kop(local_root, {})),
    }
    times = timed_rounds(sources, repeat)
    spark.stop()
    return times.rows(n, list(sources), "Parquet on the same S3 (pyarrow)", "kop on the local disk")


if __name__ == "__main__":
    cli(run, records=1_000_000, repeat=3, baselines=("Parquet on S3", "kop on the local disk"))
