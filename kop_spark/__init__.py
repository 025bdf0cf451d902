"""kop-spark: ledger-backed Kafka-style topics with continuous offsets, as a Spark source and sink."""

from .broker import Broker, PartitionInfo, TopicDescription
from .errors import (
    ConfigError,
    CorruptRecordError,
    GroupIdNotFoundError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    KopError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    RecordTooLargeError,
    StorageError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
    UnknownTopicOrPartitionError,
)
from .group.coordinator import OffsetAndMetadata
from .record import CompressionType, ConsumerRecord, Record, TimestampType

__version__ = "0.1.0"

__all__ = [
    "Broker",
    "CompressionType",
    "ConfigError",
    "ConsumerRecord",
    "CorruptRecordError",
    "GroupIdNotFoundError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KopError",
    "OffsetAndMetadata",
    "OffsetMetadataTooLargeError",
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
