"""The Spark layer: ``format("kop")`` as a PySpark Python data source."""

from .runtime import require_pyspark

require_pyspark()  # one clear error, before any import of pyspark's own fails in its own words

# ruff: noqa: E402 - the imports below need a supported PySpark, checked just above
from .data_source import KopDataSource, register
from .schema import source_schema

__all__ = ["KopDataSource", "register", "source_schema"]
