"""A real filesystem filled to the last byte: producers and committers run until the disk is full.
Every write that fails says so, naming the path; nothing acknowledged is lost; the store reads
back whole while full; and once space is freed it works again with no repair."""

import os
import subprocess

import pytest

from kop_spark import Broker, Record
from kop_spark.errors import StorageError

from .conftest import read_partition


@pytest.fixture
def small_fs(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not allowed here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_loses_nothing_acknowledged(small_fs):
    root = str(small_fs / "store")
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\0" * (256 << 10))  # freed at the end, as an operator would free space
    writers = [Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 4}) for _ in range(2)]
    writers[0].create_topic("t", 2)
    acked = {}
    commits = {}
    failures = []
    i = 0
    while len(failures) < 40:
        b = writers[i % 2]
        try:
            if i % 5 == 4:
                b.commit_offsets(f"g{i % 2}", {("t", 0): i})
                commits[f"g{i % 2}"] = i
            else:
                values = [f"{i}/{j}".encode() + b"x" * 900 for j in range(4)]
                ((p, base, _),) = b.produce("t", [Record(v) for v in values], partition=i % 2)
                acked.update({(p, base + j): v for j, v in enumerate(values)})
        except StorageError as e:
            assert str(small_fs) in str(e), f"the error does not name the path: {e}"
            failures.append(e)
        i += 1
    assert acked, "the disk filled before anything was written"

    def check():
        fresh = Broker(root)
        assert fresh.verify() == {}
        for p in (0, 1):
            _, end, records = read_partition(fresh, "t", p)
            got = {(p, r.offset): r.value for r in records}
            assert sorted(o for _, o in got) == list(range(end))
            assert {k: v for k, v in acked.items() if k[0] == p}.items() <= got.items(), "acknowledged records lost"
        for group, offset in commits.items():
            assert fresh.fetch_offsets(group)[("t", 0)].offset == offset

    check()
    ballast.unlink()
    for b in writers:  # the same writers go on, with no repair
        ((p, base, _n),) = b.produce("t", [Record(b"after")], partition=0)
        acked[(p, base)] = b"after"
        b.commit_offsets("g0", {("t", 0): 1})
        commits["g0"] = 1
        b.close()
    check()
