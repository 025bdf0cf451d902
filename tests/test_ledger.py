"""Ledger files: entries, sealed tables, and detection of every torn or corrupt byte."""

import mmap
import os
import tempfile
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kop_spark.errors import CorruptRecordError
from kop_spark.record import Record, RecordBatch, build_record_batch
from kop_spark.storage.ledger import FILE_HEADER, LedgerReader, LedgerWriter, recover
from kop_spark.storage.ledger_entry import ENTRY_METADATA, Entry, verify_entries, verify_entries_reference
from kop_spark.storage.local_fileio import LocalFileIO as FileIO


def make_ledger(tmp_path, n_entries=5, seal=True):
    fio = FileIO(str(tmp_path))
    w = LedgerWriter.create(fio, "l.ledger", 42)
    rows, rel = [], 0
    batches = []
    for i in range(n_entries):
        b = build_record_batch([Record(f"v{i}-{j}".encode(), timestamp_ms=1000 * i + j) for j in range(3)])
        batches.append(b)
        rows += w.append([b], rel, 5000 + i)
        rel += 3
    w.sync()
    length = w.seal(rows, rel) if seal else w.position
    w.close()
    return fio, rows, length, batches


def values(entries):
    return [r.value for e in entries for r in RecordBatch(e.batch).records()]


@pytest.mark.parametrize("sealed", [True, False])
def test_write_read_table(tmp_path, sealed):
    fio, rows, length, _batches = make_ledger(tmp_path, seal=sealed)
    reader = LedgerReader(fio, "l.ledger", length, sealed)
    table = reader.table()
    assert table.rows == rows
    assert table.find_entry(0) == 0 and table.find_entry(7) == 2 and table.find_entry(14) == 4
    assert table.find_timestamp(2001) == 2 and table.find_timestamp(10**9) == 5
    entries = reader.read(1, 1 << 20)
    assert [e.relative_index for e in entries] == [3, 6, 9, 12]
    assert values(entries)[:2] == [b"v1-0", b"v1-1"]
    assert [e.broker_timestamp for e in entries] == [5001, 5002, 5003, 5004]
    assert len(reader.read(1, 0)) == 1  # at least one entry, whatever the budget


def test_recover_sealed_and_unsealed(tmp_path):
    fio, rows, _length, _ = make_ledger(tmp_path, seal=True)
    rec = recover(fio, "l.ledger")
    assert rec.sealed and rec.error is None and rec.rows == rows and rec.ledger_id == 42


def test_an_open_ledger_is_indexed_from_its_entry_headers_not_read_whole(tmp_path):
    """A fetch from an open ledger of large batches (a producer's 1 MB batches) plans from its
    table: building it reads each entry's header, not the records."""
    fio = FileIO(str(tmp_path))
    w = LedgerWriter.create(fio, "l.ledger", 1)
    rows = []
    for i in range(8):
        rows += w.append([build_record_batch([Record(bytes(1 << 20), timestamp_ms=i)])], i, 0)
    w.sync()
    reader = LedgerReader(fio, "l.ledger", w.position, sealed=False)
    assert reader.table().rows == rows
    assert reader.stats.entries_scanned == 8
    assert reader.stats.bytes_read < w.position // 8
    assert values(reader.read(7, 0)) == [bytes(1 << 20)]  # what it reads is still verified whole
    w.close()


def test_an_older_view_of_an_open_ledger_takes_a_prefix_of_its_cached_table(tmp_path):
    """Readers planned from an older snapshot than the table was extended to (a fetch beside an
    append) see the entries that snapshot confirms, with no rescan."""
    fio, rows, length, _ = make_ledger(tmp_path, seal=False)
    assert LedgerReader(fio, "l.ledger", length, sealed=False).table().rows == rows
    older = LedgerReader(fio, "l.ledger", rows[3].position, sealed=False)
    assert older.table().rows == rows[:3]
    assert older.stats.entries_scanned == 0 and older.stats.bytes_read == 0
    assert [e.relative_index for e in older.read(0, 1 << 20)] == [0, 3, 6]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_every_flipped_byte_is_detected_never_returned(tmp_path, data):
    """Flip any byte of a ledger: a read either fails with CorruptRecordError or returns exactly
    the original data (the flip hit bytes no read covers)."""
    sealed = data.draw(st.booleans())
    d = tempfile.mkdtemp(dir=tmp_path)
    fio, _rows, length, batches = make_ledger(d, seal=sealed)
    original = [r.value for b in batches for r in RecordBatch(b).records()]
    path = Path(d) / "l.ledger"
    raw = bytearray(path.read_bytes())
    pos = data.draw(st.integers(FILE_HEADER.size, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    try:
        reader = LedgerReader(fio, "l.ledger", length, sealed)
        got = values(reader.read(0, 1 << 20))
    except CorruptRecordError as e:
        refused = str(e)
    else:
        refused = None
        assert got == original
    # A run (what a Spark task reads) is verified alike, and refused with the same words
    try:
        run = LedgerReader(fio, "l.ledger", length, sealed).read_run(0, 1 << 20)
    except CorruptRecordError as e:
        assert str(e) == refused
    else:
        assert refused is None and values(run_entries(run)) == original


def run_entries(run):
    """A run's batches, as read() would hand them out."""
    return [
        Entry(0, 0, 0, 0, memoryview(run.data)[at : at + size])
        for at, size in zip(run.spans[::2], run.spans[1::2], strict=True)
    ]


@pytest.mark.parametrize("sealed", [True, False])
@pytest.mark.parametrize("max_bytes", [0, 50, 200, 1 << 20])
def test_a_run_holds_the_entries_a_read_does(tmp_path, sealed, max_bytes):
    """read_run takes the entries read takes, from any entry on, to any last one, and says where
    the run's offsets end."""
    fio, _rows, length, _ = make_ledger(tmp_path, n_entries=6, seal=sealed)
    reader = LedgerReader(fio, "l.ledger", length, sealed)
    for first in range(6):
        for last in (None, *range(first, 7)):
            entries = reader.read(first, max_bytes, last)
            run = reader.read_run(first, max_bytes, last)
            assert len(run) == len(entries)
            assert [bytes(e.batch) for e in run_entries(run)] == [bytes(e.batch) for e in entries]
            assert run.end_index == entries[-1].relative_index + entries[-1].offset_span


def test_a_run_refuses_an_entry_its_table_places_elsewhere(tmp_path):
    fio, rows, length, _ = make_ledger(tmp_path, n_entries=3, seal=False)
    reader = LedgerReader(fio, "l.ledger", length, sealed=False)
    reader.table().rows[1] = rows[1]._replace(relative_index=4)  # as a stale or damaged table would say
    with pytest.raises(CorruptRecordError, match="has relative index 3, its table says 4"):
        reader.read_run(0, 1 << 20)


needs_compiled = pytest.mark.skipif(
    verify_entries is verify_entries_reference, reason="the compiled entry check is not built (no C compiler?)"
)


@needs_compiled
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_entry_check_twins_agree(tmp_path, data):
    """The compiled entry check and its pure-Python reference accept the same entries of a run and
    stop at the same one, whatever is flipped, cut off or misplaced: bytes anywhere in the run, a
    table row's relative index or position, where the run starts in the file."""
    d = tempfile.mkdtemp(dir=tmp_path)
    n = data.draw(st.integers(1, 6))
    _fio, rows, length, _ = make_ledger(d, n_entries=n, seal=False)
    raw = bytearray((Path(d) / "l.ledger").read_bytes()[:length])
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(FILE_HEADER.size, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    rows = list(rows)
    start = data.draw(st.integers(0, rows[0].position))  # where the run's bytes start in the file
    if data.draw(st.booleans()):
        k = data.draw(st.integers(0, n - 1))
        field = data.draw(st.sampled_from(["position", "relative_index"]))
        rows[k] = rows[k]._replace(**{field: getattr(rows[k], field) + data.draw(st.integers(-40, 40))})
    cut = data.draw(st.integers(start, len(raw)))
    run = bytes(raw[start:cut])
    results = []
    for check in (verify_entries, verify_entries_reference):
        spans = array("q", bytes(16 * n))
        good, end_index = check(run, rows, start, spans)
        results.append((good, end_index, list(spans[: 2 * good])))
    assert results[0] == results[1]
    good, end_index, spans = results[0]
    if good:  # what they accept is the table's entries, each batch where the table says
        assert spans[::2] == [r.position - start + ENTRY_METADATA.size for r in rows[:good]]
        assert end_index == rows[good - 1].relative_index + 3


def make_large_ledger(tmp_path, seal):
    """Eight entries of 64 KiB: a read of them is large enough to be mapped, not copied."""
    fio = FileIO(str(tmp_path))
    w = LedgerWriter.create(fio, "l.ledger", 42)
    rows, expected = [], []
    for i in range(8):
        batch = [os.urandom(16 << 10) for _ in range(4)]
        rows += w.append([build_record_batch([Record(v) for v in batch])], 4 * i, 5000 + i)
        expected += batch
    w.sync()
    length = w.seal(rows, 32) if seal else w.position
    w.close()
    return fio, length, expected


@pytest.mark.parametrize("sealed", [True, False])
def test_a_large_read_maps_the_ledger_and_outlives_its_deletion(tmp_path, sealed):
    """Entries read from a local ledger are views of the file's pages, not copies; retention may
    delete the file while a reader still holds them."""
    fio, length, expected = make_large_ledger(tmp_path, sealed)
    reader = LedgerReader(fio, "l.ledger", length, sealed)
    reader.table()
    entries = reader.read(0, 8 << 20)
    assert len(entries) == 8 and all(isinstance(e.batch.obj, mmap.mmap) for e in entries)
    os.remove(tmp_path / "l.ledger")
    assert values(entries) == expected


def test_a_ledger_shorter_than_its_confirmed_length_is_an_error_naming_it(tmp_path):
    """Cut short under what its metadata confirms (by hand: kop's writers never do), a ledger is
    reported, not mapped past its end, where touching the missing pages would kill the reader."""
    fio, length, _expected = make_large_ledger(tmp_path, seal=False)
    reader = LedgerReader(fio, "l.ledger", length, False)
    reader.table()
    os.truncate(tmp_path / "l.ledger", length - 1000)
    with pytest.raises(CorruptRecordError, match=r"l\.ledger: ledger ends before its confirmed length"):
        reader.read(0, 8 << 20)


def test_recovery_truncates_at_first_torn_entry(tmp_path):
    """A writer killed mid-write leaves a prefix of the file: recovery keeps exactly the whole
    entries before the cut, at every possible cut."""
    fio, rows, length, _batches = make_ledger(tmp_path, n_entries=4, seal=False)
    full = (tmp_path / "l.ledger").read_bytes()
    ends = [r.position for r in rows[1:]] + [length]
    for cut in range(FILE_HEADER.size, length + 1):
        (tmp_path / "torn.ledger").write_bytes(full[:cut])
        rec = recover(fio, "torn.ledger")
        whole = [e for e in ends if e <= cut]
        assert len(rec.rows) == len(whole), cut
        assert rec.valid_length == (whole[-1] if whole else FILE_HEADER.size)
        assert (rec.error is None) == (cut in ends or cut == FILE_HEADER.size)


def test_recovery_stops_at_first_corrupt_entry(tmp_path):
    fio, rows, _length, _ = make_ledger(tmp_path, n_entries=5, seal=False)
    raw = bytearray((tmp_path / "l.ledger").read_bytes())
    raw[rows[2].position + 40] ^= 0xFF
    (tmp_path / "l.ledger").write_bytes(bytes(raw))
    rec = recover(fio, "l.ledger")
    assert len(rec.rows) == 2 and rec.valid_length == rows[2].position
    assert "l.ledger" in rec.error


def test_writer_reopen_truncates_unconfirmed_tail(tmp_path):
    fio, _rows, length, _ = make_ledger(tmp_path, n_entries=3, seal=False)
    with open(tmp_path / "l.ledger", "ab") as f:
        f.write(b"half-written garbage")
    w = LedgerWriter.reopen(fio, "l.ledger", 42, length)
    w.append([build_record_batch([Record(b"next")])], 9, 1)
    w.close()
    rec = recover(fio, "l.ledger")
    assert rec.error is None and len(rec.rows) == 4


def test_not_a_ledger(tmp_path):
    (tmp_path / "x.ledger").write_bytes(b"hello world, certainly not a ledger")
    with pytest.raises(CorruptRecordError, match=r"x\.ledger"):
        recover(FileIO(str(tmp_path)), "x.ledger")
