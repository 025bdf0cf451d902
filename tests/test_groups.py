"""Consumer groups on the Broker: commits, fetches, expiry, compaction, crash and two processes."""

import os
import random
import signal
import subprocess
import time

import pytest

from kop_spark import Broker, OffsetAndMetadata
from kop_spark.errors import (
    GroupIdNotFoundError,
    OffsetMetadataTooLargeError,
    PartitionNotFoundError,
    TopicNotFoundError,
)

from .conftest import PYTHON, python_subprocess_env

COMMITTER = os.path.join(os.path.dirname(__file__), "committer_process.py")
OFFSETS_TOPIC = "public/__kafka/__consumer_offsets"


@pytest.fixture
def b(root):
    broker = Broker(root)
    broker.create_topic("t", 4)
    broker.create_topic("u", 1)
    yield broker
    broker.close()


def test_commit_and_fetch(b):
    b.commit_offsets("g", {("t", 0): 5, ("t", 3): OffsetAndMetadata(9, "why")})
    got = b.fetch_offsets("g")
    assert {tp: (o.offset, o.metadata) for tp, o in got.items()} == {("t", 0): (5, ""), ("t", 3): (9, "why")}
    assert got[("t", 0)].commit_timestamp_ms > 0
    asked = b.fetch_offsets("g", [("t", 0), ("t", 1), ("u", 0)])
    assert [asked[tp].offset for tp in [("t", 0), ("t", 1), ("u", 0)]] == [5, -1, -1]
    assert b.fetch_offsets("nobody") == {}
    b.commit_offsets("g", {("t", 0): 6})
    assert b.fetch_offsets("g")[("t", 0)].offset == 6 and b.fetch_offsets("g")[("t", 3)].offset == 9
    assert b.list_groups() == ["g"]
    assert "__consumer_offsets" not in " ".join(b.list_topics())
    assert b.describe_topic(OFFSETS_TOPIC).config["cleanup.policy"] == "compact"
    assert len(b.describe_topic(OFFSETS_TOPIC).partitions) == 50


def test_group_lands_in_its_kafka_partition(b):
    b.commit_offsets("test", {("t", 0): 1})
    ends = {p.partition: p.log_end_offset for p in b.describe_topic(OFFSETS_TOPIC).partitions}
    assert [p for p, end in ends.items() if end] == [48]


def test_commit_of_many_partitions_is_one_entry(b):
    b.commit_offsets("g", {("t", p): p for p in range(4)} | {("u", 0): 1})
    batches = b.fetch_batches(OFFSETS_TOPIC, b.groups.partition_for("g"), 0)
    # One batch for the group's metadata and its five offsets: one entry, all or nothing.
    assert len(batches) == 1


def test_refused_commits_write_nothing(b):
    before = b.fetch_offsets("g")
    with pytest.raises(TopicNotFoundError, match="'nope'"):
        b.commit_offsets("g", {("t", 0): 1, ("nope", 0): 1})
    with pytest.raises(PartitionNotFoundError, match="partition 4"):
        b.commit_offsets("g", {("t", 4): 1})
    with pytest.raises(OffsetMetadataTooLargeError, match="offsetMetadataMaxSize=4096"):
        b.commit_offsets("g", {("t", 0): OffsetAndMetadata(1, "x" * 4097)})
    b.commit_offsets("g", {("t", 1): OffsetAndMetadata(1, "x" * 4096)})  # at the limit is fine
    assert set(b.fetch_offsets("g")) - set(before) == {("t", 1)}


def test_delete_group_and_offsets(b):
    b.commit_offsets("g", {("t", 0): 1, ("t", 1): 2})
    b.commit_offsets("h", {("t", 0): 3})
    assert b.delete_offsets("g", [("t", 0), ("t", 2)]) == [("t", 0)]
    assert set(b.fetch_offsets("g")) == {("t", 1)}
    b.delete_group("g")
    assert b.list_groups() == ["h"] and b.fetch_offsets("g") == {}
    with pytest.raises(GroupIdNotFoundError):
        b.delete_group("g")
    assert Broker(b.root).list_groups() == ["h"]  # tombstones survive a reload


def test_expiry_of_groups_without_consumers(b):
    b.commit_offsets("old", {("t", 0): 1})
    b.commit_offsets("explicit", {("t", 0): 1}, expire_timestamp_ms=int(time.time() * 1000) - 1)
    b.commit_offsets("explicit", {("t", 1): 2})
    now = int(time.time() * 1000)
    assert b.groups.expire(now) == 1  # only the offset whose own expire timestamp passed
    assert set(b.fetch_offsets("explicit")) == {("t", 1)}
    retention = b.config["offsetsRetentionMinutes"] * 60_000
    assert b.groups.expire(now + retention + 1) == 2
    assert b.list_groups() == []
    assert Broker(b.root).list_groups() == []


def test_two_processes_see_each_others_commits(b):
    child = subprocess.Popen(
        [PYTHON, COMMITTER, b.root, "shared", "one-partition"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=python_subprocess_env(),
    )
    assert child.stdout.readline().strip() == "ready"
    child.stdin.write("go\n")
    child.stdin.flush()
    try:
        for _ in range(30):
            committed = int(child.stdout.readline())
            # The other process's commit returned before it printed: this process must see it.
            assert b.fetch_offsets("shared")[("t", 0)].offset >= committed
    finally:
        child.kill()
        child.wait()
    b.commit_offsets("shared", {("t", 3): 12345})
    out = subprocess.run(
        [PYTHON, COMMITTER, b.root, "shared", "fetch"], capture_output=True, text=True, env=python_subprocess_env()
    )
    assert "t 3 12345" in out.stdout.splitlines()


def test_a_commit_landing_behind_another_processes_reads_it_and_its_own_is_not_read_back(b, monkeypatch):
    """A coordinator takes its own commit into its table as written, unless another process's
    commit landed between the table's end and it: then it reads up to its own."""
    other, real, races = Broker(b.root), b.produce_batches, [{("t", 1): 5}]

    def raced(*args, **kwargs):  # the other process commits after this one read the log, before it writes
        if races:
            other.commit_offsets("g", races.pop())
        return real(*args, **kwargs)

    b.commit_offsets("g", {("t", 0): 1})
    monkeypatch.setattr(b, "produce_batches", raced)
    b.commit_offsets("g", {("t", 0): 2})
    assert {tp: o.offset for tp, o in b.fetch_offsets("g").items()} == {("t", 0): 2, ("t", 1): 5}
    loaded = b.groups.stats.records_loaded
    b.commit_offsets("g", {("t", 0): 3})
    assert b.fetch_offsets("g")[("t", 0)].offset == 3
    assert b.groups.stats.records_loaded == loaded  # nothing came from elsewhere, nothing was read
    other.close()


def test_kill_9_during_many_partition_commits_is_all_or_nothing(root):
    b = Broker(root)
    b.create_topic("t", 64)
    rng = random.Random(7)
    last_seen = 0
    for _ in range(12):
        child = subprocess.Popen(
            [PYTHON, COMMITTER, root, "g", "all-partitions"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=python_subprocess_env(),
        )
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        for _ in range(rng.randint(1, 15)):
            acknowledged = int(child.stdout.readline())
        # Not synchronisation: a random delay puts the kill anywhere in the next commit.
        time.sleep(rng.uniform(0, 0.02))
        child.send_signal(signal.SIGKILL)
        child.wait()
        offsets = {o.offset for o in Broker(root).fetch_offsets("g").values()}
        assert len(Broker(root).fetch_offsets("g")) == 64
        assert len(offsets) == 1, f"a torn commit: {sorted(offsets)[:5]}..."
        (value,) = offsets
        assert value >= acknowledged  # nothing acknowledged is lost
        last_seen = value
    assert last_seen > 0


@pytest.mark.slow
def test_compaction_keeps_group_loading_small_after_100k_commits(root):
    b = Broker(root, conf={"journalSyncData": False})
    b.create_topic("t", 10)
    for i in range(100_000):
        b.commit_offsets("g", {("t", i % 10): i})
    b.compact(OFFSETS_TOPIC)
    fresh = Broker(root)
    got = fresh.fetch_offsets("g")
    assert {tp: o.offset for tp, o in got.items()} == {("t", p): 99_990 + p for p in range(10)}
    live_keys = 10 + 1  # ten offsets and the group's metadata
    assert fresh.groups.stats.records_loaded <= 2 * live_keys
