"""The baselines' Python data sources; Spark's workers import this module (bench/ is on their path).

``arrow_ceiling`` yields pre-built Arrow batches memory-mapped from IPC files: nothing is decoded,
so its time is what the Python Data Source read path itself costs, the best any Python source can do.
``arrow_noop`` is an Arrow writer (batch and stream) that takes every batch and keeps nothing: the
write path's ceiling. ``arrow_dump`` writes the buffers of every batch it is handed to a file, as
they are, with kop's direct writes, synced at the end: a durable sink with no format, so what kop
costs beyond it is the Kafka format (placement, encoding, CRC) and its staging.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from _spark import ipc_batches
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from kop_spark.spark.schema import source_schema
from kop_spark.storage.direct_file import DirectFile, open_direct


@dataclass(frozen=True)
class _File(InputPartition):
    path: str


class _CeilingReader(DataSourceStreamReader):
    def __init__(self, paths):
        self.paths = paths

    def initialOffset(self) -> dict:
        return {"done": 0}

    def latestOffset(self, start=None, limit=None) -> dict:
        return {"done": 1}

    def partitions(self, start: dict, end: dict):
        return [_File(p) for p in self.paths] if start != end else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        yield from ipc_batches([partition.path])

    def commit(self, end: dict) -> None:
        pass


class _CeilingBatchReader(DataSourceReader):
    def __init__(self, paths):
        self.paths = paths

    def partitions(self):
        return [_File(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        yield from ipc_batches([partition.path])


class ArrowCeiling(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_ceiling"

    def schema(self):
        return source_schema(False)

    def reader(self, schema):
        return _CeilingBatchReader(self.options["paths"].split(","))

    def streamReader(self, schema):
        return _CeilingReader(self.options["paths"].split(","))


class _NoopWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class _NoopBatchWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class ArrowNoop(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_noop"

    def streamWriter(self, schema, overwrite):
        return _NoopWriter()

    def writer(self, schema, overwrite):
        return _NoopBatchWriter()


def _dump(directory: str, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
    """Every buffer of every batch as it came, appended to one file per task with kop's own direct
    writes (``DirectFile``), synced at the end: kop's durable write without its format."""
    path = os.path.join(directory, f"part-{uuid.uuid4().hex}")
    fd = open_direct(path)
    if fd is None:
        raise OSError(f"{directory}: no O_DIRECT here")
    file = DirectFile(path, fd, sync=True)
    try:
        for rb in iterator:
            file.write_parts([b for column in rb.columns for b in column.buffers() if b is not None])
        file.sync()
    finally:
        file.close()
    return WriterCommitMessage()


class _DumpWriter(DataSourceStreamArrowWriter):
    def __init__(self, directory: str):
        self.directory = directory

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _dump(self.directory, iterator)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class _DumpBatchWriter(DataSourceArrowWriter):
    def __init__(self, directory: str):
        self.directory = directory

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _dump(self.directory, iterator)


class ArrowDump(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_dump"

    def streamWriter(self, schema, overwrite):
        return _DumpWriter(self.options["path"])

    def writer(self, schema, overwrite):
        return _DumpBatchWriter(self.options["path"])


@dataclass(frozen=True)
class _Object(InputPartition):
    path: str
    options: dict


class _S3ParquetReader(_CeilingReader):
    def __init__(self, paths, options):
        super().__init__(paths)
        self.options = options

    def partitions(self, start: dict, end: dict):
        return [_Object(p, self.options) for p in self.paths] if start != end else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Object)
        import pyarrow.fs
        import pyarrow.parquet as pq

        o = partition.options
        fs = pyarrow.fs.S3FileSystem(
            endpoint_override=o["endpoint"], access_key=o["key"], secret_key=o["secret"], region=o["region"]
        )
        yield from pq.ParquetFile(partition.path, filesystem=fs).iter_batches(batch_size=32_768)


class S3Parquet(DataSource):
    """Parquet objects read from an S3 endpoint by pyarrow, through the same Python Data Source API as
    kop's reader: what reading the same records from the same endpoint costs any Python source."""

    @classmethod
    def name(cls) -> str:
        return "s3_parquet"

    def schema(self):
        return source_schema(False)

    def streamReader(self, schema):
        options = {k: self.options[k] for k in ("endpoint", "key", "secret", "region")}
        return _S3ParquetReader(self.options["paths"].split(","), options)
