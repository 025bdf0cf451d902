"""``spark.read.format("kop")``: a batch read of ``[startingOffsets, endingOffsets)`` of every
subscribed partition (Spark's ``KafkaBatch``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .offset_reader import KopOffsetReader
from .options import SourceOptions
from .partition_reader import read_input_partition


class KopBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        reader = KopOffsetReader(o)
        try:
            views = reader.starting()
            start = reader.resolve(o.starting, views, "startingOffsets")
            end = reader.resolve(o.ending, views, "endingOffsets")
            return reader.plan(reader.batch_ranges(start, end), views)
        finally:
            reader.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input_partition(partition)
