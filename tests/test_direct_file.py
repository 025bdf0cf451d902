"""Files written around the page cache (O_DIRECT): what a reader finds after ``sync`` is every byte
written, whatever the sizes and buffer boundaries, and a fault at any step loses nothing written."""

import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kop_spark.storage.direct_file import MAX_BUFFER_BYTES, MIN_BUFFER_BYTES, BufferPool, DirectFile, open_direct

from .faults import FAULTS, Injector, injected

KIB = 1 << 10


@pytest.fixture
def tmp_path(disk_tmp_path):
    """On a disk: pytest's may be on tmpfs (see conftest's ``disk_tmp_root``)."""
    return disk_tmp_path


def new_file(tmp_path, name="f", sync=True):
    path = str(tmp_path / name)
    fd = open_direct(path)
    if fd is None:
        pytest.skip(f"{tmp_path} takes no O_DIRECT writes")
    return path, DirectFile(path, fd, sync)


def contents(path):
    return Path(path).read_bytes()


def data(n, seed):
    return random.Random(seed).randbytes(n)


def test_a_direct_file_is_written_around_the_page_cache(tmp_path):
    path, f = new_file(tmp_path)
    f.write(data(5000, 1))
    flags = int(Path(f"/proc/self/fdinfo/{f._fd}").read_text().split("flags:")[1].split()[0], 8)
    f.sync()
    f.close()
    assert flags & os.O_DIRECT and contents(path) == data(5000, 1)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.lists(st.integers(0, 700 * KIB), min_size=1, max_size=3)),
        st.tuples(st.just("sync"), st.just([])),
        st.tuples(st.just("truncate"), st.lists(st.floats(0, 1), min_size=1, max_size=1)),
    ),
    max_size=8,
)


@settings(max_examples=25, deadline=None)
@given(operations, st.booleans())
@example([("write", [1000]), ("write", [1500 * KIB]), ("truncate", [0.5]), ("write", [10]), ("sync", [])], True)
def test_what_a_reader_finds_after_sync_is_what_was_written(disk_tmp_root, ops, durable):
    """Also with ``journalSyncData`` off: ``sync`` still puts the tail in the file, unsynced."""
    path, f = new_file(Path(tempfile.mkdtemp(dir=disk_tmp_root)), sync=durable)
    model, positions = bytearray(), [0]
    try:
        for i, (op, args) in enumerate(ops):
            if op == "write":
                parts = [data(n, 10 * i + k) for k, n in enumerate(args)]
                assert f.write_parts(parts) == len(model)
                model += b"".join(parts)
                positions.append(len(model))
            elif op == "truncate":  # back to a length a write returned, as a torn file's owner does
                length = positions[int(args[0] * (len(positions) - 1))]
                f.truncate(length)
                del model[length:]
                positions = [p for p in positions if p <= length]
            else:
                f.sync()
                assert contents(path) == model
            assert f.position == len(model)
        f.sync()
        assert contents(path) == model
    finally:
        f.close()


def _writes(f, model, monkeypatch, injector):
    """Writes crossing the buffer's boundary and syncs between them; each step that raises is
    retried, as a writer's owner retries, once the fault has fired."""
    for i, n in enumerate([600_001, 700_003, 0, 2_500_007, 0, 3001]):  # not whole blocks
        while True:
            try:
                with injected(monkeypatch, injector):
                    if n:
                        f.write_parts([data(n, i)])
                    else:
                        f.sync()
                break
            except (KeyboardInterrupt, Exception):
                assert injector.fired
        if n:
            model += data(n, i)


def test_a_fault_at_any_step_loses_nothing_written(tmp_path, monkeypatch):
    path, f = new_file(tmp_path, "count")
    counter = Injector()
    _writes(f, bytearray(), monkeypatch, counter)
    f.close()
    assert counter.steps > 5
    for at in range(1, counter.steps + 1):
        for fault in FAULTS:
            path, f = new_file(tmp_path, f"{at}-{FAULTS.index(fault)}")
            model = bytearray()
            _writes(f, model, monkeypatch, Injector(at, fault))
            f.sync()
            f.close()
            assert contents(path) == model, f"{fault} at step {at}"


def test_a_closed_files_buffer_serves_the_next_file_and_none_of_its_bytes_show(tmp_path):
    """Buffers are pooled (a fresh one faults in every page it is first written to); a file that
    gets a used one finds in the file only what it wrote, across a truncate into the buffer."""
    path, first = new_file(tmp_path, "first")
    first.write(data(300 * KIB, 1))  # a whole buffer written, and a tail
    first.sync()
    used = first._buffer
    first.close()
    path, second = new_file(tmp_path, "second")
    assert second._buffer is used
    second.write(data(5000, 2))
    second.truncate(3000)
    second.write(b"0123456789")
    second.sync()
    second.close()
    assert contents(path) == data(5000, 2)[:3000] + b"0123456789"


def test_buffers_shrink_past_the_budget_and_the_pool_keeps_no_more_than_it():
    pool = BufferPool(2 * MAX_BUFFER_BYTES)
    buffers = [pool.take() for _ in range(3)]
    assert [len(b) for b in buffers] == [MAX_BUFFER_BYTES, MAX_BUFFER_BYTES, MIN_BUFFER_BYTES]
    for b in buffers:
        pool.give(b)
    assert [b.closed for b in buffers] == [False, False, True]
    again = [pool.take() for _ in range(3)]
    assert again[:2] == buffers[1::-1] and again[2] is not buffers[2]  # a new one once the pool is empty
