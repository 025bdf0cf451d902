"""The Arrow decoder against the reference record decoder, and the offset-range arithmetic of the
Spark source against the rules of Spark's Kafka source."""

import datetime

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from kop_spark.errors import CorruptRecordError
from kop_spark.record import CompressionType, Record, RecordBatch, TimestampType, build_record_batch
from kop_spark.record.arrow import ArrowRecordBuilder
from kop_spark.spark.offset_range import OffsetRange, pack_ranges, rate_limit, split_ranges

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))
records = st.lists(
    st.builds(
        Record,
        value=maybe_bytes,
        key=maybe_bytes,
        timestamp_ms=st.integers(0, 2**41),
        headers=st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


def reference_rows(batch, base_offset, start, end, timestamp_type):
    out = []
    for r in RecordBatch(batch).records():
        offset = base_offset + r.offset - RecordBatch(batch).base_offset
        if start <= offset < end:
            out.append(
                {
                    "key": r.key,
                    "value": r.value,
                    "topic": "t",
                    "partition": 4,
                    "offset": offset,
                    "timestamp_ms": r.timestamp_ms,
                    "timestampType": timestamp_type,
                    "headers": [{"key": k, "value": v} for k, v in r.headers],
                }
            )
    return out


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.tuples(records, st.sampled_from(list(CompressionType)), st.booleans()), min_size=1, max_size=4),
    window=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    headers=st.booleans(),
)
def test_arrow_columns_equal_the_reference_decoder(batches, window, headers):
    start, end = min(window), max(window)
    builder = ArrowRecordBuilder("t", 4, headers)
    expected, base = [], 0
    for recs, codec, log_append in batches:
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        batch = build_record_batch(recs, compression=codec, timestamp_type=ts_type, log_append_time_ms=123)
        builder.add(RecordBatch(batch), base, start, end)
        expected += reference_rows(batch, base, start, end, int(ts_type))
        base += len(recs)
    if not headers:
        for row in expected:
            row["headers"] = []
    got = builder.build().to_pylist()
    assert len(builder) == 0  # build() empties the builder
    for row in got:
        assert ("headers" in row) == headers
        row.setdefault("headers", [])
        row["timestamp_ms"] = (row.pop("timestamp") - EPOCH) // datetime.timedelta(milliseconds=1)
    for row in expected:
        if not headers:
            row["headers"] = []
    assert got == [
        {
            k: row[k]
            for k in ("key", "value", "topic", "partition", "offset", "timestamp_ms", "timestampType", "headers")
        }
        for row in expected
    ]


def test_arrow_decoder_reads_what_a_kafka_client_wrote():
    b = AioBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(5):
        b.append(
            i, timestamp=1_700_000_000_000 + i, key=None if i % 2 else b"k", value=b"v%d" % i, headers=[("h", b"x")]
        )
    builder = ArrowRecordBuilder("t", 0, True)
    builder.add(RecordBatch(bytes(b.build())), 100)
    rb = builder.build()
    assert rb.column("offset").to_pylist() == [100, 101, 102, 103, 104]
    assert rb.column("key").to_pylist() == [b"k", None, b"k", None, b"k"]
    assert rb.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]
    assert rb.schema.field("timestamp").type.tz == "UTC"


def test_control_batches_add_nothing_and_bad_records_raise():
    builder = ArrowRecordBuilder("t", 0, False)
    builder.add(RecordBatch(build_record_batch([Record(value=b"x", timestamp_ms=1)], is_control=True)), 0)
    assert len(builder) == 0
    batch = bytearray(build_record_batch([Record(value=b"abc", key=b"k", timestamp_ms=1)]))
    batch[61] = 0x7E  # record length varint: 63 bytes, far past the batch's end
    with pytest.raises(CorruptRecordError, match="overruns"):
        builder.add(RecordBatch(bytes(batch)), 0)


def R(p, start, end, topic="t"):
    return OffsetRange(topic, p, start, end)


def test_split_ranges_follows_sparks_calculator():
    ranges = [R(0, 0, 90), R(1, 0, 10), R(2, 5, 5)]
    assert split_ranges(ranges, None, None) == [R(0, 0, 90), R(1, 0, 10)]  # empty ranges dropped
    assert split_ranges(ranges, 2, None) == [R(0, 0, 90), R(1, 0, 10)]  # enough already
    # 10 tasks: the small range stays whole, the large one takes the other nine.
    split = split_ranges(ranges, 10, None)
    assert [r for r in split if r.partition == 1] == [R(1, 0, 10)]
    assert [r.size for r in split if r.partition == 0] == [10] * 9
    capped = split_ranges(ranges, None, 25)
    assert [(r.partition, r.start, r.end) for r in capped] == [
        (0, 0, 22),
        (0, 22, 45),
        (0, 45, 67),
        (0, 67, 90),
        (1, 0, 10),
    ]


@given(
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    min_parts=st.integers(1, 50),
    max_records=st.one_of(st.none(), st.integers(1, 5_000)),
)
def test_split_ranges_covers_every_offset_once(sizes, min_parts, max_records):
    ranges = [R(p, 1000, 1000 + n) for p, n in enumerate(sizes)]
    split = split_ranges(ranges, min_parts, max_records)
    for p, n in enumerate(sizes):
        mine = [r for r in split if r.partition == p]
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(1000, 1000 + n))
        if max_records is not None:
            assert all(r.size <= max_records for r in mine)


def test_pack_ranges_evens_out_at_most_the_tasks_asked():
    ranges = [R(0, 0, 90), R(1, 0, 10), R(2, 0, 40), R(3, 0, 50)]
    assert pack_ranges(ranges, None) == [[r] for r in ranges]  # a task a range, as Spark's Kafka source
    assert pack_ranges(ranges, 4) == [[r] for r in ranges]
    # largest first, each to the lightest task: 90 | 50 | 40 + 10
    assert pack_ranges(ranges, 3) == [[R(0, 0, 90)], [R(3, 0, 50)], [R(1, 0, 10), R(2, 0, 40)]]
    assert pack_ranges(ranges, 1) == [sorted(ranges)]


@given(
    sizes=st.lists(st.integers(1, 10_000), min_size=1, max_size=40),
    max_tasks=st.one_of(st.none(), st.integers(1, 50)),
)
def test_pack_ranges_reads_every_range_once_in_tasks_about_even(sizes, max_tasks):
    ranges = [R(p, 7, 7 + n, topic=f"t{p % 3}") for p, n in enumerate(sizes)]
    tasks = pack_ranges(ranges, max_tasks)
    assert sorted(r for t in tasks for r in t) == sorted(ranges)
    assert all(t == sorted(t) and t for t in tasks)
    assert len(tasks) == (len(ranges) if max_tasks is None else min(max_tasks, len(ranges)))
    loads = [sum(r.size for r in t) for t in tasks]
    assert max(loads) - min(loads) <= max(sizes)  # no task is more than a range heavier than another


def test_rate_limit_prorates_by_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 50}
    assert rate_limit(80, start, latest) == {("t", 0): 60, ("t", 1): 20, ("t", 2): 50}
    # A tiny backlog is not starved: its share rounds up to one.
    assert rate_limit(10, {("a", 0): 0, ("b", 0): 0}, {("a", 0): 1000, ("b", 0): 1}) == {("a", 0): 9, ("b", 0): 1}
    assert rate_limit(10**6, start, latest) == latest
