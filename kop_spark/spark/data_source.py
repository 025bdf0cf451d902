"""``format("kop")``: the Python data source, which hands out its readers and writers.

Everything here runs on the driver except ``read()`` and ``write()``, which Spark calls on
executors with what the driver planned (``partition_reader``, ``sink``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from ..errors import ConfigError, KopError
from .batch_reader import KopBatchReader
from .micro_batch_stream import KopMicroBatchStream
from .options import OptionMap, SourceOptions
from .schema import source_schema
from .sink import KopBatchWriter, KopStreamWriter, prepare


class KopDataSource(DataSource):
    """``format("kop")``: batch and streaming reads and writes of kop topics."""

    @classmethod
    def name(cls) -> str:
        return "kop"

    def schema(self) -> StructType:
        return source_schema(OptionMap(self.options).boolean("includeHeaders", False))

    def _check_schema(self, schema: StructType, options: SourceOptions) -> None:
        if schema != source_schema(options.include_headers):
            raise ConfigError("The kop source has a fixed schema and cannot be set with a custom one")

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options, streaming=False)
        self._check_schema(schema, options)
        return KopBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = SourceOptions.parse(self.options, streaming=True)
            self._check_schema(schema, options)
            return KopMicroBatchStream(options)
        except KopError as e:
            return RefusedStream(e)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("kop topics are append-only: save mode Overwrite is not supported; use mode('append')")
        return KopBatchWriter(prepare(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KopStreamWriter(prepare(self.options, schema), schema)


class RefusedStream(DataSourceStreamReader):
    """A stream whose options were refused, raising the refusal at Spark's first call. PySpark's
    stream runner stops the reader it made in a ``finally``: one whose making raised leaves it
    none, and the runner's own UnboundLocalError would end the trace the user reads, after ours."""

    def __init__(self, refusal: KopError):
        self.refusal = refusal

    def initialOffset(self) -> dict:
        raise self.refusal

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        raise self.refusal

    def partitions(self, start: dict, end: dict) -> list:
        raise self.refusal

    def read(self, partition: object) -> Iterator[tuple]:
        raise self.refusal

    def stop(self) -> None:
        pass


def register(spark: SparkSession) -> None:
    """Make ``format("kop")`` available in ``spark`` (Spark also finds it by itself through the
    ``pyspark_kop`` package when kop-spark is installed). Harmless when it is there already:
    PySpark 4.0 refuses a second registration of a name that later versions replace."""
    try:
        spark.dataSource.register(KopDataSource)
    except Exception as e:  # PySpark 4.0's AnalysisException
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
