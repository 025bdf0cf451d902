"""The Spark layer: ``format("kop")`` as a PySpark Python data source."""

from .source import KopDataSource, register, source_schema

__all__ = ["KopDataSource", "register", "source_schema"]
