"""kop-spark: ledger-backed Kafka-style topics with continuous offsets, as a Spark source and sink."""

from .broker import Broker, PartitionInfo, TopicDescription
from .errors import (
    ConfigError,
    CorruptRecordError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    KopError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    RecordTooLargeError,
    StorageError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    UnknownTopicOrPartitionError,
)
from .record import CompressionType, ConsumerRecord, Record, TimestampType

__version__ = "0.1.0"

__all__ = [
    "Broker",
    "CompressionType",
    "ConfigError",
    "ConsumerRecord",
    "CorruptRecordError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KopError",
    "OffsetOutOfRangeError",
    "PartitionInfo",
    "PartitionNotFoundError",
    "Record",
    "RecordTooLargeError",
    "StorageError",
    "TimestampType",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicNotFoundError",
    "UnknownTopicOrPartitionError",
]
