"""Rows to Arrow, for PySpark 4.0, whose stream writer is handed rows (the Arrow stream writer came
in 4.1): the sink then takes the same Arrow batches whichever way Spark delivers them."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

ROWS_PER_BATCH = 8192


def rows_to_arrow(rows: Iterable[Row], schema: StructType, size: int = ROWS_PER_BATCH) -> Iterator[pa.RecordBatch]:
    arrow_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType)) for f in schema.fields])
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append({k: _utc(v) for k, v in row.asDict(recursive=True).items()})
        if len(chunk) == size:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)


_SIMPLE = {
    BinaryType: pa.binary(),
    StringType: pa.string(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    TimestampType: pa.timestamp("us", tz="UTC"),
    TimestampNTZType: pa.timestamp("us"),
}


def _arrow_type(t: DataType) -> pa.DataType:
    """The Arrow type of a sink column (the types ``check_sink_schema`` lets through; PySpark's own
    converter changed its signature between versions)."""
    if isinstance(t, ArrayType):
        return pa.list_(_arrow_type(t.elementType))
    if isinstance(t, StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType)) for f in t.fields])
    for spark_type, arrow_type in _SIMPLE.items():
        if isinstance(t, spark_type):
            return arrow_type
    raise TypeError(f"a sink column of type {t.simpleString()}")


def _utc(value: Any) -> Any:
    """PySpark gives timestamps as naive datetimes in the local time zone; Arrow needs the instant."""
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.astimezone(datetime.UTC)
    return value
