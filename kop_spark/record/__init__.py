"""Kafka's record format v2: records, batches and their compression codecs."""

from .compression import CompressionType
from .default_record_batch import RecordBatch, build_record_batch, record_count, split_batches, with_base_offset
from .record import BatchRecord, ConsumerRecord, Header, Record, TimestampType

__all__ = [
    "BatchRecord",
    "CompressionType",
    "ConsumerRecord",
    "Header",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_record_batch",
    "record_count",
    "split_batches",
    "with_base_offset",
]
