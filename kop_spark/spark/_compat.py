"""The admission-control API of PySpark 4.2+, with stand-ins for older runtimes (e.g. Databricks
Runtime 15.4), where Spark calls ``latestOffset()`` with no arguments and knows no read limits."""

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
except ImportError:  # PySpark < 4.2

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


__all__ = ["ReadAllAvailable", "ReadLimit", "ReadMaxBytes", "ReadMaxRows", "ReadMinRows", "SupportsTriggerAvailableNow"]
