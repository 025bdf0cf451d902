"""What used to lose or hide acknowledged data, each case as a user met it: timestamps taken from
batch headers, keyless records on compacted topics, long topic names, half-done admin operations,
errors after the confirming CAS, damaged partitions stopping housekeeping, stores damaged by an
earlier version, a writer pile-up of small ledgers, a writer failing on a ledger housekeeping
removed under it, and an abort failing on a task still writing."""

import os
import struct
import threading
import time

import crc32c
import pytest

from kop_spark import Broker, Record, layout
from kop_spark.errors import (
    CorruptRecordError,
    FileMissingError,
    InvalidRecordError,
    InvalidTopicError,
    TopicNotFoundError,
)
from kop_spark.record import TimestampType, build_record_batch
from kop_spark.record.default_record_batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, MAX_TIMESTAMP_OFFSET
from kop_spark.storage.local_fileio import LocalFileIO
from kop_spark.storage.metadata.file import FileMetadataStore

from .faults import FAULTS, Injector, injected

NOW = int(time.time() * 1000)
DAY = 86_400_000


def _patched(batch: bytes, *, max_timestamp=None, log_append_time=False) -> bytes:
    """A batch whose header says what a buggy or hostile client put there, correctly signed."""
    out = bytearray(batch)
    if max_timestamp is not None:
        struct.pack_into(">q", out, MAX_TIMESTAMP_OFFSET, max_timestamp)
    if log_append_time:
        (attributes,) = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)
        struct.pack_into(">h", out, ATTRIBUTES_OFFSET, attributes | 0x08)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


@pytest.fixture
def rolling(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0})
    b.create_topic("t", 1, config={"retention.ms": DAY})
    yield b
    b.close()


def test_records_without_timestamps_are_kept_by_retention(rolling):
    rolling.produce("t", [Record(b"no time", timestamp_ms=-1)], 0)
    rolling.produce("t", [Record(b"later")], 0)  # rolls over: retention looks at the first ledger
    rolling.enforce_retention("t")
    assert [r.value for r in rolling.fetch("t", 0, 0)] == [b"no time", b"later"]


def test_max_timestamp_comes_from_the_records_not_the_header(rolling):
    rolling.produce_batches("t", 0, [_patched(build_record_batch([Record(b"now", timestamp_ms=NOW)]), max_timestamp=0)])
    rolling.produce_batches(
        "t", 0, [_patched(build_record_batch([Record(b"soon", timestamp_ms=NOW + 1)]), max_timestamp=NOW + 100 * DAY)]
    )
    rolling.produce("t", [Record(b"last", timestamp_ms=NOW + 2)], 0)
    rolling.enforce_retention("t")
    assert [r.value for r in rolling.fetch("t", 0, 0)] == [b"now", b"soon", b"last"], "retention trusted a header"
    assert rolling.list_offsets("t", 0, NOW + 1) == 1
    assert rolling.list_offsets("t", 0, NOW + DAY) == -1, "a far-future header answered a lookup"
    assert [RecordMax(b) for b in rolling.fetch_batches("t", 0, 0, 1 << 20)][:1] == [NOW]


def _signed(out: bytearray) -> bytes:
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def test_records_are_checked_inside_a_correctly_signed_batch(rolling):
    """A client's CRC covers whatever it wrote: the records themselves must parse, in order."""
    gapped = build_record_batch([Record(b"a"), Record(b"b")], offset_deltas=[0, 2], last_offset_delta=1)
    with pytest.raises(InvalidRecordError, match="offset deltas are not 0 to 1 in order"):
        rolling.produce_batches("t", 0, [gapped])
    overrun = bytearray(build_record_batch([Record(b"a"), Record(b"b")]))
    overrun[HEADER_SIZE] = 0x7E  # the first record's length: 63 bytes, far past the batch's end
    with pytest.raises(CorruptRecordError, match="overruns"):
        rolling.produce_batches("t", 0, [_signed(overrun)])
    latin = bytearray(build_record_batch([Record(b"a", headers=[("k@", b"v")])]))
    latin[latin.index(b"k@") + 1] = 0xFF  # a header key Spark's reader could not make a string of
    with pytest.raises(InvalidRecordError, match="header key that is not UTF-8"):
        rolling.produce_batches("t", 0, [_signed(latin)])
    padded = bytearray(build_record_batch([Record(b"a")]) + b"\0\0")
    struct.pack_into(">i", padded, 8, len(padded) - 12)
    with pytest.raises(CorruptRecordError, match="2 bytes after its 1 records"):
        rolling.produce_batches("t", 0, [_signed(padded)])
    assert rolling.list_offsets("t", 0, "latest") == 0


def RecordMax(batch: bytes) -> int:
    return struct.unpack_from(">q", batch, MAX_TIMESTAMP_OFFSET)[0]


def test_timestamp_type_is_the_topics_not_the_batchs(rolling):
    flagged = _patched(
        build_record_batch([Record(b"x", timestamp_ms=NOW - 5)]), max_timestamp=NOW + 7, log_append_time=True
    )
    rolling.produce_batches("t", 0, [flagged])
    (r,) = rolling.fetch("t", 0, 0)
    assert (r.timestamp_ms, r.timestamp_type) == (NOW - 5, TimestampType.CREATE_TIME)
    rolling.create_topic("stamped", 1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    rolling.produce("stamped", [Record(b"y", timestamp_ms=1)], 0)
    (s,) = rolling.fetch("stamped", 0, 0)
    assert s.timestamp_type == TimestampType.LOG_APPEND_TIME and s.timestamp_ms >= before


def test_compacted_topics_refuse_keyless_records(broker):
    broker.create_topic("c", 1, config={"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key") as refused:
        broker.produce("c", [Record(b"keyed", key=b"k"), Record(b"keyless"), Record(b"also", key=b"k")], 0)
    assert refused.value.record_errors == ((1, "Compacted topic cannot accept message without key"),)
    staged = broker.sink_commits.stage("c", 0, "_staging/q/0/t")
    with pytest.raises(InvalidRecordError, match="c-0: Compacted topic cannot accept message without key"):
        staged.append([build_record_batch([Record(b"keyless")])])
    staged.discard()
    assert broker.list_offsets("c", 0, "latest") == 0


@pytest.mark.parametrize("length", [243, 249])
def test_topic_names_up_to_kafkas_limit_work_end_to_end(broker, length):
    name = "n" * length
    broker.create_topic(name, 12)
    broker.produce(name, [Record(b"v")], 11)
    assert [r.value for r in broker.fetch(name, 11, 0)] == [b"v"]
    assert name in broker.list_topics()
    assert broker.maintenance(orphan_grace_ms=0).errors == []
    broker.delete_topic(name)
    broker.create_topic(name, 1)


def test_a_name_past_kafkas_limit_is_refused_before_anything_is_written(root):
    b = Broker(root)
    with pytest.raises(InvalidTopicError, match="longer than 249"):
        b.create_topic("n" * 250, 1)
    assert not os.path.exists(root) or not any(files for _, _, files in os.walk(root))


def test_a_topic_appears_only_when_all_its_partitions_exist(root, monkeypatch):
    for at in range(1, 40):
        b = Broker(os.path.join(root, str(at)))
        injector = Injector(at, FAULTS[0])
        try:
            with injected(monkeypatch, injector):
                b.create_topic("t", 3)
        except KeyboardInterrupt:
            pass
        if "t" in b.list_topics():
            for p in range(3):
                assert b.list_offsets("t", p, "latest") == 0
        else:
            with pytest.raises(TopicNotFoundError):
                b.produce("t", [Record(b"v")], 0)
            b.create_topic("t", 3)  # the name is free
        assert b.maintenance(orphan_grace_ms=0).errors == []
        if injector.steps < at:
            break


def test_an_error_after_the_confirming_cas_reports_success(broker, monkeypatch):
    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"a")], 0)

    def refuse(self, d, latest):
        raise PermissionError(13, "Permission denied", d)

    monkeypatch.setattr(FileMetadataStore, "_prune", refuse)
    assert broker.produce("t", [Record(b"b")], 0) == [(0, 1, 1)]
    assert [r.value for r in Broker(broker.root).fetch("t", 0, 0)] == [b"a", b"b"]


@pytest.mark.parametrize("sealing", ["rolling over", "closing"])
def test_a_writer_whose_seal_lost_its_cas_seals_its_ledger_again(root, monkeypatch, sealing):
    """Another writer's CAS (a compaction's mark, retention) lands between a writer's seal of its
    ledger and the CAS recording it: the retry seals the ledger again, with its entry table, where
    it used to fence it as if it were another writer's; the next ledger the lost attempt made is
    deleted, and nothing is lost."""
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0})
    b.create_topic("t", 1)
    b.produce("t", [Record(b"a")], 0)
    ml = b.managed_ledger("t", 0)
    put, lost = ml.store.put, []

    def another_writer_first(key, value, version):
        if key == ml.key and not lost:
            lost.append(put(key, ml.store.get(key).value, version))  # the same metadata, a new version
        return put(key, value, version)

    monkeypatch.setattr(ml.store, "put", another_writer_first)
    if sealing == "closing":
        b.close()
    else:
        b.produce("t", [Record(b"b")], 0)
    assert lost, "no CAS was lost"
    monkeypatch.undo()
    view = Broker(root).view("t", 0)
    assert view.ledgers[0].state == "sealed"
    assert [r.value for r in Broker(root).fetch("t", 0, 0)] == [b"a", b"b"][: view.log_end_offset]
    data = os.path.dirname(b.fileio.full_path(view.ledgers[0].file))
    assert {os.path.join(data, f) for f in os.listdir(data)} == {b.fileio.full_path(l.file) for l in view.ledgers}


@pytest.mark.parametrize("meanwhile", ["others moved the log on", "the file was deleted by hand"])
def test_a_writer_taking_up_its_ledger_again_finds_the_file_gone(root, monkeypatch, meanwhile):
    """Between a writer's read of the metadata and its use of a file named there, the file goes:
    its seal of its ledger had lost its CAS, and before it takes the ledger up again, another
    writer fences it, maintenance merges it away and the trash goes. The writer decides again on
    the log as it stands (found by housekeeping racing writer processes). Had nobody changed the
    log, a missing file is damage: reported at once, naming the file, not retried."""
    conf = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    b = Broker(root, conf=conf)
    b.create_topic("t", 1, config={"file.delete.delay.ms": 0})
    b.produce("t", [Record(b"a0")], 0)
    b.produce("t", [Record(b"a1")], 0)  # an open ledger, full: the next produce seals it
    ml = b.managed_ledger("t", 0)
    get, put, lost, gone = ml.store.get, ml.store.put, [], []
    others = Broker(root, conf=conf)

    def another_writer_first(key, value, version):
        if key == ml.key and not lost:
            lost.append(put(key, get(key).value, version))  # the same metadata, a new version
        return put(key, value, version)

    def the_file_goes_after_the_read(key):
        read = get(key)
        if key == ml.key and lost and not gone:
            gone.append(b.fileio.full_path(read.value["ledgers"][-1]["file"]))
            if meanwhile == "others moved the log on":
                others.produce("t", [Record(b"b")], 0)  # fences the ledger the read shows open
                assert others.maintenance(target_ledger_bytes=1 << 20, orphan_grace_ms=0).ledgers_merged == 1
                assert not os.path.exists(gone[0])
            else:
                os.remove(gone[0])
        return read

    monkeypatch.setattr(ml.store, "put", another_writer_first)
    monkeypatch.setattr(ml.store, "get", the_file_goes_after_the_read)
    if meanwhile == "the file was deleted by hand":
        with pytest.raises(FileMissingError) as missing:
            b.produce("t", [Record(b"c")], 0)
        assert gone[0] in str(missing.value)
        return
    b.produce("t", [Record(b"c")], 0)
    monkeypatch.undo()
    fresh = Broker(root)
    assert fresh.verify() == {}
    assert [r.value for r in fresh.fetch("t", 0, 0)] == [b"a0", b"a1", b"b", b"c"]


def test_a_cas_of_another_thread_never_leaves_the_log_behind_an_idempotent_producer(root, monkeypatch):
    """A compaction's mark (taken on the cleaner's thread) and a produce of the same partition: the
    produce must not land between the mark's CAS and its bookkeeping, or the mark's older metadata
    is left as the last known, and the producer's next batch is refused as out of sequence on it
    (a librdkafka producer then fails fatally). Found by a soak of kop serve."""
    b = Broker(root)
    b.create_topic("t", 1, config={"cleanup.policy": "compact"})
    b.produce("t", [Record(b"a", key=b"k")], 0)
    b.produce("t", [Record(b"b", key=b"k")], 0)
    ml = b.managed_ledger("t", 0)

    def batch(seq: int) -> bytes:
        return build_record_batch([Record(b"v%d" % seq, key=b"k")], producer_id=7, producer_epoch=0, base_sequence=seq)

    b.produce_batches("t", 0, [batch(0)])
    put, cleaner_thread, producing = ml.store.put, [], []

    def put_then_let_a_produce_try(key, value, version):
        new = put(key, value, version)
        if threading.current_thread() in cleaner_thread and not producing:
            producing.append(threading.Thread(target=b.produce_batches, args=("t", 0, [batch(1)])))
            producing[0].start()
            producing[0].join(1)  # under the partition's lock it cannot land until this CAS is done
        return new

    monkeypatch.setattr(ml.store, "put", put_then_let_a_produce_try)

    def mark() -> None:
        cleaner_thread.append(threading.current_thread())
        ml.apply(lambda meta, now: meta.__setattr__("cleaned_offset", 1) or meta)

    marking = threading.Thread(target=mark)
    marking.start()
    marking.join(30)
    producing[0].join(30)
    assert b.produce_batches("t", 0, [batch(2)]), "the next batch was refused on stale metadata"
    assert [r.value for r in b.fetch("t", 0, 2)] == [b"v0", b"v1", b"v2"]


def _damage_as_an_earlier_version_did(b: Broker, topic: str) -> str:
    """A confirmed entry truncated away by an interrupted writer's clean-up, the file cut back and
    sealed with one entry fewer than the metadata confirms (issue #11's store)."""
    from kop_spark.storage.ledger import LedgerReader

    ml = b.managed_ledger(topic, 0)
    snap = ml.view()
    ledger = snap.ledgers[-1]
    rows = LedgerReader(b.fileio, ledger.file, ledger.length, False).table().rows
    path = b.fileio.full_path(ledger.file)
    with open(path, "r+b") as f:
        f.truncate(rows[-1].position)
    from kop_spark.storage.ledger import LedgerWriter
    from kop_spark.storage.local_fileio import LocalFileIO as FileIO

    w = LedgerWriter(
        b.fileio,
        ledger.file,
        ledger.id,
        FileIO(os.path.dirname(path)).reopen(os.path.basename(path), rows[-1].position),
    )
    w.seal(rows[:-1], rows[-1].relative_index)
    w.close()
    return path


def damaged_store(root: str) -> tuple[Broker, str]:
    """A store with topic 'bad' (b0-b2 in a ledger whose last confirmed entry was destroyed, then
    b3 and b4, which fenced it) and topic 'good' (g0-g3 in one-entry ledgers). Returns a Broker on
    it and the damaged ledger's path."""
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 100})
    b.create_topic("bad", 1)
    b.create_topic("good", 1)
    for i in range(3):
        b.produce("bad", [Record(f"b{i}".encode())], 0)
    path = _damage_as_an_earlier_version_did(b, "bad")
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0})
    for i in range(4):
        b.produce("good", [Record(f"g{i}".encode())], 0)
    for i in (3, 4):  # fences the damaged ledger: maintenance will merge it
        b.produce("bad", [Record(f"b{i}".encode())], 0)
    return b, path


def test_a_damaged_partition_is_reported_and_does_not_stop_housekeeping(root):
    b, _ = damaged_store(root)
    assert list(b.verify()) == ["bad-0"]
    report = b.maintenance(target_ledger_bytes=1 << 20)
    assert [where for where, _ in report.errors] == ["bad-0"]
    assert b.describe_topic("good").partitions[0].ledgers == 2, "the good topic was still merged"


def test_repair_keeps_intact_entries_and_names_what_it_dropped(root):
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 100})
    b.create_topic("t", 1)
    for i in range(3):
        b.produce("t", [Record(f"v{i}".encode()), Record(f"w{i}".encode())], 0)
    b.commit_offsets("ahead", {("t", 0): 6})
    b.commit_offsets("behind", {("t", 0): 2})
    _damage_as_an_earlier_version_did(b, "t")
    fresh = Broker(root)
    report = fresh.repair()
    assert report.truncated == {("t", 0): (4, 6)}
    assert report.groups_past_end == [("ahead", "t", 0, 6)]
    assert fresh.verify() == {}
    assert [r.value for r in fresh.fetch("t", 0, 0)] == [b"v0", b"w0", b"v1", b"w1"]
    assert fresh.produce("t", [Record(b"next")], 0) == [(0, 4, 1)]
    assert fresh.repair().truncated == {}


def test_repair_restores_metadata_torn_by_an_earlier_version(root):
    b = Broker(root)
    b.create_topic("t", 1)
    b.produce("t", [Record(b"a")], 0)
    b.close()
    key_dir = os.path.join(root, "_metadata", *layout.managed_ledger_key(b.topic_name("t"), 0).split("/"))
    newest = sorted(n for n in os.listdir(key_dir) if n.endswith(".json"))[-1]
    with open(os.path.join(key_dir, f"{int(newest[:-5]) + 1:020d}.json"), "wb") as f:
        f.write(b'{"ledgers": [{"id"')  # what a short write used to link in
    with pytest.raises(Exception, match="not valid JSON"):
        Broker(root).fetch("t", 0, 0)
    assert len(Broker(root).repair(dry_run=True).metadata_versions_removed) == 1
    with pytest.raises(Exception, match="not valid JSON"):  # a dry run changes nothing
        Broker(root).fetch("t", 0, 0)
    report = Broker(root).repair()
    assert len(report.metadata_versions_removed) == 1
    assert [r.value for r in Broker(root).fetch("t", 0, 0)] == [b"a"]


def test_writers_taking_turns_do_not_pile_up_ledgers(root):
    one, two = Broker(root), Broker(root)
    one.create_topic("t", 1)
    for i in range(200):
        (one if i % 2 else two).produce("t", [Record(f"{i}".encode())], 0)
    ledgers = one.describe_topic("t").partitions[0].ledgers
    assert ledgers <= 2 * 16, f"{ledgers} ledgers for 200 alternating appends"
    assert [r.value for r in Broker(root).fetch("t", 0, 0, max_records=500)] == [f"{i}".encode() for i in range(200)]


def test_a_file_condemned_deleted_and_acquitted_before_the_cas_is_never_referred_to(root, monkeypatch):
    """Orphan removal (condemn by CAS, delete, acquit by CAS) lands between a merge writing its new
    ledger and the CAS that would swap it in: the swap must not refer to the deleted file."""
    from kop_spark.storage.log_cleaner import LogCleaner
    from kop_spark.storage.orphans import remove_orphans

    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0})
    b.create_topic("t", 1)
    for i in range(4):
        b.produce("t", [Record(f"v{i}".encode())], 0)
    real_swap = LogCleaner.swap
    removed = []

    def swap_after_orphan_removal(self, run, new, *args):
        other = Broker(root)
        removed.extend(
            remove_orphans(
                other.managed_ledger("t", 0), other.fileio.walk_files(layout.data_dir(other.topic_name("t"), 0)), 0
            )
        )
        return real_swap(self, run, new, *args)

    monkeypatch.setattr(LogCleaner, "swap", swap_after_orphan_removal)
    assert b.maintenance(target_ledger_bytes=1 << 20).ledgers_merged == 0
    monkeypatch.undo()
    assert len(removed) == 1, "the merge's new ledger was unreferenced, so removable"
    fresh = Broker(root)
    assert fresh.verify() == {}
    assert [r.value for r in fresh.fetch("t", 0, 0)] == [b"v0", b"v1", b"v2", b"v3"]


def test_a_tree_a_writer_adds_to_while_it_is_removed_is_removed_whole(tmp_path):
    """Spark aborts a failed job while one of its tasks may still be writing into the job's
    staging: a file made there after the removal listed the directory failed the abort with
    "Directory not empty" (seen once in a full test run)."""
    io = LocalFileIO(str(tmp_path))
    raced = 0
    for trial in range(5):
        top = tmp_path / f"_staging/job{trial}"
        (top / "0").mkdir(parents=True)
        for i in range(3000):  # enough for the removal to be under way when the writer adds one
            (top / "0" / f"{i}.ledger").touch()

        def add_a_ledger_once_removal_began(top=top) -> None:
            nonlocal raced
            try:
                while len(os.listdir(top / "0")) == 3000:
                    pass
                (top / "late.ledger").touch()
                raced += 1
            except FileNotFoundError:
                pass  # the removal was done first

        writer = threading.Thread(target=add_a_ledger_once_removal_began)
        writer.start()
        io.delete_tree(f"_staging/job{trial}")
        writer.join()
        assert not top.exists()
    assert raced, "no ledger was made while a removal was under way"
