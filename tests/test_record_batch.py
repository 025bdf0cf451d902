"""The Kafka v2 record batch codec, cross-checked byte for byte against real Kafka clients."""

import struct
from array import array

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KBuilder

from kop_spark.errors import CorruptRecordError
from kop_spark.record import (
    CompressionType,
    Record,
    RecordBatch,
    TimestampType,
    build_record_batch,
    record_count,
    split_batches,
)
from kop_spark.record.compacted_batch import thinned
from kop_spark.record.compression import compress, decompress
from kop_spark.record.default_record_batch import with_base_offset, with_log_append_time
from kop_spark.record.varint import read_varint, size_of_varint, write_varint

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3)
records = st.lists(
    st.builds(Record, value=maybe_bytes, key=maybe_bytes, timestamp_ms=st.integers(0, 2**41), headers=headers),
    min_size=1,
    max_size=30,
)
codecs = st.sampled_from(list(CompressionType))


def as_tuples(recs):
    return [(r.key, r.value, r.timestamp_ms, [tuple(h) for h in r.headers]) for r in recs]


def kafka_python_build(recs, codec):
    b = KBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, r in enumerate(recs):
        b.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
    return bytes(b.build())


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n):
    out = bytearray()
    write_varint(n, out)
    assert len(out) == size_of_varint(n)
    assert read_varint(bytes(out), 0) == (n, len(out))


def test_varint_zigzag_matches_protobuf():
    # ZigZag: 0->0, -1->1, 1->2, -2->3, 2147483647->4294967294
    for n, encoded in [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-65, b"\x81\x01")]:
        out = bytearray()
        write_varint(n, out)
        assert bytes(out) == encoded


def test_truncated_varint_is_corrupt():
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80\x80", 0)


@settings(max_examples=60, deadline=None)
@given(records)
def test_uncompressed_bytes_identical_to_kafka_python(recs):
    ours = build_record_batch(recs, partition_leader_epoch=0)  # kafka-python writes epoch 0
    assert ours == kafka_python_build(recs, CompressionType.NONE)


@settings(max_examples=40, deadline=None)
@given(records, codecs)
def test_ours_decode_in_kafka_python_and_aiokafka(recs, codec):
    ours = build_record_batch(recs, compression=codec)
    kb = KBatch(ours)
    assert kb.validate_crc()
    assert [(m.key, m.value, m.timestamp, list(m.headers)) for m in kb] == as_tuples(recs)
    ab = AioBatch(ours)
    assert ab.validate_crc()
    assert [(m.key, m.value, m.timestamp, list(m.headers)) for m in ab] == as_tuples(recs)


@settings(max_examples=40, deadline=None)
@given(records, codecs)
def test_kafka_python_batches_decode_here(recs, codec):
    theirs = kafka_python_build(recs, codec)
    batch = RecordBatch(theirs)
    batch.validate()
    assert batch.compression in (codec, CompressionType.NONE)  # kafka-python skips compression that does not shrink
    got = [(r.key, r.value, r.timestamp_ms, list(r.headers)) for r in batch.records()]
    assert got == as_tuples(recs)
    assert [r.offset for r in batch.records()] == list(range(len(recs)))


@settings(max_examples=20, deadline=None)
@given(records, codecs)
def test_aiokafka_batches_decode_here(recs, codec):
    b = AioBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, r in enumerate(recs):
        b.append(i, timestamp=r.timestamp_ms, key=r.key, value=r.value, headers=list(r.headers))
    batch = RecordBatch(bytes(b.build()))
    batch.validate()
    assert [(r.key, r.value, r.timestamp_ms, list(r.headers)) for r in batch.records()] == as_tuples(recs)


def test_header_fields_are_kafka_layout():
    recs = [Record(b"v", b"k", 1000), Record(b"w", None, 1005)]
    b = build_record_batch(
        recs,
        base_offset=7,
        partition_leader_epoch=3,
        producer_id=99,
        producer_epoch=2,
        base_sequence=11,
        is_transactional=True,
        compression=CompressionType.NONE,
    )
    (base, length, epoch, magic, _crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, seq, count) = (
        struct.unpack_from(">qiibIhiqqqhii", b)
    )
    assert (base, epoch, magic, attrs, last_delta, base_ts, max_ts, pid, pepoch, seq, count) == (
        7,
        3,
        2,
        0x10,
        1,
        1000,
        1005,
        99,
        2,
        11,
        2,
    )
    assert length == len(b) - 12
    rb = RecordBatch(b)
    assert rb.is_transactional and not rb.is_control
    assert [r.offset for r in rb.records()] == [7, 8]


def test_base_offset_is_outside_the_crc():
    b = build_record_batch([Record(b"v", timestamp_ms=5)])
    moved = with_base_offset(b, 1 << 40)
    rb = RecordBatch(moved)
    rb.validate()
    assert rb.records()[0].offset == 1 << 40


def test_log_append_time_overrides_record_timestamps():
    b = with_log_append_time(build_record_batch([Record(b"a", timestamp_ms=1), Record(b"b", timestamp_ms=2)]), 777)
    rb = RecordBatch(b)
    rb.validate()
    assert rb.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp_ms for r in rb.records()] == [777, 777]
    assert [m.timestamp for m in KBatch(b)] == [777, 777]


def test_control_batch_is_recognised():
    b = build_record_batch(
        [Record(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")],
        is_control=True,
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
    )
    assert RecordBatch(b).is_control
    assert KBatch(b).is_control_batch


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_flipped_byte_after_the_crc_is_detected(data):
    b = bytearray(build_record_batch([Record(b"value", b"key", 12345, [("h", b"x")])] * 3))
    i = data.draw(st.integers(21, len(b) - 1))
    b[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        RecordBatch(bytes(b)).validate()


def test_truncated_batch_is_corrupt():
    b = build_record_batch([Record(b"value")])
    for cut in (0, 10, 60, len(b) - 1):
        with pytest.raises(CorruptRecordError):
            RecordBatch(b[:cut])


def test_split_concatenated_batches():
    a = build_record_batch([Record(b"a")])
    b = build_record_batch([Record(b"b"), Record(b"c")])
    assert [bytes(x) for x in split_batches(a + b)] == [a, b]
    with pytest.raises(CorruptRecordError):
        split_batches(a + b[:-1])


def test_kafka_framing_of_lz4_and_snappy():
    data = bytes(range(256)) * 2000  # > 64 KiB: several blocks
    lz = compress(CompressionType.LZ4, data)
    flg, bd = lz[4], lz[5]
    assert lz[:4] == b"\x04\x22\x4d\x18"
    assert flg & 0x20, "Kafka's LZ4 reader needs independent blocks"
    assert not flg & 0x08, "Kafka writes no content size"
    assert bd >> 4 & 0x7 == 4, "64 KiB blocks"
    sn = compress(CompressionType.SNAPPY, data)
    assert sn.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    for codec in CompressionType:
        assert decompress(codec, compress(codec, data)) == data if codec else True
    import snappy  # raw (unframed) snappy, as some clients send it

    assert decompress(CompressionType.SNAPPY, snappy.compress(data)) == data


def test_garbage_compressed_payload_is_corrupt():
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):
        with pytest.raises(CorruptRecordError):
            decompress(
                codec,
                b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09garbage!!"
                if codec == CompressionType.SNAPPY
                else b"not compressed at all",
            )


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(records, codecs), max_size=5))
def test_record_count_is_what_kafka_python_reads_from_concatenated_batches(batches):
    data = b"".join(build_record_batch(recs, compression=codec) for recs, codec in batches)
    read = 0
    for view in split_batches(data):
        read += sum(1 for _ in KBatch(bytes(view)))
    assert record_count(data) == read == sum(len(recs) for recs, _ in batches)


@settings(max_examples=60, deadline=None)
@given(records, codecs, st.data())
def test_a_compacted_batch_reads_the_same_in_kafka_python(recs, codec, data):
    """Kafka's cleaner leaves a thinned batch: the records kept, each at its offset with its
    timestamp, key, value and headers, and the batch's span and producer as they were."""
    base = data.draw(st.integers(0, 2**40))
    batch = RecordBatch(
        with_base_offset(
            build_record_batch(recs, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3), base
        )
    )
    kept = data.draw(st.sets(st.sampled_from(range(base, base + len(recs))), min_size=1))
    compacted = thinned(batch, array("q", sorted(kept)))
    expected = [r for r in batch.records() if r.offset in kept]
    again = RecordBatch(compacted)
    assert again.is_valid() and again.records() == expected
    assert (again.base_offset, again.last_offset, again.producer_id, again.base_sequence) == (
        base,
        batch.last_offset,
        7,
        3,
    )
    assert again.max_timestamp == max(r.timestamp_ms for r in expected)
    kb = KBatch(compacted)
    assert kb.validate_crc()
    assert [(m.offset, m.timestamp, m.key, m.value, list(m.headers)) for m in kb] == [
        (r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for r in expected
    ]
