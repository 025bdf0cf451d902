"""Lets Spark find ``format("kop")`` with no register call: PySpark loads the ``DefaultSource`` of
every installed top-level package whose name starts with ``pyspark_``."""

from kop_spark.spark.data_source import KopDataSource as DefaultSource

__all__ = ["DefaultSource"]
