"""What the Spark layer does on the older runtimes Databricks runs (PySpark 4.0 on 17.3 LTS, 4.1 on
18 LTS): rate options it cannot honour are refused by name, and the rows PySpark 4.0's stream
writer is handed become the Arrow batches later versions hand over."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
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

from kop_spark.errors import ConfigError
from kop_spark.spark._compat import ADMISSION_CONTROL
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions
from kop_spark.spark.rows import rows_to_arrow


@pytest.mark.parametrize("option", ["maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxBytesPerTrigger"])
def test_rate_options_are_refused_by_name_without_admission_control(root: str, option: str) -> None:
    options = SourceOptions.parse({"kop.root": root, "subscribe": "t", option: "10"}, streaming=True)
    with pytest.raises(ConfigError, match=f"option '{option}' needs PySpark 4.2 or later"):
        KopMicroBatchStream(options, admission_control=False)
    KopMicroBatchStream(options, admission_control=True)
    KopMicroBatchStream(
        SourceOptions.parse({"kop.root": root, "subscribe": "t"}, streaming=True), admission_control=False
    )


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
    instant = local.astimezone(datetime.timezone.utc)
    assert table.column("timestamp").to_pylist() == [instant, None, instant]


@pytest.mark.skipif(ADMISSION_CONTROL, reason="this PySpark honours the rate options")
def test_a_query_with_a_rate_option_fails_at_start_naming_it(spark, root: str, broker, tmp_path) -> None:
    broker.create_topic("t", 1)
    query = (
        spark.readStream.format("kop")
        .option("kop.root", root)
        .option("subscribe", "t")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(StreamingQueryException, match=r"option 'maxOffsetsPerTrigger' needs PySpark 4\.2 or later"):
        query.awaitTermination(120)
