"""The admission-control API of PySpark 4.2+, with stand-ins for older runtimes (Databricks 17.3 LTS
and 18 LTS run PySpark 4.0 and 4.1), where Spark calls ``latestOffset()`` with no arguments and
knows no read limits; and the stream writer's base, which hands Arrow batches from 4.1 on and rows
before."""

from __future__ import annotations

from dataclasses import dataclass

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # PySpark < 4.2
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]  # a stand-in where PySpark has none
        pass

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]  # a stand-in where PySpark has none
        pass

    @dataclass
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]  # a stand-in where PySpark has none
        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]  # a stand-in where PySpark has none
        max_rows: int

    @dataclass
    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]  # a stand-in where PySpark has none
        max_bytes: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]  # a stand-in where PySpark has none
        pass


try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase

    ARROW_STREAM_WRITER = True
except ImportError:  # PySpark 4.0: the stream writer is handed rows
    from pyspark.sql.datasource import DataSourceStreamWriter as StreamWriterBase  # type: ignore[assignment]  # the row writer where there is no Arrow one

    ARROW_STREAM_WRITER = False


__all__ = [
    "ADMISSION_CONTROL",
    "ARROW_STREAM_WRITER",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "ReadMinRows",
    "StreamWriterBase",
    "SupportsTriggerAvailableNow",
]
