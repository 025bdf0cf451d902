"""The Spark layer: ``format("kop")`` as a PySpark Python data source."""

from .data_source import KopDataSource, register
from .schema import source_schema

__all__ = ["KopDataSource", "register", "source_schema"]
