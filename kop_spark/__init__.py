"""kop-spark: ledger-backed Kafka-style topics with continuous offsets, as a Spark source and sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .broker import Broker, PartitionInfo, TopicDescription
from .config_changes import AlterConfigOp
from .errors import (
    ConfigError,
    CorruptRecordError,
    DataLossError,
    GroupIdNotFoundError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    KopError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    RecordError,
    RecordTooLargeError,
    StorageError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    UnknownTopicOrPartitionError,
)
from .group.coordinator import OffsetAndMetadata
from .record import CompressionType, ConsumerRecord, Record, TimestampType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = "0.1.0"


def register(spark: SparkSession) -> None:
    """Make ``format("kop")`` available in a Spark session. Spark also finds it on its own (through
    the ``pyspark_kop`` package); this is for sessions that cannot look it up, and is harmless twice."""
    from .spark import register as _register  # pyspark is imported only by those who use Spark

    _register(spark)


__all__ = [
    "AlterConfigOp",
    "Broker",
    "CompressionType",
    "ConfigError",
    "ConsumerRecord",
    "CorruptRecordError",
    "DataLossError",
    "GroupIdNotFoundError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "KopError",
    "OffsetAndMetadata",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "PartitionInfo",
    "PartitionNotFoundError",
    "Record",
    "RecordError",
    "RecordTooLargeError",
    "StorageError",
    "TimestampType",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicNotFoundError",
    "UnknownTopicOrPartitionError",
    "register",
]
