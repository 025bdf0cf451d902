"""What the Spark layer does on the older runtimes Databricks runs (PySpark 4.0 on 17.3 LTS, 4.1 on
18 LTS): the stream reader bounds its own batches where Spark passes no read limit, and the rows
PySpark 4.0's stream writer is handed become the Arrow batches later versions hand over."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kop_spark import Record
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions
from kop_spark.spark.rows import rows_to_arrow


def _stream(root: str, **options: str) -> KopMicroBatchStream:
    opts = {"kop.root": root, "subscribe": "t", "startingOffsets": "earliest", **options}
    return KopMicroBatchStream(SourceOptions.parse(opts, streaming=True))


def test_without_admission_control_the_reader_bounds_its_own_batches(root: str, broker) -> None:
    """PySpark < 4.2 calls latestOffset() with neither start nor limit: the reader starts from what
    it learnt (the initial offset; the end Spark re-plans or commits after a restart)."""
    broker.create_topic("t", 1)
    broker.produce("t", [Record(value=b"v") for _ in range(25)], partition=0)
    fresh = _stream(root, maxOffsetsPerTrigger="10")
    fresh.initialOffset()
    assert fresh.latestOffset() == {"t": {"0": 10}}
    assert fresh.latestOffset() == {"t": {"0": 20}}
    restarted = _stream(root, maxOffsetsPerTrigger="10")
    restarted.commit({"t": {"0": 10}})  # a commit before anything else was learnt: where the query stands
    assert restarted.latestOffset() == {"t": {"0": 20}}
    rerun = _stream(root, maxOffsetsPerTrigger="10")
    rerun.commit({"t": {"0": 10}})
    rerun.partitions({"t": {"0": 10}}, {"t": {"0": 20}})  # the batch it had not committed, re-run
    rerun.commit({"t": {"0": 20}})  # one batch late: moves nothing back
    assert rerun.latestOffset() == {"t": {"0": 25}}
    assert _stream(root).latestOffset() == {"t": {"0": 25}}  # no limit: all there is
    minimum = _stream(root, minOffsetsPerTrigger="30", maxTriggerDelay="1h")
    minimum.initialOffset()
    assert minimum.latestOffset() == {"t": {"0": 25}}  # the first trigger runs at once, as in Spark
    assert minimum.latestOffset() == {"t": {"0": 25}}  # then waits for 30 more


def test_rows_become_arrow_batches_with_utc_instants() -> None:
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", StringType()),
            StructField("partition", IntegerType()),
            StructField("timestamp", TimestampType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    local = datetime.datetime(2026, 11, 24, 12, 0, 0)  # as PySpark gives timestamps: naive, local time
    rows = [
        Row(key=b"k", value="v", partition=1, timestamp=local, headers=[Row(key="h", value=b"1")]),
        Row(key=None, value=None, partition=None, timestamp=None, headers=None),
        Row(key=b"k2", value="v2", partition=0, timestamp=local, headers=[]),
    ]
    batches = list(rows_to_arrow(rows, schema, size=2))
    assert [b.num_rows for b in batches] == [2, 1]
    table = pa.Table.from_batches(batches)
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.column("key").to_pylist() == [b"k", None, b"k2"]
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None, []]
    instant = local.astimezone(datetime.UTC)
    assert table.column("timestamp").to_pylist() == [instant, None, instant]
