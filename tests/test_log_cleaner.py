"""Compaction against a model of Kafka's: after any history of batches (compressed or not,
tombstones young and old, several compactions between appends), exactly the latest record of each
key is left, less tombstones past ``delete.retention.ms``, each at its offset with its timestamp
and headers, and every other offset reads as empty."""

import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kop_spark import Broker, Record
from kop_spark.clock import ManualClock
from kop_spark.record import CompressionType, RecordBatch, build_record_batch
from kop_spark.storage.ledger_metadata import (
    CLEANING_LEASE_MS,
    OPEN,
    SEALED,
    CleaningMark,
    LedgerRecord,
    LogMetadata,
)
from kop_spark.storage.offset_map import OffsetMap

from . import servers
from .conftest import python_subprocess_env, read_partition

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


@pytest.mark.parametrize("dedupe_buffer", [None, 1], ids=["map-holds-all", "a-pass-a-batch"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_history)
def test_compaction_keeps_what_kafkas_cleaner_keeps(tmp_path_factory, dedupe_buffer, history):
    """Also with an offset map that is full after one batch: a compaction then takes a pass per
    batch, each mapping the next batch and looking up the records compacted by the passes before."""
    conf: dict[str, object] = {"managedLedgerMaxEntriesPerLedger": 3}
    if dedupe_buffer is not None:
        conf["log.cleaner.dedupe.buffer.size"] = dedupe_buffer
    b = Broker(str(tmp_path_factory.mktemp("store")), conf=conf, clock=ManualClock(NOW))
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


def _batch_of(keys: range, value: bytes = b"v") -> bytes:
    return build_record_batch([Record(value, key=b"k%d" % k, timestamp_ms=NOW) for k in keys])


_PEAK = """
import logging, os, sys
import pyarrow as pa
from kop_spark import Broker
from kop_spark.record.offset_table import OffsetTable
tables = [0]
made = OffsetTable.__init__
def counted(self, slots, **kw):
    made(self, slots, **kw)
    tables.append(self.nbytes)
OffsetTable.__init__ = counted
passes = []
handler = logging.Handler()
handler.emit = lambda record: passes.append(record.getMessage())
logging.getLogger("kop_spark.storage.log_cleaner").addHandler(handler)
logging.getLogger("kop_spark.storage.log_cleaner").setLevel(logging.INFO)
b = Broker(sys.argv[1], conf={"log.cleaner.dedupe.buffer.size": int(sys.argv[2])})
before = pa.default_memory_pool().max_memory()
b.compact("c")
peak = pa.default_memory_pool().max_memory() + max(tables)  # the map's: its columns, its table
print(before, peak, sum("compacting offsets" in p for p in passes), flush=True)
os._exit(0)
"""


def _compaction_peak(root: str, budget: int) -> tuple[int, int]:
    """The most memory compacting 150,000 distinct keys of 400 bytes (60 MB of keys) took in Arrow's
    pool and its offset table, with ``log.cleaner.dedupe.buffer.size`` = ``budget``, in a process of its own,
    and the passes it took."""
    with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 50}) as b:
        b.create_topic("c", 1, config={"cleanup.policy": "compact"})
        for first in range(0, 150_000, 1000):
            records = [Record(b"v", key=b"%0400d" % k, timestamp_ms=NOW) for k in range(first, first + 1000)]
            b.produce_batches("c", 0, [build_record_batch(records)])
    out = subprocess.run([sys.executable, "-c", _PEAK, root, str(budget)], capture_output=True, text=True, check=True)
    before, peak, passes = map(int, out.stdout.split())
    assert before < budget // 8, "the process used Arrow memory before it compacted"
    assert len(read_partition(Broker(root), "c", 0)[2]) == 150_000, "each key kept"
    return peak, passes


def test_a_compaction_takes_about_the_memory_its_budget_allows(tmp_path):
    """The map holds a 16-byte digest of each key, as Kafka's does, so 60 MB of keys take one pass
    within a budget of 16 MiB; and a budget of 1 GiB is not taken by a map that needs less: its
    table is made for the records to map."""
    small = 16 << 20
    peak, passes = _compaction_peak(str(tmp_path / "small"), small)
    assert peak <= small * 3 // 2 and passes == 1
    peak, passes = _compaction_peak(str(tmp_path / "large"), 1 << 30)
    assert peak < (1 << 30) // 8 and passes == 1  # decoding 32 MiB at a time, its table of 4 MB


def test_records_before_the_map_are_kept_unless_the_map_supersedes_them():
    """``ask`` and ``answer``: a record compacted by an earlier pass stays unless the map holds a
    later one of its key; a tombstone past the horizon goes either way."""
    offsets = OffsetMap(NOW - DELETE_RETENTION_MS)
    offsets.add(RecordBatch(_batch_of(range(4))), 10)  # k0-k3 at 10-13
    offsets.seal()
    old_tombstone = Record(None, key=b"k9", timestamp_ms=NOW - 2 * DELETE_RETENTION_MS)
    young_tombstone = Record(None, key=b"k8", timestamp_ms=NOW)
    offsets.ask(RecordBatch(_batch_of(range(2, 6))), 0)  # k2-k5 at 0-3: k2, k3 superseded
    offsets.ask(RecordBatch(build_record_batch([old_tombstone, young_tombstone])), 4)
    assert list(offsets.answer().between(0, 9)) == [2, 3, 5]
    assert len(offsets.answer()) == 0, "an answer is for the batches asked about since the last"


def test_a_compaction_maps_only_what_came_since_the_last_in_passes_its_budget_allows(tmp_path, caplog):
    """The background cleaner with a small ``log.cleaner.dedupe.buffer.size``: more distinct keys
    than its map holds are compacted in several passes, each mapping on from where the last
    reached; the next compaction maps only the records appended since. Either way exactly the
    latest record of each key is left."""
    conf = {"managedLedgerMaxEntriesPerLedger": 2, "log.cleaner.dedupe.buffer.size": 8 << 10}
    b = Broker(str(tmp_path), conf=conf, clock=ManualClock(NOW))
    config = {"cleanup.policy": "compact", "delete.retention.ms": DELETE_RETENTION_MS, "min.cleanable.dirty.ratio": 0.1}
    b.create_topic("c", 1, config=config)
    for round_, keys in enumerate([range(3000), range(0, 3000, 3)]):
        for first in range(keys.start, keys.stop, 300):
            b.produce_batches("c", 0, [_batch_of(range(first, min(first + 300, keys.stop), keys.step), b"%d" % round_)])
        b.produce("c", [Record(b"x", key=b"tail")], partition=0)  # an open ledger: the cleaner leaves it
        cleaned_before = b.view("c", 0).cleaned_offset
        with caplog.at_level(logging.INFO, "kop_spark.storage.log_cleaner"):
            caplog.clear()
            assert b.clean_logs("c").partitions_compacted == ["c-0"]
        passes = [r.getMessage() for r in caplog.records if "compacting offsets" in r.getMessage()]
        assert len(passes) > 1, "the map held every key"
        assert passes[0].endswith(f"by the keys of offsets {cleaned_before} to {passes[0].split()[-1]}")
        open_tail = b.view("c", 0).ledgers[-1]
        assert open_tail.state == OPEN and b.view("c", 0).cleaned_offset == open_tail.base_offset
        assert passes[-1].endswith(f"to {open_tail.base_offset}"), "the passes went on to the open ledger"
    records = read_partition(b, "c", 0)[2]
    assert {r.key: r.value for r in records} == {b"k%d" % k: b"1" if k % 3 == 0 else b"0" for k in range(3000)} | {
        b"tail": b"x"
    }
    compacted = [r.key for r in records if r.offset < open_tail.base_offset]
    assert len(compacted) == len(set(compacted)), "one record a key where compacted"
    assert b.verify() == {}


def test_a_compaction_writes_ledgers_of_about_the_target_size(tmp_path):
    """As Kafka's cleaner groups its output into segments: a compacted log of 3 MiB comes out as
    ledgers of about ``maintenanceTargetLedgerMbytes`` (1 MiB), spanning the log's offsets between
    them, every record read back where it was."""
    conf = {"maintenanceTargetLedgerMbytes": 1, "managedLedgerMaxEntriesPerLedger": 10}
    with Broker(str(tmp_path), conf=conf) as b:
        b.create_topic("c", 1, config={"cleanup.policy": "compact"})
        value = b"v" * 1000
        for first in range(0, 3000, 100):
            b.produce_batches("c", 0, [_batch_of(range(first, first + 100), value)])
        before = [(r.offset, r.key) for r in read_partition(b, "c", 0)[2]]
        assert b.compact_partition("c", 0) == 3000
        ledgers = b.view("c", 0).ledgers
        assert len(ledgers) == 3 and all(l.length < (1 << 20) + 200_000 for l in ledgers), ledgers
        assert [l.base_offset for l in ledgers[1:]] == [l.end_offset for l in ledgers[:-1]]
        assert (ledgers[0].base_offset, ledgers[-1].end_offset) == (0, 3000)
        assert [(r.offset, r.key) for r in read_partition(b, "c", 0)[2]] == before
        assert b.verify() == {}


_HELD = """
import os, sys, tracemalloc
import pandas  # imported by pyarrow's group-by: not the compaction's memory
from kop_spark import Broker
b = Broker(sys.argv[1], conf={"log.cleaner.dedupe.buffer.size": 1 << 20, "maintenanceTargetLedgerMbytes": 1})
tracemalloc.start()
b.compact("c")
print(tracemalloc.get_traced_memory()[1], flush=True)
os._exit(0)
"""


def test_a_compaction_on_an_object_store_holds_a_few_reads_of_the_log_in_memory(running):
    """On S3 (moto's server) a ledger is written whole from memory and read in 8 MiB ranges: a
    compaction of 48 MB, after updates of every tenth key, holds a read or two and a ledger of
    its output at a time, not the log it rewrites."""
    root = f"s3://{servers.BUCKET}/compaction-{uuid.uuid4().hex[:8]}"
    value = b"v" * 4000
    with Broker(root) as b:
        b.create_topic("c", 1, config={"cleanup.policy": "compact"})
        for first in range(0, 12_000, 50):
            b.produce_batches("c", 0, [_batch_of(range(first, first + 50), value)])
        b.compact("c")
        for first in range(0, 12_000, 500):
            b.produce_batches("c", 0, [_batch_of(range(first, first + 500, 10), b"new")])
    out = subprocess.run([sys.executable, "-c", _HELD, root], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 32 << 20, "the compaction held its log in memory"
    b = Broker(root)
    assert {r.key: r.value for r in read_partition(b, "c", 0)[2]} == {
        b"k%d" % k: b"new" if k % 10 == 0 else value for k in range(12_000)
    }
    assert len(b.view("c", 0).ledgers) > 40, "the output was not cut into ledgers of about 1 MiB"


def test_a_partition_whose_compaction_fails_unexpectedly_is_left_until_a_restart(tmp_path, monkeypatch, caplog):
    """As Kafka's cleaner: a compaction that fails with what no KopError names (memory exhausted
    here, injected where the map takes a batch) marks its partition uncleanable and is reported;
    the other partitions are compacted all the same, later passes leave it be, and after a restart
    it is compacted, having lost nothing."""
    conf = {"managedLedgerMaxEntriesPerLedger": 1}
    with Broker(str(tmp_path), conf=conf) as b:
        for topic in ("a", "b"):  # "a" comes first in every pass
            b.create_topic(topic, 1, config={"cleanup.policy": "compact"})
            for i in range(4):
                b.produce(topic, [Record(b"v%d" % i, key=b"k")], partition=0)
    server = Broker(str(tmp_path), conf=conf)
    add, tried = OffsetMap.add, []

    def exhausted_on_a(self, batch, base_offset):
        tried.append(self)
        if len(tried) == 1:
            raise MemoryError("injected")
        return add(self, batch, base_offset)

    monkeypatch.setattr(OffsetMap, "add", exhausted_on_a)
    with caplog.at_level(logging.ERROR, "kop_spark.broker.maintenance"):
        report = server.housekeeping.clean_logs(None)
    assert report.partitions_compacted == ["b-0"]
    assert [(p, type(e).__name__) for p, e in report.errors] == [("a-0", "LogCleaningError")]
    assert "MemoryError('injected')" in str(report.errors[0][1])
    assert any(r.exc_info for r in caplog.records), "the failure is logged with its traceback"
    n = len(tried)
    assert server.housekeeping.clean_logs(None).errors == [] and len(tried) == n, "a-0 was tried again"
    assert [r.value for r in server.fetch("a", 0, 0)] == [b"v0", b"v1", b"v2", b"v3"]
    server.close()
    restarted = Broker(str(tmp_path), conf=conf)
    assert restarted.housekeeping.clean_logs(None).partitions_compacted == ["a-0"]
    assert [r.value for r in restarted.fetch("a", 0, 0)] == [b"v3"]


def test_min_compaction_lag_leaves_young_records_and_max_compaction_lag_forces_a_compaction(tmp_path):
    """Kafka's min.compaction.lag.ms: ledgers holding records stamped less than that long ago are
    not compacted yet. max.compaction.lag.ms: a partition is compacted once its first ledger not
    yet compacted is that old, though too little of it is new for min.cleanable.dirty.ratio."""
    clock = ManualClock(NOW)
    b = Broker(str(tmp_path), conf={"managedLedgerMaxEntriesPerLedger": 1}, clock=clock)
    config = {"cleanup.policy": "compact", "min.compaction.lag.ms": 60_000, "min.cleanable.dirty.ratio": 0.9}
    b.create_topic("c", 1, config={**config, "max.compaction.lag.ms": 600_000})

    def produce(value: bytes) -> None:
        b.produce("c", [Record(value, key=b"k", timestamp_ms=clock.now_ms())], partition=0)

    for value in (b"v0", b"v1", b"v2"):
        produce(value)
    assert b.clean_logs("c").partitions_compacted == [], "compacted records younger than the lag"
    clock.advance(60_000)
    produce(b"v3")  # the open ledger: v0-v2's are sealed and old enough now
    assert b.clean_logs("c").partitions_compacted == ["c-0"]
    assert [r.value for r in b.fetch("c", 0, 0)] == [b"v2", b"v3"]
    for _ in range(2):  # new, but well under the dirty ratio beside what is compacted
        clock.advance(60_000)
        produce(b"x" * 10)
    clock.advance(60_000)
    assert b.clean_logs("c").partitions_compacted == [], "not overdue yet"
    clock.advance(600_000)
    assert b.clean_logs("c").partitions_compacted == ["c-0"], "overdue past max.compaction.lag.ms"
    assert [r.value for r in b.fetch("c", 0, 0)] == [b"x" * 10]  # the open ledger, overdue too, with them


def test_a_compacted_topics_open_ledger_is_closed_and_compacted_at_max_compaction_lag(tmp_path):
    """Kafka rolls a compacted topic's active segment at max.compaction.lag.ms (LogConfig's
    maxSegmentMs), so that the records in it are compacted that long after they came: here the
    writer's next append rolls it, and the cleaner closes it though no append comes."""
    clock = ManualClock(NOW)
    b = Broker(str(tmp_path), clock=clock)
    b.create_topic("c", 1, config={"cleanup.policy": "compact", "max.compaction.lag.ms": 600_000})

    def produce(value: bytes) -> None:
        b.produce("c", [Record(value, key=b"k", timestamp_ms=clock.now_ms())], partition=0)

    produce(b"v0")
    produce(b"v1")
    clock.advance(599_999)
    assert b.clean_logs("c").partitions_compacted == [], "compacted the open ledger before it was due"
    clock.advance(1)
    produce(b"v2")
    assert [l.state for l in b.view("c", 0).ledgers] == [SEALED, OPEN], "the append did not roll the ledger"
    assert b.clean_logs("c").partitions_compacted == ["c-0"]
    assert [r.value for r in b.fetch("c", 0, 0)] == [b"v1", b"v2"]
    clock.advance(599_999)
    assert b.clean_logs("c").partitions_compacted == []
    clock.advance(1)
    assert b.clean_logs("c").partitions_compacted == ["c-0"], "the idle open ledger was left uncompacted"
    assert [r.value for r in b.fetch("c", 0, 0)] == [b"v2"]
    assert OPEN not in [l.state for l in b.view("c", 0).ledgers]


def test_a_topic_made_again_is_not_compacted_by_the_settings_of_the_one_before(tmp_path):
    """A housekeeping pass reads every topic's settings at its start and may take minutes over the
    partitions; another process may delete a topic and make it again meanwhile, without
    compaction. The pass compacted the new topic's log by the old topic's cleanup.policy,
    dropping every record but each key's last."""
    conf = {"managedLedgerMaxEntriesPerLedger": 1}
    clock_a, clock_b = ManualClock(NOW - 1000), ManualClock(NOW)
    with Broker(str(tmp_path), conf, clock=clock_a) as a, Broker(str(tmp_path), conf, clock=clock_b) as b:
        a.create_topic("c", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
        _, old = b.admin.metadata("c")  # read at NOW: compact
        clock_a.advance(2000)
        a.delete_topic("c")
        a.create_topic("c", 1)  # at NOW + 1000: cleanup.policy=delete
        for value in (b"v0", b"v1", b"v2"):
            a.produce("c", [Record(value, key=b"k", timestamp_ms=NOW)], partition=0)
        a.produce("c", [Record(b"x", key=b"y", timestamp_ms=NOW)], partition=0)  # v2's ledger sealed
        stale = b.admin.log("c", 0, old)
        assert stale.config.compact_policy
        assert stale.cleaner.clean() is None and stale.cleaner.compact() is None
        assert [r.value for r in a.fetch("c", 0, 0)] == [b"v0", b"v1", b"v2", b"x"]
        assert a.verify() == {}


def test_max_compaction_lag_counts_from_when_records_came_though_merges_rewrote_them(tmp_path):
    """A merge in passing rewrites a run of small ledgers as one, dated as the oldest of them: the
    records are overdue when they would have been unmerged. Merges keep compacted and new records
    in ledgers of their own, or the compacted ones' date would make the new ones look overdue."""
    clock = ManualClock(NOW)
    conf = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 4}
    b = Broker(str(tmp_path), conf=conf, clock=clock)
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 600_000}
    b.create_topic("c", 1, config=config)
    b.produce("c", [Record(b"x", key=b"%d" % i) for i in range(100)], partition=0)
    first = clock.now_ms()
    for i in range(8):  # a record a minute, each in a ledger of its own
        b.produce("c", [Record(b"v%d" % i, key=b"k", timestamp_ms=clock.now_ms())], partition=0)
        if i == 0:
            assert b.clean_logs("c").partitions_compacted == ["c-0"]  # the 100 keys, all new
        clock.advance(60_000)
    view = b.view("c", 0)
    assert view.cleaned_offset == 100
    for merged_by in ("passing", "kop maintenance"):
        if merged_by == "kop maintenance":
            b.managed_ledger("c", 0).cleaner.merge_ledgers(1 << 20)
        mixed = [l for l in b.view("c", 0).ledgers if l.base_offset < 100 < l.end_offset]
        assert mixed == [], f"a merge in {merged_by} mixed compacted and new records"
    assert any(l.records > 1 for l in view.ledgers if l.base_offset >= 100), "no merge in passing happened"
    clock.advance(first + 600_000 - 1 - clock.now_ms())
    assert b.clean_logs("c").partitions_compacted == [], "compacted before v0 was due"
    clock.advance(1)
    assert b.clean_logs("c").partitions_compacted == ["c-0"], "a merge made v0 look younger than it is"
    assert [r.value for r in b.fetch("c", 0, 100)] == [b"v6", b"v7"]  # v7 in the open ledger


class _OnLook(threading.Event):
    """A rewrite's ``stop``, which it looks at before each entry it reads: the ``at``-th look runs
    ``meanwhile`` (another writer's appends, say), which so lands while the rewrite is under way.
    Given a ``clock``, each look moves it on by ``step``."""

    def __init__(self, meanwhile: Callable[[], object], at: int = 1, clock: ManualClock | None = None, step: int = 0):
        super().__init__()
        self._meanwhile, self._at, self._clock, self._step, self.looks = meanwhile, at, clock, step, 0

    def is_set(self) -> bool:
        self.looks += 1
        if self._clock is not None:
            self._clock.advance(self._step)
        if self.looks == self._at:
            self._meanwhile()
        return super().is_set()


def _compacted_while(tmp_path, conf: dict[str, int], before: Callable[[Broker], None], during: Callable[[], None]):
    """A partition written by ``before``, then compacted by the background cleaner while ``during``
    appends: what the compaction returned, and the log's view and records after."""
    b = Broker(str(tmp_path), conf=conf)
    b.create_topic("c", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0})
    before(b)
    kept = b.managed_ledger("c", 0).cleaner.clean(_OnLook(during))
    _, end, records = read_partition(Broker(str(tmp_path)), "c", 0)
    return kept, b.managed_ledger("c", 0).view(), end, {r.offset: (r.key, r.value) for r in records}


def test_merges_in_passing_leave_a_compaction_its_ledgers(tmp_path):
    """A Spark stream's commits and an object store's produces each add a ledger, and every
    sixteenth merges the newest small ones: were the ledgers a compaction is rewriting among them,
    its swap would be lost every time and a busy partition never compacted. Merges in passing
    leave them alone while a compaction holds them, and merge the ledgers after."""
    conf = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 4}
    other = Broker(str(tmp_path), conf=conf)

    def during() -> None:
        for v in range(3, 9):
            other.produce("c", [Record(b"%d" % v, key=b"o%d" % v)], partition=0)

    def before(b: Broker) -> None:
        for v in range(3):
            b.produce("c", [Record(b"%d" % v, key=b"k")], partition=0)

    kept, view, end, records = _compacted_while(tmp_path, conf, before, during)
    assert kept is not None, "the compaction lost its swap to a merge in passing"
    assert end == 9 and records == {
        1: (b"k", b"1"),
        2: (b"k", b"2"),
        **{v: (b"o%d" % v, b"%d" % v) for v in range(3, 9)},
    }
    assert len(view.ledgers) < 1 + 7, "the seven ledgers after the compacted one were not merged"
    assert other.managed_ledger("c", 0).stats.entries_read == 4, "a merge read ledgers a compaction held"
    assert view.cleaning is None, "the compaction left its mark"


def test_a_writer_finishing_its_fenced_ledger_leaves_a_compaction_of_it_standing(tmp_path):
    """Writers taking turns (the offsets topic's committers) fence each other's ledgers, and each
    seals its fenced one at its next append. A seal adds only the ledger's table: a compaction that
    read the ledger before still holds what it holds, and its swap goes through."""
    conf = {"managedLedgerMaxEntriesPerLedger": 2}
    a, b = Broker(str(tmp_path), conf=conf), Broker(str(tmp_path), conf=conf)

    def before(_: Broker) -> None:
        a.produce("c", [Record(b"a0", key=b"k")], 0)
        b.produce("c", [Record(b"b0", key=b"k")], 0)  # fences a's ledger: closed, not sealed
        a.produce("c", [Record(b"a1", key=b"k")], 0)  # fences b's

    kept, _, end, records = _compacted_while(
        tmp_path, conf, before, lambda: b.produce("c", [Record(b"b1", key=b"j")], 0)
    )
    assert kept is not None, "the compaction lost its swap to a seal"
    assert end == 4 and records == {1: (b"k", b"b0"), 2: (b"k", b"a1"), 3: (b"j", b"b1")}


def test_a_merge_that_read_its_ledgers_before_a_compaction_marked_them_gives_way(tmp_path):
    """A merge that read its run before a compaction marked it loses its swap to the compaction's
    mark; one started after leaves the marked ledgers alone; the compaction lands."""
    with Broker(str(tmp_path), conf={"managedLedgerMaxEntriesPerLedger": 1}) as b:
        b.create_topic("c", 1, config={"cleanup.policy": "compact"})
        for v in range(4):
            b.produce("c", [Record(b"%d" % v, key=b"k")], partition=0)  # one sealed ledger each
    reading, marked, merged = threading.Event(), threading.Event(), threading.Event()
    outcome: list[tuple[int, int]] = []  # each merge's ledgers merged and entries read

    def merge() -> None:
        try:
            ml = Broker(str(tmp_path)).managed_ledger("c", 0)
            outcome.append((ml.cleaner.merge_ledgers(1 << 20, stop), ml.stats.entries_read))
        finally:
            merged.set()

    stop = _OnLook(lambda: (reading.set(), marked.wait(60)))
    merger = threading.Thread(target=merge)
    merger.start()
    assert reading.wait(60), "the merge never read its ledgers"
    compaction = _OnLook(lambda: (marked.set(), merged.wait(60), merge()))
    kept = Broker(str(tmp_path)).managed_ledger("c", 0).cleaner.compact(compaction)
    merger.join(60)
    assert outcome == [(0, 4), (0, 0)], "a merge swapped in, or read, ledgers a compaction had marked"
    assert kept == 1 and [r.value for r in Broker(str(tmp_path)).fetch("c", 0, 0)] == [b"3"]


_KILLED_MIDWAY = """
import os, sys, threading
from kop_spark import Broker

class Killed(threading.Event):
    def is_set(self):  # looked at once the compaction has marked its ledgers, before each entry
        os._exit(137)

Broker(sys.argv[1]).managed_ledger("c", 0).cleaner.compact(Killed())
"""


def test_the_mark_of_a_compaction_killed_midway_lapses_with_its_lease(tmp_path):
    """kill -9 runs no clean-up: a compaction killed leaves its mark, which merges and other
    compactions honour until it is CLEANING_LEASE_MS old (a compaction renews its own as it reads),
    and then ignore: the next compaction takes the ledgers, replaces the mark and removes it."""
    root = str(tmp_path)
    with Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1}) as b:
        b.create_topic("c", 1, config={"cleanup.policy": "compact"})
        for v in range(4):
            b.produce("c", [Record(b"%d" % v, key=b"k")], partition=0)
    killed = subprocess.run([sys.executable, "-c", _KILLED_MIDWAY, root], env=python_subprocess_env(), timeout=120)
    assert killed.returncode == 137
    clock = ManualClock(int(time.time() * 1000))
    b = Broker(root, clock=clock)
    assert b.view("c", 0).cleaning is not None, "the kill left no mark: the test killed nothing midway"
    assert b.managed_ledger("c", 0).cleaner.merge_ledgers(1 << 20) == 0
    assert b.compact_partition("c", 0) is None, "a compaction took ledgers another's live mark holds"
    clock.advance(CLEANING_LEASE_MS)
    assert b.managed_ledger("c", 0).cleaner.merge_ledgers(1 << 20) == 3
    assert b.compact_partition("c", 0) == 1
    assert b.view("c", 0).cleaning is None and [r.value for r in b.fetch("c", 0, 0)] == [b"3"]


@pytest.mark.parametrize("held_up", [False, True], ids=["reading", "held-up-past-its-lease"])
def test_a_compaction_renews_its_mark_as_it_reads(tmp_path, held_up):
    """A compaction that reads for longer than CLEANING_LEASE_MS keeps its mark live as it reads:
    another compaction started meanwhile gives way to it, reading nothing, and the first lands. One
    held up past its lease between two entries (a paused process) finds its mark taken over by the
    next compaction and gives way to it at its next entry."""
    clock = ManualClock(NOW)
    conf = {"managedLedgerMaxEntriesPerLedger": 1}
    b, other = Broker(str(tmp_path), conf=conf, clock=clock), Broker(str(tmp_path), conf=conf, clock=clock)
    b.create_topic("c", 1, config={"cleanup.policy": "compact"})
    for v in range(6):
        b.produce("c", [Record(b"%d" % v, key=b"k")], partition=0)
    b.close()
    second: list[tuple[int | None, int]] = []

    def compact_meanwhile() -> None:
        ml = other.managed_ledger("c", 0)
        second.append((ml.cleaner.compact(), ml.stats.entries_read))

    step = CLEANING_LEASE_MS if held_up else CLEANING_LEASE_MS // 2
    stop = _OnLook(compact_meanwhile, at=4, clock=clock, step=step)
    kept = Broker(str(tmp_path), clock=clock).managed_ledger("c", 0).cleaner.compact(stop)
    if held_up:
        assert kept is None and second == [(1, 6 + 6)] and stop.looks == 4, "it did not give way at once"
    else:
        assert kept == 1 and second == [(None, 0)], "the second compaction took over a live mark"
    assert [r.value for r in Broker(str(tmp_path)).fetch("c", 0, 0)] == [b"5"]
    assert Broker(str(tmp_path)).view("c", 0).cleaning is None


def test_a_repair_that_cuts_the_log_back_removes_a_compactions_mark():
    """Repair truncates the log where it was damaged: the offsets a compaction held come again,
    and merges may take the ledgers that will hold them."""
    ledger = LedgerRecord.new(1, "l", 0, NOW, entries=8, records=8)
    meta = LogMetadata(0, 8, [ledger], cleaning=CleaningMark("killed", 8, NOW))
    meta.truncate(0, ledger._replace(entries=5, records=5), 5, NOW)
    assert meta.cleaning is None
