"""Benchmark 1: Kafka v2 batches to and from Arrow columns, against aiokafka's compiled codec and
kafka-python's pure-Python one on the same bytes (500 records, 100-byte values, 16-byte keys).

    python bench/codec.py [--records 500] [--repeat 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KBuilder

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark.record import CompressionType, RecordBatch
from kop_spark.record._speedups import compiled, reference
from kop_spark.record.arrow import ArrowRecordBuilder, encode_arrow

CODECS = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}


def best(fn, repeat: int) -> float:
    """Best of ``repeat`` runs, in seconds: the least disturbed by a noisy machine."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def rows(n: int):
    return [(os.urandom(8).hex().encode(), os.urandom(50).hex().encode(), 1_700_000_000_000 + i) for i in range(n)]


def implementations():
    """kop's codec: the compiled twin when it is built, and the pure-Python reference."""
    return (
        {"kop (compiled)": compiled, "kop (pure Python)": reference} if compiled else {"kop (pure Python)": reference}
    )


def encoders(data, codec):
    keys = pa.array([k for k, _, _ in data], pa.binary())
    values = pa.array([v for _, v, _ in data], pa.binary())
    stamps = pa.array([t for _, _, t in data], pa.int64())

    def ours(impl):
        def encode():
            (batch,) = encode_arrow(values, keys, stamps, compression=CODECS[codec], batch_bytes=1 << 30, codec=impl)
            return batch

        return encode

    def client(builder):
        def encode():
            b = builder(
                magic=2,
                compression_type=int(CODECS[codec]),
                is_transactional=0,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                batch_size=1 << 30,
            )
            for i, (k, v, t) in enumerate(data):
                b.append(i, timestamp=t, key=k, value=v, headers=[])
            return bytes(b.build())

        return encode

    return {
        **{name: ours(impl) for name, impl in implementations().items()},
        "aiokafka (compiled)": client(AioBuilder),
        "kafka-python": client(KBuilder),
    }


def decoders(batch: bytes):
    def to_arrow(records):
        keys, values, offsets, timestamps = [], [], [], []
        for r in records:
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            timestamps.append(r.timestamp * 1000)
        return pa.record_batch(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array(offsets, pa.int64()),
                pa.array(timestamps, pa.timestamp("us", tz="UTC")),
            ],
            ["key", "value", "offset", "timestamp"],
        )

    def ours(impl):
        def decode():
            b = ArrowRecordBuilder("t", 0, False, codec=impl)
            b.add(RecordBatch(batch), 0)
            return b.build()

        return decode

    return {
        **{name: ours(impl) for name, impl in implementations().items()},
        "aiokafka (compiled)": lambda: to_arrow(AioBatch(batch)),
        "kafka-python": lambda: to_arrow(KBatch(batch)),
    }


def run(records: int = 500, repeat: int = 200):
    """Rows of (benchmark, codec, implementation, microseconds per batch, ratio to aiokafka)."""
    data = rows(records)
    out = []
    for codec in CODECS:
        enc = {name: best(fn, repeat) for name, fn in encoders(data, codec).items()}
        batch = encoders(data, codec)["aiokafka (compiled)"]()
        dec = {name: best(fn, repeat) for name, fn in decoders(batch).items()}
        for name, decode in decoders(batch).items():
            if name.startswith("kop"):
                assert decode().column("value").to_pylist() == [v for _, v, _ in data], name
        for name, encode in encoders(data, codec).items():
            if name.startswith("kop") and codec == "none":
                assert encode() == batch, f"{name} encodes other bytes than aiokafka"
        for what, times in (("encode", enc), ("decode to Arrow", dec)):
            base = times["aiokafka (compiled)"]
            for name, t in times.items():
                out.append((f"codec {what}", codec, name, t * 1e6, base / t))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=200)
    a = ap.parse_args()
    for row in run(a.records, a.repeat):
        print(f"{row[0]:<18} {row[1]:<5} {row[2]:<20} {row[3]:>10.1f} us  {row[4]:>5.2f}x aiokafka speed")
