"""A record batch as Kafka's log cleaner leaves it: only the records compaction keeps, their bytes
as they were (their offset and timestamp deltas stay valid against the batch's unchanged base
offset and base timestamp), under a new header: the same span (``lastOffsetDelta``), producer and
sequence, the count of what is left, the largest timestamp kept (or the log's append time), and a
new CRC. The walk over the records is the codec's (``_speedups``): compiled when built."""

from __future__ import annotations

from . import _speedups
from .codec import Buffer, RecordsCodec
from .compression import decompress
from .default_record_batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, RecordBatch, seal_record_batch


def thinned(batch: RecordBatch, kept: Buffer, *, codec: RecordsCodec = _speedups.codec) -> bytes:
    """``batch`` with only its records at the absolute offsets ``kept`` (sorted int64s, one at least)."""
    payload: Buffer = memoryview(batch.buffer)[HEADER_SIZE:]
    if batch.attributes & COMPRESSION_MASK:
        payload = decompress(batch.attributes & COMPRESSION_MASK, bytes(payload))
    records, count, max_ts = codec.keep_records(
        payload, batch.record_count, batch.base_offset, batch.base_timestamp, kept
    )
    if not count:
        raise ValueError(f"none of the offsets to keep is in the batch at base offset {batch.base_offset}")
    return seal_record_batch(
        records,
        count,
        batch.base_timestamp,
        batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else max_ts,
        compression=batch.compression,
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        timestamp_type=batch.timestamp_type,
        last_offset_delta=batch.last_offset_delta,
    )
