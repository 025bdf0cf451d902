"""The compiled codec (``_crecords``) and its pure-Python reference (``_pyrecords``) give identical
results on every input: the same Arrow columns, the same batch bytes, the same partitions and the
same refusals of corrupt bytes. The reference is checked against Kafka clients elsewhere; here the
twin is checked against the reference."""

import os
import shutil
import subprocess
from array import array

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kop_spark.errors import CorruptRecordError, InvalidRecordError
from kop_spark.partitioner import partition_for_key
from kop_spark.record import CompressionType, Record, RecordBatch, TimestampType, _speedups, build_record_batch
from kop_spark.record.arrow import (
    _SCANNED_IN_PYTHON,
    HEADERS_TYPE,
    ArrowRecordBuilder,
    encode_arrow,
    encode_arrow_by_partition,
    first_at_or_after,
    key_partitions,
)
from kop_spark.record.default_record_batch import seal_record_batch, with_base_offset
from kop_spark.record.offset_table import OffsetTable
from kop_spark.storage import ledger_entry

from .conftest import PYTHON, python_subprocess_env

compiled, reference = _speedups.compiled, _speedups.reference
needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled codec is not built (no C compiler?)")

maybe_bytes = st.one_of(st.none(), st.binary(max_size=120))
records = st.lists(
    st.builds(
        Record,
        value=maybe_bytes,
        key=maybe_bytes,
        timestamp_ms=st.integers(-1, 2**41),
        headers=st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3),
    ),
    min_size=1,
    max_size=25,
)


def decode_both(batches, start, end, headers):
    out = []
    for codec in (reference, compiled):
        builder = ArrowRecordBuilder("t", 3, headers, codec=codec)
        base = 0
        for batch, span in batches:
            builder.add(RecordBatch(batch), base, start, end)
            base += span
        out.append(builder.build())
    return out


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.tuples(records, st.sampled_from(list(CompressionType)), st.booleans()), min_size=1, max_size=4),
    window=st.tuples(st.integers(0, 100), st.integers(0, 100)),
    headers=st.booleans(),
)
def test_decoders_build_the_same_arrow_batch(batches, window, headers):
    encoded = []
    for recs, codec, log_append in batches:
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        encoded.append(
            (build_record_batch(recs, compression=codec, timestamp_type=ts_type, log_append_time_ms=9), len(recs))
        )
    ours, theirs = decode_both(encoded, min(window), max(window), headers)
    assert ours.equals(theirs)
    assert ours.num_rows == sum(1 for o in range(sum(n for _, n in encoded)) if min(window) <= o < max(window))


@needs_compiled
def test_decoders_agree_over_many_batches_and_builds():
    """The compiled builder's columns keep the room they grew to from one batch to the next, grow
    past it by doubling, and start each build with the room the last one needed: hundreds of batches
    of mixed sizes (headers, keyless and valueless records) come out as the reference builds them,
    flushed every hundred batches and at the end."""
    batches = []
    for i in range(300):
        recs = [
            Record(
                value=None if j % 7 == 0 else bytes([i % 251]) * (j * 13 % 300),
                key=None if j % 5 == 0 else f"k{i}-{j}".encode(),
                timestamp_ms=i * 1000 + j,
                headers=[("h", bytes([j])) for _ in range(j % 3)],
            )
            for j in range(1 + i * 7 % 90)
        ]
        batches.append((build_record_batch(recs), len(recs)))
    total = sum(n for _, n in batches)
    built = []
    for codec in (reference, compiled):
        builder, base, flushes = ArrowRecordBuilder("t", 3, True, codec=codec), 0, []
        for i, (batch, span) in enumerate(batches):
            builder.add(RecordBatch(batch), base, 5, total - 5)
            base += span
            if i % 100 == 99 or i == len(batches) - 1:
                flushes.append(builder.build())
        built.append(flushes)
    ours, theirs = built
    assert len(ours) == len(theirs) == 3
    assert all(a.equals(b) for a, b in zip(ours, theirs, strict=True))
    assert sum(b.num_rows for b in ours) == total - 10


def run_of(batches: list[bytes], gaps: list[int]) -> tuple[bytes, array]:
    """The batches laid out in one buffer as a ledger holds them, other bytes between them (where a
    ledger keeps each entry's metadata), and their (position, size) spans."""
    data, spans = bytearray(), array("q")
    for batch, gap in zip(batches, gaps, strict=True):
        data += bytes([0xA5]) * gap
        spans.extend((len(data), len(batch)))
        data += batch
    return bytes(data), spans


def build_in_runs(codec, data, spans, window, headers, limits) -> list[pa.RecordBatch]:
    """The Arrow batches a Spark task builds from a run, flushed at the limits, as partition_reader does."""
    builder, taken, flushed = ArrowRecordBuilder("t", 3, headers, codec=codec), 0, []
    while taken < len(spans) // 2:
        taken = builder.add_batches(data, spans, taken, 1000, *window, *limits)
        if len(builder) >= limits[0] or builder.size_in_bytes >= limits[1]:
            flushed.append(builder.build())
    return [*flushed, builder.build()]


def build_one_by_one(data, spans, window, headers, limits) -> list[pa.RecordBatch]:
    builder, flushed = ArrowRecordBuilder("t", 3, headers, codec=reference), []
    for at, size in zip(spans[::2], spans[1::2], strict=True):
        batch = RecordBatch(data[at : at + size])
        builder.add(batch, 1000 + batch.base_offset, *window)
        if len(builder) >= limits[0] or builder.size_in_bytes >= limits[1]:
            flushed.append(builder.build())
    return [*flushed, builder.build()]


@needs_compiled
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(records, st.sampled_from(list(CompressionType)), st.booleans(), st.booleans()), min_size=1, max_size=6
    ),
    gaps=st.lists(st.integers(0, 40), min_size=6, max_size=6),
    window=st.tuples(st.integers(1000, 1100), st.integers(1000, 1100)),
    limits=st.tuples(st.integers(1, 60), st.integers(1, 1500)),
    headers=st.booleans(),
)
@example(  # flushed by bytes, not rows
    batches=[([Record(bytes(100), b"k")] * 20, CompressionType.NONE, False, False)] * 4,
    gaps=[3] * 6,
    window=(1000, 1100),
    limits=(1000, 500),
    headers=False,
)
def test_decoders_read_a_run_of_batches_as_batch_by_batch(batches, gaps, window, limits, headers):
    """A run of framed batches (compressed, control, LogAppendTime ones among them) decoded in one
    call per flush, by either twin, builds the Arrow batches that adding them one at a time builds:
    the same records, flushed at the same places."""
    encoded, base = [], 0
    for recs, codec, log_append, control in batches:
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        encoded.append(
            build_record_batch(
                recs,
                base_offset=base,
                compression=codec,
                timestamp_type=ts_type,
                log_append_time_ms=9,
                is_control=control,
            )
        )
        base += len(recs)
    data, spans = run_of(encoded, gaps[: len(encoded)])
    window = (min(window), max(window))
    expected = build_one_by_one(data, spans, window, headers, limits)
    for codec in (reference, compiled):
        got = build_in_runs(codec, data, spans, window, headers, limits)
        assert len(got) == len(expected) and all(a.equals(b) for a, b in zip(got, expected, strict=True))


@needs_compiled
@pytest.mark.parametrize("codec", ["reference", "compiled"])
def test_a_run_refuses_spans_outside_its_bytes_and_batches_not_framed(codec):
    run_codec = reference if codec == "reference" else compiled
    batch = build_record_batch([Record(b"v")])
    columns = ArrowRecordBuilder("t", 0, False)._columns
    for data, spans, says in (
        (batch, array("q", [1, len(batch)]), "lies outside the"),
        (batch, array("q", [0, 60]), "lies outside the"),
        (batch[:16] + b"\x01" + batch[17:], array("q", [0, len(batch)]), "not one framed magic-2 batch"),
    ):
        with pytest.raises(CorruptRecordError, match=says):
            run_codec.decode_batches(data, spans, 0, 0, 0, 1 << 62, False, 100, 1 << 20, columns)


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=records,
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=3),
    cut=st.integers(0, 10_000),
    headers=st.booleans(),
)
@example(  # a skipped record (its offset delta flipped negative) whose fields overrun its length
    recs=[Record(None, b"\0", 0), Record(None, b"\0\0\0", 1 << 20), Record(b"\x81", None, 0)],
    flips=[(2241, 132)],
    cut=0,
    headers=False,
)
def test_decoders_agree_on_corrupt_bytes(recs, flips, cut, headers):
    """Damage the records section (bypassing the CRC, as a codec bug would): both decoders refuse it
    with CorruptRecordError, or both read the same thing out of it."""
    batch = bytearray(build_record_batch(recs))
    for at, xor in flips:
        batch[61 + at % (len(batch) - 61)] ^= xor
    batch = batch[: max(61, len(batch) - cut % 8)]
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    results = []
    for codec in (reference, compiled):
        builder = ArrowRecordBuilder("t", 0, headers, codec=codec)
        try:
            builder.add(RecordBatch(bytes(batch)), 0)
            results.append(builder.build())
        except CorruptRecordError:
            results.append("corrupt")
    assert (results[0] == "corrupt" and results[1] == "corrupt") or results[0].equals(results[1])


def check_both(batch: bytes):
    """What each twin's check_records says of a batch's records section: its summary, or the
    name of the error it raised."""
    b = RecordBatch(batch)
    out = []
    for codec in (reference, compiled):
        try:
            out.append(codec.check_records(memoryview(batch)[61:], b.record_count, 0, b.base_timestamp))
        except (CorruptRecordError, InvalidRecordError) as e:
            out.append(type(e).__name__)
    return out


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(recs=records, deltas=st.one_of(st.none(), st.permutations(range(25))))
def test_checkers_summarize_what_the_decoder_reads(recs, deltas):
    offset_deltas = None if deltas is None else sorted(deltas[: len(recs)]) if len(recs) % 2 else deltas[: len(recs)]
    batch = build_record_batch(recs, offset_deltas=offset_deltas)
    ours, theirs = check_both(batch)
    assert ours == theirs
    read = reference_read(batch)
    assert ours == (
        read["offset"] == list(range(len(recs))),
        min((r.timestamp_ms for r in recs if r.timestamp_ms != -1), default=-1),
        max(r.timestamp_ms for r in recs),
        sum(r.key is None for r in recs),
    )


byte_flips = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=3)


def damaged(recs, flips, cut) -> bytes:
    """A batch of ``recs`` with bytes of its records section flipped, and cut short (``cut`` > 0) or
    given bytes left over (``cut`` < 0), bypassing the CRC as a codec bug would."""
    batch = bytearray(build_record_batch(recs))
    for at, xor in flips:
        batch[61 + at % (len(batch) - 61)] ^= xor
    batch = batch[: max(61, len(batch) - cut)] if cut > 0 else batch + bytes(-cut)
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    return bytes(batch)


def reference_read(batch: bytes) -> dict:
    builder = ArrowRecordBuilder("t", 0, True, codec=reference)
    builder.add(RecordBatch(batch), 0)
    return builder.build().to_pydict()


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=records,
    flips=byte_flips,
    cut=st.integers(-8, 8),
)
def test_checkers_agree_on_corrupt_bytes_and_refuse_what_the_decoder_refuses(recs, flips, cut):
    """Damaged records sections (bytes flipped, cut short or with bytes left over): both checkers
    refuse them alike, and whatever the Arrow reader cannot read, they refuse."""
    batch = damaged(recs, flips, cut)
    ours, theirs = check_both(batch)
    assert ours == theirs
    try:
        reference_read(batch)
    except CorruptRecordError:
        assert ours in ("CorruptRecordError", "InvalidRecordError")


def test_checkers_refuse_bytes_after_the_last_record():
    batch = bytearray(build_record_batch([Record(b"v", key=b"k")]) + b"\0")
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    for codec in filter(None, (reference, compiled)):
        with pytest.raises(CorruptRecordError, match="1 bytes after its 1 records"):
            codec.check_records(memoryview(batch)[61:], 1, 0, 0)


binary_column = st.lists(maybe_bytes, min_size=0, max_size=40)


@st.composite
def arrow_columns(draw):
    """values, keys, timestamps and headers of one length, sliced so that offsets are not zero."""
    n = draw(st.integers(1, 40))
    skip = draw(st.integers(0, 3))
    values = draw(st.lists(maybe_bytes, min_size=n + skip, max_size=n + skip))
    keys = draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n + skip, max_size=n + skip)))
    stamps = draw(
        st.one_of(
            st.none(), st.lists(st.one_of(st.none(), st.integers(0, 2**41)), min_size=n + skip, max_size=n + skip)
        )
    )
    header = st.fixed_dictionaries({"key": st.text(max_size=5), "value": maybe_bytes})
    headers = draw(
        st.one_of(
            st.none(),
            st.lists(st.one_of(st.none(), st.lists(header, max_size=3)), min_size=n + skip, max_size=n + skip),
        )
    )
    as_string = draw(st.booleans())

    def col(rows, type_):
        return None if rows is None else pa.array(rows, type_).slice(skip)

    if as_string and keys is not None:
        keys = [None if k is None else k.hex() for k in keys]
    return (
        col(values, pa.binary()),
        col(keys, pa.string() if as_string else pa.binary()),
        col(stamps, pa.int64()),
        col(headers, HEADERS_TYPE),
    )


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(columns=arrow_columns(), batch_bytes=st.integers(1, 3000), codec=st.sampled_from(list(CompressionType)))
def test_encoders_write_the_same_bytes_and_they_read_back(columns, batch_bytes, codec):
    values, keys, stamps, headers = columns
    ours, theirs = (
        encode_arrow(values, keys, stamps, headers, compression=codec, batch_bytes=batch_bytes, now_ms=77, codec=c)
        for c in (compiled, reference)
    )
    assert ours == theirs
    assert all(RecordBatch(b).is_valid() for b in ours)
    decoded = [r for b in ours for r in RecordBatch(b).records()]
    assert [r.value for r in decoded] == values.to_pylist()
    expected_keys = [None] * len(values) if keys is None else keys.cast(pa.binary()).to_pylist()
    assert [r.key for r in decoded] == expected_keys
    expected_ts = [77] * len(values) if stamps is None else [77 if t is None else t for t in stamps.to_pylist()]
    assert [r.timestamp_ms for r in decoded] == expected_ts
    expected_headers = (
        [()] * len(values)
        if headers is None
        else [tuple((h["key"], h["value"]) for h in hs or ()) for hs in headers.to_pylist()]
    )
    assert [r.headers for r in decoded] == expected_headers
    if codec == CompressionType.NONE:
        # A batch closes after the record that reaches batch.size: every batch but the last is full.
        assert all(len(b) - 61 >= batch_bytes for b in ours[:-1])


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(columns=arrow_columns(), picks=st.lists(st.integers(0, 10_000), max_size=30), batch_bytes=st.integers(1, 500))
def test_encoders_take_rows_in_the_order_given(columns, picks, batch_bytes):
    values, keys, stamps, headers = columns
    rows = pa.array([p % len(values) for p in picks], pa.uint64())
    ours, theirs = (
        encode_arrow(values, keys, stamps, headers, rows=rows, batch_bytes=batch_bytes, now_ms=5, codec=c)
        for c in (compiled, reference)
    )
    assert ours == theirs
    assert [r.value for b in ours for r in RecordBatch(b).records()] == values.take(rows).to_pylist()


@needs_compiled
def test_encoders_match_a_record_by_record_build():
    values = pa.array([b"v%d" % i for i in range(10)])
    keys = pa.array([None if i % 3 == 0 else b"k%d" % i for i in range(10)])
    stamps = pa.array([1_700_000_000_000 + i for i in range(10)], pa.int64())
    expected = build_record_batch(
        [
            Record(value=v, key=k, timestamp_ms=t)
            for v, k, t in zip(values.to_pylist(), keys.to_pylist(), stamps.to_pylist(), strict=False)
        ],
        compression=CompressionType.LZ4,
    )
    for codec in (compiled, reference):
        assert encode_arrow(
            values, keys, stamps, compression=CompressionType.LZ4, batch_bytes=1 << 20, codec=codec
        ) == [expected]


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(keys=binary_column, skip=st.integers(0, 3), n=st.one_of(st.integers(1, 50), st.integers(1, 2**31 - 1)))
def test_key_partitions_are_kafkas(keys, skip, n):
    # The compiled twin takes the remainder by multiplications, exact for any partition count.
    arr = pa.array(keys, pa.binary()).slice(min(skip, len(keys)))
    expected = [None if k is None else partition_for_key(k, n) for k in arr.to_pylist()]
    for codec in (compiled, reference):
        assert key_partitions(arr, n, codec=codec).to_pylist() == expected


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(
    stamps=st.lists(st.one_of(st.none(), st.integers(-(2**50), 2**50)), min_size=1, max_size=30),
    unit=st.sampled_from(["s", "ms", "us", "ns"]),
)
def test_encoders_take_timestamps_of_any_unit_floored_to_milliseconds(stamps, unit):
    """Spark hands its sink microseconds; Kafka stores milliseconds, floored as Spark's own Kafka
    sink floors them (DateTimeUtils.toMillis), before 1970 too."""
    per_ms = {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    if unit == "s":
        stamps = [None if t is None else t // 10**6 for t in stamps]  # seconds Arrow can make milliseconds of
    column = pa.array(stamps, pa.timestamp(unit, tz="UTC"))
    values = pa.array([b"v"] * len(stamps))
    ours, theirs = (encode_arrow(values, None, column, now_ms=9, codec=c) for c in (compiled, reference))
    assert ours == theirs
    expected = [9 if t is None else t * 1000 if unit == "s" else t // per_ms for t in stamps]
    assert [r.timestamp_ms for b in ours for r in RecordBatch(b).records()] == expected


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(
    columns=arrow_columns(),
    data=st.data(),
    batch_bytes=st.integers(1, 500),
    codec=st.sampled_from(list(CompressionType)),
)
def test_encoders_split_rows_by_partition_in_one_pass_as_row_by_row(columns, data, batch_bytes, codec):
    """Each partition's batches are those of its rows encoded alone, in their order."""
    values, keys, stamps, headers = columns
    parts = data.draw(st.lists(st.integers(0, 4), min_size=len(values), max_size=len(values)))
    skip = data.draw(st.integers(0, 3))
    where = pa.array([0] * skip + parts, pa.int32()).slice(skip)
    for c in (compiled, reference):
        split = encode_arrow_by_partition(
            values,
            keys,
            stamps,
            headers,
            partitions=where,
            num_partitions=5,
            compression=codec,
            batch_bytes=batch_bytes,
            now_ms=3,
            codec=c,
        )
        alone = [
            encode_arrow(
                values,
                keys,
                stamps,
                headers,
                rows=pa.array([i for i, q in enumerate(parts) if q == p], pa.uint64()),
                compression=codec,
                batch_bytes=batch_bytes,
                now_ms=3,
                codec=c,
            )
            for p in range(5)
        ]
        assert split == alone
        with pytest.raises(ValueError, match="not one of 0 to 4"):
            encode_arrow_by_partition(
                values,
                keys,
                stamps,
                headers,
                partitions=pa.array([5] * len(values), pa.int32()),
                num_partitions=5,
                codec=c,
            )


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(
    recs=records,
    base=st.integers(0, 2**40),
    codec=st.sampled_from(list(CompressionType)),
    log_append=st.booleans(),
    data=st.data(),
)
def test_the_first_record_at_or_after_a_time_is_the_one_a_walk_finds(recs, base, codec, log_append, data):
    """ListOffsets by time: what the codec finds is what walking the records one by one finds, in
    batches small enough to be scanned in Python and large enough for Arrow's kernels, from any
    offset on (the log start)."""
    if data.draw(st.booleans(), label="past the Python scan"):
        recs = recs * (_SCANNED_IN_PYTHON // len(recs) + 1)
    near = [r.timestamp_ms + d for r in recs for d in (-1, 0, 1)] + [2**40]  # at a record's time, or either side
    target = data.draw(st.one_of(st.integers(0, 2**41 + 10), st.sampled_from(near)))
    start = data.draw(st.integers(base, base + len(recs)), label="start")
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    batch = RecordBatch(
        build_record_batch(recs, compression=codec, base_offset=base, timestamp_type=ts_type, log_append_time_ms=2**40)
    )
    walked = next(
        ((r.offset, r.timestamp_ms) for r in batch.records() if r.offset >= start and r.timestamp_ms >= target), None
    )
    for c in (compiled, reference):
        assert first_at_or_after(batch, target, start=start, codec=c) == walked


@needs_compiled
def test_compiled_codec_refuses_buffers_shorter_than_their_rows():
    short = pa.array([b"abc", b"de"])
    _validity, offsets, data = short.buffers()
    for codec in (compiled, reference):
        with pytest.raises((ValueError, IndexError)):
            codec.encode_records(
                None, (None, offsets, data, 0), None, None, None, None, 1, 5, 100, 0, False, [bytearray()]
            )


def _encode_halves(columns, batch_bytes, codec, into):
    """Rows alternately into two partitions."""
    values, keys, stamps, headers = columns
    where = pa.array([i % 2 for i in range(len(values))], pa.int32())
    return encode_arrow_by_partition(
        values,
        keys,
        stamps,
        headers,
        partitions=where,
        num_partitions=2,
        batch_bytes=batch_bytes,
        now_ms=4,
        codec=codec,
        into=into,
    )


@needs_compiled
@settings(max_examples=50, deadline=None)
@given(first=arrow_columns(), second=arrow_columns(), batch_bytes=st.integers(1, 500))
def test_encoders_reuse_the_bytearrays_given_once_their_batches_are_let_go(first, second, batch_bytes):
    """The sink passes the same bytearrays for every Arrow batch: each call's batches are what a
    fresh call gives, and one still held is never written over."""
    for c in (compiled, reference):
        into = [bytearray(b"left over"), bytearray()]
        for columns in (first, second):
            reused = _encode_halves(columns, batch_bytes, c, into)
            assert reused == _encode_halves(columns, batch_bytes, c, None)
            held = reused[0][0]
            before = bytes(held)
            del reused
            with pytest.raises(BufferError, match=r"^into\[0\]|re-?sized"):
                _encode_halves(second, batch_bytes, c, into)
            assert held == before
            held.release()


def test_the_install_built_the_compiled_codec():
    """./dev.sh's install builds the twin wherever there is a C compiler; a silent fallback to the
    reference would leave users five to forty times slower."""
    if os.environ.get("KOP_SPARK_NO_EXTENSIONS"):
        pytest.skip("KOP_SPARK_NO_EXTENSIONS is set")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the pure-Python codec is what an install gives")
    assert compiled is not None
    assert ledger_entry.verify_entries is not ledger_entry.verify_entries_reference  # its storage twin


def test_no_extensions_switch_selects_the_reference():
    env = python_subprocess_env()
    env["KOP_SPARK_NO_EXTENSIONS"] = "1"
    out = subprocess.run(
        [
            PYTHON,
            "-c",
            "from kop_spark.record import _speedups as s; from kop_spark.storage import ledger_entry as e; "
            "print(s.codec.__name__, e.verify_entries.__name__)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["kop_spark.record._pyrecords", "verify_entries_reference"]


def keep_both(batch: bytes, kept: list[int]):
    """What each twin's keep_records makes of a batch's records section: its result, or the name of
    the error it raised."""
    b = RecordBatch(batch)
    out = []
    for codec in (reference, compiled):
        try:
            out.append(
                codec.keep_records(memoryview(batch)[61:], b.record_count, 7, b.base_timestamp, array("q", kept))
            )
        except CorruptRecordError as e:
            out.append(type(e).__name__)
    return out


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(recs=records, data=st.data())
def test_compactions_keep_the_same_records(recs, data):
    """Both twins keep the same records' bytes, count and largest timestamp, for any offsets kept
    (sorted, some outside the batch), and what they keep is each kept record's bytes as they were."""
    kept = sorted(data.draw(st.sets(st.integers(0, 40))))
    batch = build_record_batch(recs)
    ours, theirs = keep_both(batch, kept)
    assert ours == theirs
    section, count, max_ts = ours
    original = RecordBatch(with_base_offset(batch, 7))
    expected = [r for r in original.records() if r.offset in kept]
    assert (count, max_ts) == (len(expected), max((r.timestamp_ms for r in expected), default=-1))
    resealed = seal_record_batch(section, count, original.base_timestamp, max_ts, base_offset=7)
    assert (RecordBatch(resealed).records() if count else []) == expected


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=records,
    flips=byte_flips,
    cut=st.integers(-8, 8),
    kept=st.sets(st.integers(0, 40)),
)
def test_compactions_agree_on_corrupt_bytes(recs, flips, cut, kept):
    ours, theirs = keep_both(damaged(recs, flips, cut), sorted(kept))
    assert ours == theirs


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.booleans()), max_size=60),
    asked=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=20),
    spare=st.integers(0, 20),
    sliced=st.integers(0, 3),
)
def test_offset_tables_fill_the_same_slots_and_keep_each_keys_latest(rows, asked, spare, sliced):
    """Both twins put each key's digest and latest offset in the same slot, so a table built by one
    is read by the other; what the table keeps is each key's last row, tombstones past the horizon
    left out, as a dict of the keys keeps it. Columns sliced from an offset, as cuts of Arrow
    batches come."""
    rows = [(None, False)] * sliced + rows
    keys = pa.array([k for k, _ in rows], pa.binary()).slice(sliced)
    offsets = pa.array(range(len(rows)), pa.int64()).slice(sliced)
    expired = pa.array([e for _, e in rows]).slice(sliced)
    slots = len({k for k, _ in rows[sliced:] if k is not None}) + 1 + spare
    tables = [OffsetTable(slots, codec=codec) for codec in (reference, compiled)]
    for table in tables:
        table.put(keys, offsets, expired)
    assert tables[0]._table == tables[1]._table and tables[0].entries == tables[1].entries
    latest = {k: (i, e) for i, (k, e) in enumerate(rows) if k is not None and i >= sliced}
    assert tables[0].entries == len(latest)
    assert list(tables[1].live()) == sorted(i for i, e in latest.values() if not e)
    values = [0 if k not in latest else -(latest[k][0] + 1) if latest[k][1] else latest[k][0] + 1 for k in asked]
    for table in tables:
        assert table.get(pa.array(asked, pa.binary())).to_pylist() == values


@needs_compiled
@pytest.mark.parametrize("codec", ["reference", "compiled"])
def test_an_offset_table_refuses_a_key_past_its_slots(codec):
    table = OffsetTable(2, codec=getattr(_speedups, codec))
    table.put(pa.array([b"a", b"a", b"b"]), pa.array([0, 1, 2], pa.int64()), pa.array([False] * 3))
    with pytest.raises(ValueError, match="the offset table's 2 slots are full"):
        table.put(pa.array([b"c"]), pa.array([3], pa.int64()), pa.array([False]))
