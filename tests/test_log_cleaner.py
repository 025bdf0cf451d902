"""Compaction against a model of Kafka's: after any history of batches (compressed or not,
tombstones young and old, several compactions between appends), exactly the latest record of each
key is left, less tombstones past ``delete.retention.ms``, each at its offset with its timestamp
and headers, and every other offset reads as empty."""

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kop_spark import Broker, Record
from kop_spark.clock import ManualClock
from kop_spark.record import CompressionType, RecordBatch, build_record_batch
from kop_spark.storage.offset_map import OffsetMap

NOW = int(time.time() * 1000)
DELETE_RETENTION_MS = 60_000

_records = st.lists(
    st.builds(
        Record,
        value=st.none() | st.binary(max_size=8),  # None: a tombstone
        key=st.sampled_from([b"", b"a", b"b", b"c", b"d" * 40]),
        timestamp_ms=st.sampled_from([NOW, NOW - 2 * DELETE_RETENTION_MS]),  # young or past the horizon
        headers=st.sampled_from([(), (("h", b"x"),)]),
    ),
    min_size=1,
    max_size=6,
)
_batch = st.tuples(_records, st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]))
# Rounds of appends, each followed by a compaction: the later ones rewrite compacted batches.
_history = st.lists(st.lists(_batch, min_size=1, max_size=5), min_size=1, max_size=3)


def _row(offset: int, r: Record) -> tuple[object, ...]:
    return offset, r.key, r.value, r.timestamp_ms, tuple(r.headers)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_history)
def test_compaction_keeps_what_kafkas_cleaner_keeps(tmp_path_factory, history):
    b = Broker(
        str(tmp_path_factory.mktemp("store")), conf={"managedLedgerMaxEntriesPerLedger": 3}, clock=ManualClock(NOW)
    )
    b.create_topic("c", 1, config={"cleanup.policy": "compact", "delete.retention.ms": DELETE_RETENTION_MS})
    written: list[tuple[int, Record]] = []
    for appends in history:
        for records, compression in appends:
            base = b.produce_batches("c", 0, [build_record_batch(records, compression=compression)])
            written += [(base + i, r) for i, r in enumerate(records)]
        b.compact("c")
    latest = {r.key: (offset, r) for offset, r in written}
    horizon = NOW - DELETE_RETENTION_MS
    expected = sorted(_row(o, r) for o, r in latest.values() if r.value is not None or r.timestamp_ms >= horizon)
    start = b.list_offsets("c", 0, "earliest")  # past the records compacted away from the log's head
    got = [_row(r.offset, r) for r in b.fetch("c", 0, start, max_records=1000)]
    assert got == expected
    assert b.list_offsets("c", 0, "latest") == len(written), "offsets stay"
    assert b.verify() == {}
    b.close()


def test_the_offset_map_folds_chunks_in_offset_order():
    """More records than one chunk holds: keys whose records straddle the chunks keep their latest,
    and a tombstone past the horizon is not kept, whichever chunk it is in."""
    n, keys = 200_000, 70_000
    records = [
        Record(None if i % 7 == 0 else b"v", key=b"k%d" % (i % keys), timestamp_ms=NOW - (i % 3) * DELETE_RETENTION_MS)
        for i in range(n)
    ]
    offsets = OffsetMap(NOW - DELETE_RETENTION_MS, decoded_bytes=64 << 10)  # folded several times
    for base in range(0, n, 1000):
        offsets.add(RecordBatch(build_record_batch(records[base : base + 1000])), base)
    latest = {r.key: i for i, r in enumerate(records)}
    expected = sorted(
        i
        for i in latest.values()
        if records[i].value is not None or records[i].timestamp_ms >= NOW - DELETE_RETENTION_MS
    )
    assert offsets.seal() == len(expected)
    assert list(offsets.kept(0, n)) == expected
    assert list(offsets.kept(expected[5], expected[9])) == expected[5:10]


def test_an_offset_map_given_no_records_keeps_none():
    """A run whose entries hold no record (none added to the map) keeps nothing, and says so."""
    offsets = OffsetMap(NOW)
    assert offsets.seal() == 0
    assert len(offsets.kept(0, 1 << 62)) == 0
