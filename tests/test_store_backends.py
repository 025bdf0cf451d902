"""DESIGN.md §2's storage invariants on every kind of store: a local root; S3 with its metadata in
the bucket, in etcd, or in ZooKeeper; GCS and Azure Blob with their metadata in the bucket. The
object stores and metadata services are servers on loopback (moto, Azurite, etcd, ZooKeeper, and
GCS's XML API as ``gcs_process`` serves it)."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import obstore
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from kop_spark import AlterConfigOp, Broker, Record, layout
from kop_spark.broker import SINK_LEASE_MS, FetchedBatches, OffsetSpec, PartitionFetch, StagedLedger
from kop_spark.broker.admin import PRODUCED_TOPIC_AGE_S
from kop_spark.broker.partition_views import PartitionViews
from kop_spark.clock import ManualClock
from kop_spark.errors import (
    ConfigError,
    CorruptRecordError,
    FileMissingError,
    OrphanRemovedError,
    RecordTooLargeError,
    StorageError,
    WriteAbortedError,
)
from kop_spark.faults import CRASH_POINTS_ENV
from kop_spark.kafka.messages import request_class
from kop_spark.kafka.store_metrics import store_samples
from kop_spark.kafka.transaction_coordinator import TransactionCoordinator
from kop_spark.record import RecordBatch, build_record_batch
from kop_spark.spark.options import SinkOptions
from kop_spark.spark.sink import KopBatchWriter
from kop_spark.storage import managed_ledger
from kop_spark.storage.fileio import takes_whole_files_only
from kop_spark.storage.object_fileio import ObjectFileIO
from kop_spark.storage.orphans import remove_orphans

from . import servers
from .conftest import PYTHON, python_subprocess_env
from .in_flight_proxy import InFlightProxy
from .kafka_wire import call, connect, fetch_request, kio_call
from .kop_server import KopServer
from .test_crash_and_concurrency import check_log, confirmed_lines, finish_writers, go, start_writer

STORES = ["local", "s3", "s3+etcd", "s3+zookeeper", "gcs", "azure"]


class Store(NamedTuple):
    name: str
    root: str
    conf: dict[str, Any]

    def broker(self, **conf: Any) -> Broker:
        return Broker(self.root, {**self.conf, **conf})


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    name, space = request.param, f"s{uuid.uuid4().hex[:12]}"
    if name == "local":
        return Store(name, str(tmp_path / "store"), {})
    running = request.getfixturevalue("running")
    scheme = {"azure": "az", "gcs": "gs"}.get(name, "s3")
    conf: dict[str, Any] = {"metadataStoreOperationTimeoutSeconds": 10}
    if name == "s3+etcd":
        conf["metadataStoreUrl"] = f"etcd:http://127.0.0.1:{running['etcd'].port}/{space}"
    if name == "s3+zookeeper":
        conf["metadataStoreUrl"] = f"zk:127.0.0.1:{running['zookeeper'].port}/{space}"
    return Store(name, f"{scheme}://{servers.BUCKET}/{space}", conf)


def _records(prefix: str, n: int, t0: int | None = None) -> list[Record]:
    t0 = int(time.time() * 1000) if t0 is None else t0  # recent: retention keeps them
    return [Record(value=f"{prefix}{i}".encode(), key=f"k{i % 7}".encode(), timestamp_ms=t0 + i) for i in range(n)]


def test_offsets_stay_continuous_across_rollover(store: Store) -> None:
    b = store.broker(managedLedgerMaxEntriesPerLedger=3, managedLedgerMergeInPassing=0)
    b.create_topic("t", 2)
    for i in range(30):
        b.produce("t", _records(f"a{i}-", 1 + i % 3), partition=i % 2)
    for p in (0, 1):
        got = b.fetch("t", p, 0, max_records=1000)
        assert [r.offset for r in got] == list(range(b.list_offsets("t", p, "latest")))
        assert b.list_offsets("t", p, "earliest") == 0
        assert len(b.view("t", p).ledgers) > 3, "rolled over into several ledgers"
        # Timestamp lookups land on the first record at or after the time.
        ts = got[len(got) // 2].timestamp_ms
        assert b.list_offsets("t", p, ts) == next(r.offset for r in got if r.timestamp_ms >= ts)
        assert b.fetch("t", p, 5, max_records=2)[0].offset == 5
    other = store.broker()
    assert other.describe_topic("t").partitions[1].log_end_offset == b.list_offsets("t", 1, "latest")
    assert b.verify() == {}


def test_three_writer_processes_share_a_partition(store: Store) -> None:
    store.broker().create_topic("t", 1)
    names = ["a", "b", "c"]
    procs = {n: start_writer(store.root, n, 30, max_entries=3, conf=store.conf) for n in names}
    go(procs.values())
    confirmed = finish_writers(procs)
    values = check_log(store.root, confirmed, store.conf)
    assert len(values) == sum(c for appends in confirmed.values() for _, c in appends.values())


def test_writers_killed_at_random_points_lose_nothing_acknowledged(store: Store) -> None:
    store.broker().create_topic("t", 1)
    rng = random.Random(20261124)
    confirmed: dict[str, dict[int, tuple[int, int]]] = {}
    for cycle in range(3):
        names = [f"c{cycle}w{k}" for k in range(rng.choice([1, 2]))]
        procs = {n: start_writer(store.root, n, 10_000, max_entries=rng.choice([1, 3]), conf=store.conf) for n in names}
        go(procs.values())
        victim = rng.choice(names)
        assert procs[victim].stdout is not None
        lines = {n: [] for n in names}
        for _ in range(rng.randint(1, 12)):
            lines[victim].append(procs[victim].stdout.readline())
        time.sleep(rng.uniform(0, 0.02))  # not synchronisation: puts the kill anywhere in an append
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
        for n, p in procs.items():
            p.wait()
            assert p.stdout is not None
            lines[n] += p.stdout.read().splitlines()
            confirmed[n] = confirmed_lines(line for line in lines[n] if line.strip())
        check_log(store.root, confirmed, store.conf)
    b = store.broker()
    end = b.list_offsets("t", 0, "latest")
    assert b.produce("t", [Record(b"after")], partition=0) == [(0, end, 1)]
    assert b.verify() == {}


def _flip_a_byte(b: Broker, path: str, at: int) -> None:
    data = bytearray(b.fileio.read_at(path, 0, b.fileio.size(path)))
    data[at] ^= 0x40
    if b.fileio.supports_append:
        with open(b.fileio.full_path(path), "r+b") as f:
            f.write(data)
    else:  # objects are immutable to kop, not to whoever damages them
        assert isinstance(b.fileio, ObjectFileIO)
        obstore.put(b.fileio.store, path, bytes(data))


def test_a_flipped_byte_is_detected_never_returned(store: Store) -> None:
    b = store.broker()
    b.create_topic("t", 1)
    b.produce("t", _records("v", 20), partition=0)
    b.close()
    ledger = b.view("t", 0).ledgers[0]
    _flip_a_byte(b, ledger.file, ledger.length // 2)
    with pytest.raises(CorruptRecordError, match=ledger.file.rsplit("/", 1)[-1]):
        store.broker().fetch("t", 0, 0, max_records=100)
    assert store.broker().verify(), "verify reports the damage"


@pytest.mark.parametrize(
    ("records", "batch_size", "gets"),
    [
        (_records("v", 20), 16384, 1),  # a small ledger: trailer, table and entries in one read
        ([Record(value=os.urandom(100_000)) for _ in range(4)], 16384, 2),  # the table in the tail's read
        (_records("e", ObjectFileIO.small_read_bytes // 24 + 100), 1, 3),  # the table before it
    ],
    ids=["small", "large-entries", "many-entries"],
)
def test_a_ledger_on_an_object_store_is_read_in_as_few_requests_as_its_size_allows(
    running: dict[str, servers.Server], records: list[Record], batch_size: int, gets: int
) -> None:
    """Each request to an object store costs tens of milliseconds: what one read of a ledger's
    tail holds is not asked for again."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", records, partition=0, batch_size=batch_size)
        (ledger,) = b.view("t", 0).ledgers
    since = len(running["s3"].log.read_text())
    wanted = records[-100:]  # one read of entries, whatever the ledger holds
    with Broker(root) as b:
        got = b.fetch("t", 0, len(records) - len(wanted), max_records=len(wanted))
    assert [r.value for r in got] == [r.value for r in wanted]
    requests = servers.requests_since(running["s3"], since, ledger.file.rsplit("/", 1)[-1])
    assert len(requests) == gets, requests


@pytest.mark.parametrize("cache_mb", [64, 0])
def test_ledgers_a_process_uploaded_are_read_back_from_memory_until_deleted(
    running: dict[str, servers.Server], cache_mb: int
) -> None:
    """A consumer tailing a partition reads each ledger moments after its server uploaded it, and
    a writer merging small ledgers in passing reads them back: a GET each, of bytes that were in
    memory a moment before. A process keeps what it uploaded lately (``managedLedgerCacheSizeMB``),
    until it deletes it."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    conf = {"managedLedgerMergeInPassing": 4, "managedLedgerCacheSizeMB": cache_mb}
    with Broker(root, conf) as b:
        b.create_topic("t", 1)
        since = len(moto.log.read_text())
        for i in range(6):
            b.produce("t", [Record(b"%d" % i)], partition=0)
        got = [r.value for r in b.fetch("t", 0, 0, max_records=100)]
        reads = [r for r in servers.requests_since(moto, since, f"{space}/ledgers/") if "GET " in r]
        b.fileio.write_whole("gone", b"abc")
        assert b.fileio.read_at("gone", 1, 2) == b"bc"
        b.fileio.delete("gone")
        with pytest.raises(FileMissingError):
            b.fileio.read_at("gone", 1, 2)
    assert got == [b"%d" % i for i in range(6)] and len(b.view("t", 0).ledgers) < 6, "not merged in passing"
    assert (reads == []) == (cache_mb > 0), reads


def _in_turn(b: Broker) -> Broker:
    """``b`` with its reads made one at a time, as a store that serves one at a time has them."""
    b.fileio.read_parallelism = b.store.read_parallelism = 1
    return b


def _answer(got: object) -> object:
    return (type(got), str(got)) if isinstance(got, Exception) else got


def _small_ledgers(n: int) -> tuple[str, int]:
    """An S3 root with a topic of ``n`` partitions, each of three small ledgers (the first
    partition's first record 2,000 bytes, larger than a fetch's limit below)."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as w:
        w.create_topic("t", n)
        for size in (100, 300, 50):
            for p in range(n):
                w.produce("t", [Record(value=os.urandom(size * 20 if p == 0 else size))], partition=p)
    return root, n


def test_a_fetch_on_an_object_store_reads_partitions_at_once_and_answers_as_in_turn(
    running: dict[str, servers.Server],
) -> None:
    """Each request to an object store waits tens of milliseconds: a fetch of many partitions
    reads their changed metadata, and their records, at once. What each partition answers, byte
    budget (KIP-74's first batch whatever its size), errors and bounds, is what reads in turn give."""
    root, n = _small_ledgers(12)
    wanted = [PartitionFetch("t", p, 99 if p == 5 else 0, 700) for p in range(n)] + [PartitionFetch("t", 99, 0, 700)]
    with (
        InFlightProxy(running["s3"].port, gather=4) as proxy,
        Broker(root, {"aws_endpoint_url": proxy.url}) as b,
        _in_turn(Broker(root)) as in_turn,
    ):
        views = PartitionViews(b.admin, b.store).existing([("t", p) for p in range(n)])
        assert proxy.most_in_flight >= 4, "the partitions' metadata was read in turn"
        assert views == PartitionViews(in_turn.admin, in_turn.store).existing([("t", p) for p in range(n)])
        for budget in (1, 1500, 4000, 50 << 20):
            proxy.most_in_flight = 0
            got, expected = b.fetch_partitions(wanted, budget), in_turn.fetch_partitions(wanted, budget)
            assert [_answer(a) for a in got] == [_answer(e) for e in expected], f"budget {budget}"
        assert proxy.most_in_flight >= 4, "the partitions' records were read in turn"
        assert isinstance(got[0], FetchedBatches) and len(got[0].batches[0]) > 700, "the first batch whatever its size"
        assert all(a.batches for a in got if isinstance(a, FetchedBatches)), "a budget all could read from"


def test_offsets_of_many_partitions_on_an_object_store_are_looked_up_at_once_as_in_turn(
    running: dict[str, servers.Server],
) -> None:
    """A ListOffsets of many partitions by time reads a record of each: at once, as a fetch does."""
    root, n = _small_ledgers(12)
    specs: list[OffsetSpec] = ["earliest", 0, "max-timestamp", 1 << 60, "latest", 0]
    wanted = [("t", p, specs[p % len(specs)]) for p in range(n)] + [("t", 99, 0), ("t", 1, "soon")]
    with (
        InFlightProxy(running["s3"].port, gather=4) as proxy,
        Broker(root, {"aws_endpoint_url": proxy.url}) as b,
        _in_turn(Broker(root)) as in_turn,
    ):
        b.offsets_and_timestamps(wanted)  # the views are read now, at once, and kept
        proxy.most_in_flight = 0
        got = b.offsets_and_timestamps(wanted)
        assert proxy.most_in_flight >= 4, "the partitions' records were read in turn"
        assert [_answer(a) for a in got] == [_answer(e) for e in in_turn.offsets_and_timestamps(wanted)]
    assert [a[0] for a in got[:6]] == [0, 0, 2, -1, 3, 0] and isinstance(got[-1], ValueError), got


def test_a_produce_to_many_partitions_of_an_object_store_topic_reads_its_metadata_once(
    running: dict[str, servers.Server],
) -> None:
    """A PRODUCE's partitions are checked against their topic's settings, read once a request:
    on an object store each read is a round trip."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b:
        b.create_topic("t", 12)
        since = len(running["s3"].log.read_text())
        wanted = [("t", p, [build_record_batch([Record(value=b"%d" % p)])]) for p in range(12)]
        queued = b.queue_batches([*wanted, ("t", 12, wanted[0][2]), ("gone", 0, wanted[0][2])])
        assert [str(q) for q in queued[-2:]] == [
            "topic 't' has no partition 12: it has partitions 0 to 11",
            f"topic 'gone' does not exist (as persistent://public/default/gone) in {root}",
        ]
        assert [q() if callable(q) else q for q in queued[:-2]] == [(0, 0, -1)] * 12
    assert len(servers.requests_since(running["s3"], since, "_metadata/topics/public/default/t.json")) == 1
    assert [r.value for p in range(12) for r in Broker(root).fetch("t", p, 0)] == [b"%d" % p for p in range(12)]


def test_a_topic_on_an_object_store_is_created_and_deleted_with_its_partitions_at_once(
    running: dict[str, servers.Server],
) -> None:
    """Each partition's log is a key of its own, created and deleted in a round trip each: a topic
    of a hundred partitions took a hundred in turn."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with InFlightProxy(running["s3"].port, gather=4) as proxy, Broker(root, {"aws_endpoint_url": proxy.url}) as b:
        b.create_topic("t", 12)
        created, proxy.most_in_flight = proxy.most_in_flight, 0
        b.produce("t", [Record(b"x")], partition=11)
        b.delete_topic("t")
        deleted = proxy.most_in_flight
        b.create_topic("t", 12)
        assert [b.list_offsets("t", p, "latest") for p in range(12)] == [0] * 12
    assert min(created, deleted) >= 4, (created, deleted)


def test_a_servers_first_fetch_of_many_partitions_reads_their_topic_once(running: dict[str, servers.Server]) -> None:
    """A partition's log is opened on its first use, which needs its topic's metadata: a server's
    first look at a hundred partitions on an object store read it a hundred times, in turn."""
    root, moto = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}", running["s3"]
    with Broker(root) as writer:
        writer.create_topic("t", 12)
        writer.produce("t", [Record(b"x")], partition=5)
    with Broker(root) as b:
        since = len(moto.log.read_text())
        fetched = b.fetch_partitions([PartitionFetch("t", p, 0, 1 << 20) for p in range(12)], 1 << 20)
    assert len(servers.requests_since(moto, since, "/public/default/t.json")) == 1
    assert [f.high_watermark for f in fetched if isinstance(f, FetchedBatches)] == [int(p == 5) for p in range(12)]


def test_a_produce_on_an_object_store_is_an_upload_and_a_cas_and_reads_its_topic_once_a_second(
    running: dict[str, servers.Server],
) -> None:
    """Before its CAS, a produce looked that the ledger it had just uploaded was not removed as an
    orphan meanwhile: a request the CAS going through makes needless. And each produce read its
    topic, a GET as slow as the upload: it now takes what it read within ``PRODUCED_TOPIC_AGE_S``,
    but a partition another process added, and a change made here, at once."""
    root, moto = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}", running["s3"]
    with Broker(root) as b, Broker(root) as other:
        b.create_topic("t", 1)
        b.produce("t", [Record(b"a")], partition=0)
        since, began = len(moto.log.read_text()), time.monotonic()
        for value in (b"b", b"c", b"d", b"e"):
            b.produce("t", [Record(value)], partition=0)
        took_s, requests = time.monotonic() - began, servers.requests_since(moto, since, "")
        topic_reads = [r for r in requests if "/topics/" in r]
        assert len(topic_reads) <= took_s // PRODUCED_TOPIC_AGE_S, (took_s, topic_reads)
        writes = [r for r in requests if "/topics/" not in r]
        assert [r.split('"')[1].split()[0] for r in writes] == ["PUT", "PUT"] * 4, writes
        assert [(".ledger " in r, "/managed-ledgers/" in r) for r in writes[:2]] == [(True, False), (False, True)]
        other.create_partitions("t", 2)
        b.produce("t", [Record(b"f")], partition=1)
        b.alter_topic_config("t", [AlterConfigOp("max.message.bytes", "set", 100)])
        with pytest.raises(RecordTooLargeError):
            b.produce("t", [Record(b"x" * 200)], partition=0)
    assert [r.value for p in (0, 1) for r in Broker(root).fetch("t", p, 0)] == [b"a", b"b", b"c", b"d", b"e", b"f"]


@pytest.mark.parametrize("meanwhile", ["another writer appends", "orphan removal takes the upload"])
def test_a_produce_whose_cas_loses_after_its_upload_refers_only_to_a_ledger_in_place(
    running: dict[str, servers.Server], monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """A produce's CAS that loses is tried again on a fresh read, with the ledger it uploaded: that
    one, if it is still there; a new one, if orphan removal took it meanwhile (condemned by a CAS,
    deleted, acquitted by another: the fresh read shows nothing of it)."""
    root, moto = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}", running["s3"]
    b, other = Broker(root), Broker(root)
    b.create_topic("t", 1)
    b.produce("t", [Record(b"a")], partition=0)
    real_upload, raced = managed_ledger.sealed_ledger, []

    def upload_then_race(fileio: Any, path: Any, appends: Any) -> StagedLedger:
        ledger = real_upload(fileio, path, appends)
        if not raced:
            raced.append(ledger.file)
            if meanwhile == "another writer appends":
                other.produce("t", [Record(b"other")], partition=0)
            else:
                data = other.fileio.walk_files(layout.data_dir(other.topic_name("t"), 0))
                assert remove_orphans(other.managed_ledger("t", 0), data, 0) == [ledger.file]
        return ledger

    monkeypatch.setattr(managed_ledger, "sealed_ledger", upload_then_race)
    since = len(moto.log.read_text())
    b.produce("t", [Record(b"b")], partition=0)
    monkeypatch.undo()
    uploads = [r for r in servers.requests_since(moto, since, ".ledger ") if '"PUT ' in r]
    fresh = Broker(root)
    values = [r.value for r in fresh.fetch("t", 0, 0)]
    if meanwhile == "another writer appends":
        assert (values, len(uploads)) == ([b"a", b"other", b"b"], 2), "the retry uploaded its ledger again"
    else:
        assert (values, len(uploads)) == ([b"a", b"b"], 2)
        assert raced[0] not in {l.file for l in fresh.view("t", 0).ledgers}
    assert fresh.verify() == {}


def test_a_transaction_on_an_object_store_reads_its_topic_once_a_request_and_stages_partitions_at_once(
    running: dict[str, servers.Server],
) -> None:
    """AddPartitionsToTxn checks its partitions against their topic, and a PRODUCE's partitions
    are checked and staged: on an object store each read is a round trip and each staging a
    write, which a transaction of many partitions made in turn. A PRODUCE may take the topic as
    read within ``PRODUCED_TOPIC_AGE_S``."""
    root, moto, topic_json = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}", running["s3"], "/public/default/t.json"
    Broker(root).create_topic("t", 12)
    with InFlightProxy(moto.port, gather=4) as proxy, Broker(root, {"aws_endpoint_url": proxy.url}) as b:
        c = TransactionCoordinator(b)
        pid, epoch = c.init_producer_id("tx", 60_000)
        since = len(moto.log.read_text())
        c.add_partitions("tx", pid, epoch, [("t", p) for p in range(11)])
        added, since = servers.requests_since(moto, since, topic_json), len(moto.log.read_text())
        began = time.monotonic()
        proxy.most_in_flight = 0
        batches = [
            build_record_batch(
                [Record(b"%d" % p)], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
            )
            for p in range(12)
        ]
        answers = c.produce_each("tx", [("t", p, batch) for p, batch in enumerate(batches)])
        assert proxy.most_in_flight >= 4, "the partitions were staged in turn"
        produced, took_s = servers.requests_since(moto, since, topic_json), time.monotonic() - began
        again = build_record_batch(
            [Record(b"again")], producer_id=pid, producer_epoch=epoch, base_sequence=1, is_transactional=True
        )
        # A partition named twice in a request, then a retry there and in another partition.
        twice = c.produce_each("tx", [("t", 1, again), ("t", 1, batches[1]), ("t", 2, batches[2])])
        c.end("tx", pid, epoch, commit=True)
    assert len(added) == 1, "the topic was read more than once a request"
    assert len(produced) <= 1 + took_s // PRODUCED_TOPIC_AGE_S, "the topic was read more than once a request"
    assert answers[:11] == [None] * 11 and "partition was not added" in str(answers[11]) and twice == [None] * 3
    expected = [[b"%d" % p, *([b"again"] if p == 1 else [])] for p in range(11)] + [[]]
    assert [[r.value for r in Broker(root).fetch("t", p, 0)] for p in range(12)] == expected


def test_a_restarted_server_takes_up_a_transactions_partitions_at_once(running: dict[str, servers.Server]) -> None:
    """Taken up, each partition's staged ledgers are found and resealed, reads a round trip each
    on an object store; the producer's next request waits on them."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    Broker(root).create_topic("t", 12)

    def batch(seq: int, value: bytes) -> bytes:
        return build_record_batch(
            [Record(value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
        )

    first = TransactionCoordinator(Broker(root))
    pid, epoch = first.init_producer_id("tx", 60_000)
    first.add_partitions("tx", pid, epoch, [("t", p) for p in range(12)])
    assert first.produce_each("tx", [("t", p, batch(0, b"%d" % p)) for p in range(12)]) == [None] * 12
    with InFlightProxy(running["s3"].port, gather=4) as proxy, Broker(root, {"aws_endpoint_url": proxy.url}) as b:
        restarted = TransactionCoordinator(b)
        proxy.most_in_flight = 0
        restarted.produce("tx", "t", 0, batch(1, b"more"))
        assert proxy.most_in_flight >= 4, "the partitions were taken up in turn"
        restarted.end("tx", pid, epoch, commit=True)
    expected = [[b"%d" % p, *([b"more"] if p == 0 else [])] for p in range(12)]
    assert [[r.value for r in Broker(root).fetch("t", p, 0)] for p in range(12)] == expected


def test_a_sink_commit_on_an_object_store_reads_each_partition_once_and_no_crash_point(
    running: dict[str, servers.Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request to an object store is a round trip. A commit's step for a partition read its
    metadata twice, and looked for a crash point, which are the tests' only."""
    monkeypatch.delenv(CRASH_POINTS_ENV)
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b:
        b.create_topic("t", 2)
        since = len(running["s3"].log.read_text())
        for batch in range(2):
            staged = {("t", p): _staged(b, p, f"_staging/job/{batch}/task") for p in range(2)}
            b.sink_commits.commit("job", batch, staged, streaming=True)
        requests = servers.requests_since(running["s3"], since, "")
        assert [r.value for p in range(2) for r in b.fetch("t", p, 0)] == [b"p0", b"p0", b"p1", b"p1"]
    assert not [r for r in requests if "/_faults/" in r]
    reads = [r for r in requests if '"GET ' in r and "/t-partition-" in r and ".json" in r]
    assert len(reads) == 4, "a partition's metadata read once a commit, for its CAS"


def _staged(b: Broker, partition: int, task_dir: str) -> list[StagedLedger]:
    staged = b.sink_commits.stage("t", partition, task_dir)
    staged.append([build_record_batch([Record(b"p%d" % partition)])])
    return staged.finish()


def test_a_topic_on_an_object_store_is_described_with_its_partitions_read_at_once(
    running: dict[str, servers.Server],
) -> None:
    """``kop topics describe`` and DescribeLogDirs read every partition's metadata."""
    root, n = _small_ledgers(12)
    with (
        InFlightProxy(running["s3"].port, gather=4) as proxy,
        Broker(root, {"aws_endpoint_url": proxy.url}) as b,
        _in_turn(Broker(root)) as in_turn,
    ):
        described = b.describe_topic("t")
        assert proxy.most_in_flight >= 4, "the partitions' metadata was read in turn"
        assert described == in_turn.describe_topic("t")
    assert [(p.log_end_offset, p.ledgers) for p in described.partitions] == [(3, 3)] * n


def test_an_object_store_roots_topics_are_listed_in_a_few_requests_and_their_changes_seen(
    running: dict[str, servers.Server],
) -> None:
    """A Metadata request lists every topic: their metadata objects are probed in one listing, and
    read again only where another broker changed them."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as other, Broker(root) as b:
        for i in range(30):
            other.create_topic(f"t{i}", 1)
        assert len(b.list_topics()) == 30
        since = len(moto.log.read_text())
        assert len(b.list_topics()) == 30
        requests = servers.requests_since(moto, since, space)
        assert len(requests) <= 3, requests
        other.create_topic("new", 2)
        other.delete_topic("t0")
        other.create_partitions("t1", 3)
        infos = {t.name: t.partitions for t in b.topic_infos()}
        assert len(infos) == 30 and "t0" not in infos and (infos["new"], infos["t1"]) == (2, 3)


def test_a_metrics_scrape_of_an_object_store_root_reads_what_changed_in_a_few_requests(
    running: dict[str, servers.Server],
) -> None:
    """A Prometheus scrape of ``kop serve`` reads every partition's offsets: probed together, and
    read again only where they changed, as another broker's append is seen at the next scrape."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as other, Broker(root) as b:
        for topic in ("a", "b"):
            other.create_topic(topic, 20)
        for _ in range(2):  # the second takes what the first opened (each partition's log) as kept
            store_samples(b, b.topic_infos(True), {})
        since = len(moto.log.read_text())
        store_samples(b, b.topic_infos(True), {})
        requests = servers.requests_since(moto, since, space)
        assert len(requests) < 10, f"a request a partition (90 with the offsets topic's): {requests}"
        other.produce("b", _records("v", 3), partition=7)
        ends = store_samples(b, b.topic_infos(True), {})["kafka_topic_partition_current_offset"]
        assert [(labels["topic"], labels["partition"], end) for labels, end in ends if end] == [("b", "7", 3)]
        assert len(ends) == 40


def test_a_scrape_of_kop_serve_on_an_object_store_lists_the_topics_once(running: dict[str, servers.Server]) -> None:
    """The samples and the sweep of deleted topics' counts share a scrape's listing: each listing
    is a LIST request, paid at every scrape of every server."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as b:
        b.create_topic("a", 2)
    with KopServer(root, ["webServicePort=0"]) as server:
        metrics = re.search(r"metrics at (http://[\d.]+:\d+/metrics)", "".join(server.log))
        assert metrics, "kop serve did not say where its metrics are"
        scrape = lambda: urllib.request.urlopen(metrics[1], timeout=30).read().decode()  # noqa: E731 - used twice
        assert 'kafka_topic_partition_current_offset{topic="a",partition="1"} 0' in scrape()
        since = len(moto.log.read_text())
        scrape()
        listings = servers.requests_since(moto, since, f"prefix={space}/_metadata/{layout.TOPICS}/ ")
    assert len(listings) == 1, listings  # the probes of the keys listed are asked by directory, after it


@pytest.mark.parametrize("period_ms", [0, 60_000])
def test_kafka_min_fetch_period_lets_a_fetch_answer_from_an_earlier_look(
    running: dict[str, servers.Server], period_ms: int
) -> None:
    """Each FETCH's first look is a LIST on an object store, which an idle consumer makes twice a
    second or more. ``kafkaMinFetchPeriodMs`` lets a FETCH answer from a look taken that long
    before it: another process's append is seen later, this server's own at once."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", [Record(b"a")], 0)
    with KopServer(root, [f"kafkaMinFetchPeriodMs={period_ms}"]) as server, connect(server) as sock:
        assert _high_watermark(sock, 0) == 1
        with Broker(root) as other:
            other.produce("t", [Record(b"b")], 0)
        assert _high_watermark(sock, 1) == (2 if period_ms == 0 else 1)
        producer = Producer({"bootstrap.servers": server.bootstrap})
        producer.produce("t", b"c", partition=0)
        assert producer.flush(30) == 0
        assert _high_watermark(sock, 1) == 3


@pytest.mark.parametrize("period_ms", [0, 60_000])
def test_a_fetch_after_the_servers_own_append_on_an_object_store_reads_no_metadata_it_wrote(
    running: dict[str, servers.Server], period_ms: int
) -> None:
    """On the way of each record to a consumer of the server that took it, a look at its partition
    made a LIST and read the metadata the append had just written, a GET: the append now patches
    the listings the server keeps with the object it wrote, as a new listing shows it, and keeps
    the view it wrote. A FETCH then lists only where its first look must (period 0), and reads none
    of it; another process's append is read as before."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as b:
        b.create_topic("t", 1)
    with KopServer(root, [f"kafkaMinFetchPeriodMs={period_ms}"]) as server, connect(server) as sock:
        assert _high_watermark(sock, 0) == 0
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
        looks: list[list[str]] = []
        for end in (1, 2):
            producer.produce("t", b"x", partition=0)
            assert producer.flush(30) == 0
            since = len(moto.log.read_text())
            assert _high_watermark(sock, end - 1) == end
            looks.append(servers.requests_since(moto, since, f"{space}/_metadata/{layout.MANAGED_LEDGERS}/"))
        with Broker(root) as other:
            other.produce("t", [Record(b"y")], 0)
        since = len(moto.log.read_text())
        seen = _high_watermark(sock, 2)
        after_other = servers.requests_since(moto, since, f"{space}/_metadata/{layout.MANAGED_LEDGERS}/")
    listings = [len([r for r in look if "list-type=2" in r]) for look in looks]
    assert listings == ([1, 1] if period_ms == 0 else [0, 0]), looks
    assert all("list-type=2" in r for look in looks for r in look), "a fetch read metadata the server wrote"
    if period_ms == 0:
        assert seen == 3 and len([r for r in after_other if "list-type=2" not in r]) == 1, after_other


def test_a_fetch_on_a_listing_kept_never_refuses_an_offset_another_process_appended(
    running: dict[str, servers.Server],
) -> None:
    """Under ``kafkaMinFetchPeriodMs`` a FETCH's first look may take a listing a minute old, and
    an offset past the end it showed was refused with OFFSET_OUT_OF_RANGE: a consumer given the
    offset by a fresh ListOffsets, or by a group member on another server, then reset its
    position (to the start, reading it all again, or to the end, skipping records). Such an
    offset is now looked for in the metadata as it stands; one the log has not is still refused."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b:
        b.create_topic("t", 1)
    with KopServer(root, ["kafkaMinFetchPeriodMs=60000"]) as server, connect(server) as sock:
        assert _high_watermark(sock, 0) == 0  # the listing the next FETCH may take
        with Broker(root) as other:
            other.produce("t", [Record(b"y")], 0)
            assert _high_watermark(sock, 0) == 0, "the listing kept stood in"
            assert _high_watermark(sock, 1) == 1
            (answer,) = call(sock, fetch_request("t", 0, 2)).to_dict()["responses"][0]["partitions"]
            assert answer["error_code"] == ErrorCode.offset_out_of_range, answer


def test_a_fetch_on_a_listing_kept_never_refuses_an_offset_below_a_topic_made_again(
    running: dict[str, servers.Server],
) -> None:
    """A listing kept from before another process deleted a topic and made it again shows the old
    topic's log start: an offset the new topic has, below it, was refused."""
    root = f"s3://{servers.BUCKET}/s{uuid.uuid4().hex[:12]}"
    with Broker(root) as b, Broker(root) as other:
        other.create_topic("t", 1)
        other.produce("t", [Record(b"old"), Record(b"old")], 0)
        other.delete_records("t", 0, 2)
        assert _bounds(b.fetch_partitions([PartitionFetch("t", 0, 2, 1 << 20)], 1 << 20)) == (2, 2)
        other.delete_topic("t")
        other.create_topic("t", 1)
        other.produce("t", [Record(b"new")], 0)
        [got] = b.fetch_partitions([PartitionFetch("t", 0, 0, 1 << 20)], 1 << 20, probes_within_s=60)
        assert _bounds([got]) == (0, 1), got
        assert isinstance(got, FetchedBatches) and [r.value for r in RecordBatch(got.batches[0]).records()] == [b"new"]


def _bounds(answer: list[FetchedBatches | Exception]) -> tuple[int, int]:
    [got] = answer
    assert isinstance(got, FetchedBatches), got
    return got.log_start_offset, got.high_watermark


def test_fetches_of_a_topics_partitions_on_one_server_share_a_listing(running: dict[str, servers.Server]) -> None:
    """A listing of a topic's partitions runs from the first key probed to the last: the members
    of a group each fetch their own partitions, and one member's listing covered no other's, so
    each listed apart. A look now probes every partition of the topic the server has open."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as b:
        b.create_topic("t", 2)
    with KopServer(root, ["kafkaMinFetchPeriodMs=60000"]) as server, connect(server) as sock:
        since = len(moto.log.read_text())
        for partition in (0, 1, 0, 1, 0, 1):
            assert _high_watermark(sock, 0, partition) == 0
        listings = servers.requests_since(moto, since, f"prefix={space}/_metadata/{layout.MANAGED_LEDGERS}/")
    assert len(listings) == 2, listings  # at partition 0's first fetch, and 1's, which has both open


def _high_watermark(sock: Any, offset: int, partition: int = 0) -> int:
    """What a FETCH from a partition of ``t`` at ``offset`` that waits for nothing says its end is."""
    (answer,) = call(sock, fetch_request("t", partition, offset)).to_dict()["responses"][0]["partitions"]
    assert answer["error_code"] == 0, answer
    return int(answer["high_watermark"])


def test_a_housekeeping_pass_on_an_object_store_lists_the_topics_and_reads_none_unchanged(
    running: dict[str, servers.Server],
) -> None:
    """kop serve's log cleaner passes every 15 s, and its retention and maintenance passes too:
    each listed the topics twice, asked whether the listed directory was a key, and read every
    topic three times, 3N+4 billed requests a pass. A listing, and its keys probed by directory,
    now serve them all, and a topic is read again only once its e-tag changes. The log cleaner read
    each partition of a compacted topic (the offsets topic's 50): they are probed together now."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto = f"s3://{servers.BUCKET}/{space}", running["s3"]
    with Broker(root) as b:
        for topic in ("a", "b", "c"):
            b.create_topic(topic, 2)
        b.create_topic("k", 5, {"cleanup.policy": "compact"})
        b.delete_topic("c")
        b.housekeeping.clean_logs(None)
        since = len(moto.log.read_text())
        b.housekeeping.clean_logs(None)
        requests = servers.requests_since(moto, since, space)
    assert len([r for r in requests if f"prefix={space}/_metadata/{layout.TOPICS}/ " in r]) == 1, requests
    assert len([r for r in requests if f"prefix={space}/_metadata/{layout.MANAGED_LEDGERS}/" in r]) == 1, requests
    assert len(requests) == 3, requests


def test_a_retention_pass_on_an_object_store_reads_only_the_partitions_changed_since_it_last_read_them(
    running: dict[str, servers.Server],
) -> None:
    """A retention pass (every 5 minutes) read each partition's log before applying retention: a
    GET each on an object store, 1,000 partitions 1,000 GETs a pass, though most were as the last
    pass left them. They are probed together now, and only those changed since are read, once."""
    space = f"s{uuid.uuid4().hex[:12]}"
    root, moto, clock = f"s3://{servers.BUCKET}/{space}", running["s3"], ManualClock()
    with Broker(root, clock=clock) as b, Broker(root) as other:
        b.create_topic("t", 6, {"retention.ms": 3_600_000, "file.delete.delay.ms": 0})
        for p in range(6):
            other.produce("t", [Record(b"old")], partition=p)
        b.enforce_retention()
        other.produce("t", [Record(b"new")], partition=2)

        def retention_pass() -> list[str]:
            since = len(moto.log.read_text())
            b.enforce_retention()
            return servers.requests_since(moto, since, f"{space}/_metadata/{layout.MANAGED_LEDGERS}/")

        def read(requests: list[str]) -> list[str]:
            paths = [r.split('"')[1].split()[1] for r in requests if '"GET ' in r and "list-type" not in r]
            return [path.rsplit("/", 1)[-1] for path in paths]

        assert read(retention_pass()) == ["t-partition-2.json"], "an unchanged partition was read"
        clock.advance(2 * 3_600_000)
        requests = retention_pass()
        assert read(requests) == [], "a partition nothing changed since the last pass was read"
        assert len([r for r in requests if '"PUT ' in r]) == 2 * 6, requests  # retention, then the files' purge
        assert [b.list_offsets("t", p, "earliest") for p in range(6)] == [1, 1, 2, 1, 1, 1]


def test_retention_drops_old_ledgers_and_their_files(store: Store) -> None:
    clock = ManualClock(1_800_000_000_000)
    conf = {**store.conf, "managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    b = Broker(store.root, conf, clock=clock)
    b.create_topic("t", 1, {"retention.ms": 3_600_000, "file.delete.delay.ms": 0})
    b.produce("t", _records("old", 3, clock.now_ms()), partition=0)
    old_files = [ledger.file for ledger in b.view("t", 0).ledgers]
    clock.advance(120_000)
    b.produce("t", _records("new", 2, clock.now_ms()), partition=0)
    b.enforce_retention("t")
    assert b.list_offsets("t", 0, "earliest") == 0
    # lowered by another process (kop topics alter), and applied by this one's open log
    store.broker().alter_topic_config("t", [AlterConfigOp("retention.ms", "set", 60_000)])
    b.enforce_retention("t")
    assert b.list_offsets("t", 0, "earliest") == 3
    assert [r.value for r in b.fetch("t", 0, 3)] == [b"new0", b"new1"]
    assert not any(b.fileio.exists(f) for f in old_files), "retention deleted the old ledgers' files"


def test_delete_records_moves_the_log_start_and_drops_the_ledgers_before_it(store: Store) -> None:
    conf = {**store.conf, "managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    b = Broker(store.root, conf)
    b.create_topic("t", 1, {"file.delete.delay.ms": 0})
    for i in range(3):
        b.produce("t", _records(f"r{i}-", 2), partition=0)  # ledgers of 2 records
    files = [ledger.file for ledger in b.view("t", 0).ledgers]
    assert store.broker().delete_records("t", 0, 3) == 3  # from another process
    assert [r.value for r in b.fetch("t", 0, 3)] == [b"r1-1", b"r2-0", b"r2-1"]
    b.enforce_retention("t")  # the trash, past its grace (none)
    assert [b.fileio.exists(f) for f in files] == [False, True, True]
    assert b.list_offsets("t", 0, "earliest") == 3 and not b.verify("t")


def test_compaction_keeps_the_latest_value_per_key(store: Store) -> None:
    b = store.broker(managedLedgerMaxEntriesPerLedger=2)
    b.create_topic("c", 1, {"cleanup.policy": "compact"})
    for round_ in range(3):
        b.produce("c", [Record(key=f"k{i}".encode(), value=f"r{round_}".encode()) for i in range(4)], partition=0)
    end = b.list_offsets("c", 0, "latest")
    b.compact("c")
    got = store.broker().fetch("c", 0, 0, max_records=100)
    assert {r.key: r.value for r in got} == {f"k{i}".encode(): b"r2" for i in range(4)}
    assert [r.offset for r in got] == list(range(end - 4, end)), "offsets are kept"


def test_consumer_groups(store: Store) -> None:
    b = store.broker()
    b.create_topic("t", 2)
    b.produce("t", _records("v", 10))
    b.commit_offsets("g", {("t", 0): 2, ("t", 1): 1})
    b.commit_offsets("g", {("t", 0): 4})
    other = store.broker()
    assert {tp: o.offset for tp, o in other.fetch_offsets("g").items()} == {("t", 0): 4, ("t", 1): 1}
    assert other.list_groups() == ["g"]
    other.delete_offsets("g", [("t", 1)])
    assert {tp: o.offset for tp, o in b.fetch_offsets("g").items()} == {("t", 0): 4}
    b.delete_group("g")
    assert store.broker().list_groups() == []


def test_maintenance_merges_small_ledgers_and_removes_orphans(store: Store) -> None:
    b = store.broker(managedLedgerMaxEntriesPerLedger=1, managedLedgerMergeInPassing=0)
    b.create_topic("t", 1)
    for i in range(12):
        b.produce("t", _records(f"m{i}-", 2), partition=0)
    before = b.fetch("t", 0, 0, max_records=100)
    assert len(b.view("t", 0).ledgers) == 12
    # A writer that died between its upload and its CAS left this behind.
    orphan = b.managed_ledger("t", 0).create_ledger_file()
    orphan.seal([], 0)
    orphan.close()
    assert b.fileio.exists(orphan.path)
    report = b.maintenance(orphan_grace_ms=0)
    assert report.errors == [] and report.ledgers_merged >= 10
    assert orphan.path in report.files_removed and not b.fileio.exists(orphan.path)
    assert len(b.view("t", 0).ledgers) <= 3
    assert store.broker().fetch("t", 0, 0, max_records=100) == before


def test_maintenance_leaves_the_staged_ledgers_of_a_running_job(store: Store) -> None:
    """On an object store a task stages its ledgers where they will stay, in the partition's
    directory, unreferenced until the commit: maintenance must not take them for orphans."""
    b = store.broker()
    b.create_topic("t", 1)
    task_dir = "_staging/q/0/task"
    b.sink_commits.heartbeat(task_dir)  # the task is running
    staged = b.sink_commits.stage("t", 0, task_dir)
    staged.append([build_record_batch([Record(b"v%d" % i) for i in range(3)])])
    ledgers = staged.finish()
    report = b.maintenance(orphan_grace_ms=0)
    assert report.errors == [] and not set(report.files_removed) & {l.file for l in ledgers}
    b.append_staged("t", 0, ledgers, ("spark:q", 0))
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"v0", b"v1", b"v2"]
    # A job that died leaves a ledger nothing will append: once its lease is over, it goes.
    dead = b.sink_commits.stage("t", 0, "_staging/dead/0/task")
    dead.append([build_record_batch([Record(b"lost")])])
    (left,) = dead.finish()
    later = ManualClock(int(time.time() * 1000) + SINK_LEASE_MS + 60_000)
    report = Broker(store.root, store.conf, clock=later).maintenance(orphan_grace_ms=0)
    assert report.errors == [] and left.file in report.files_removed and not b.fileio.exists(left.file)
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"v0", b"v1", b"v2"]


def test_a_driver_that_commits_after_maintenance_took_its_job_for_gone_records_nothing(store: Store) -> None:
    """Maintenance deletes the output of a job whose tasks stopped beating their hearts. A driver
    that was only slow must not then record that output: the record could never be appended, and
    every rerun of the batch would try to complete it and fail again."""
    b = store.broker()
    b.create_topic("t", 1)
    staged = b.sink_commits.stage("t", 0, "_staging/slow/0/task-0")
    staged.append([build_record_batch([Record(b"gone")])])
    ledgers = staged.finish()
    lease_over = int(time.time() * 1000) + SINK_LEASE_MS + 60_000
    later = Broker(store.root, store.conf, clock=ManualClock(lease_over))
    report = later.maintenance(orphan_grace_ms=0)
    assert report.errors == [] and ledgers[0].file in report.files_removed
    with pytest.raises(OrphanRemovedError, match=f"batch 0 of sink writer 'slow'.*{ledgers[0].file}"):
        b.sink_commits.commit("slow", 0, {("t", 0): ledgers}, streaming=True)
    assert b.sink_commits.pending() == []
    # Spark runs the batch again: the new attempt's output lands, and stays.
    rerun = b.sink_commits.stage("t", 0, "_staging/slow/0/task-1")
    rerun.append([build_record_batch([Record(b"again")])])
    b.sink_commits.commit("slow", 0, {("t", 0): rerun.finish()}, streaming=True)
    assert later.maintenance(orphan_grace_ms=0).errors == []
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"again"] and b.verify() == {}
    # The condemnation goes with the writer's record, once transactional.id.expiration.ms is over.
    expiry = b.config["transactional.id.expiration.ms"]
    Broker(store.root, store.conf, clock=ManualClock(lease_over + expiry + 1)).maintenance()
    assert b.store.get(layout.sink_key("slow")).value is None


def test_a_task_still_writing_when_its_job_is_aborted_discards_its_output(store: Store) -> None:
    """Spark aborts a failed batch job before it stops the job's other tasks. One may still be
    writing, where the abort has deleted the job's staging directory, and end after it: its
    output would be left there, as if its job were alive, until maintenance took it for gone."""
    b = store.broker()
    b.create_topic("t", 2)
    conf = {f"kop.{k}": str(v) for k, v in store.conf.items()}
    writer = KopBatchWriter(SinkOptions.parse({"kop.root": store.root, "topic": "t", "batch.size": "64", **conf}))

    def data_files() -> set[str]:
        return {f for f, _ in b.fileio.walk_files("") if not f.startswith(layout.METADATA_DIR)}

    def values(prefix: str, partition: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {"value": [f"{prefix}{i}".encode() for i in range(50)], "partition": pa.array([partition] * 50, pa.int32())}
        )

    before = data_files()
    ended = writer.write(iter([values("a", 0), values("a", 1)]))  # a task that ended before the abort

    def rows_the_driver_aborts_between() -> Iterator[pa.RecordBatch]:
        yield values("b", 0)
        writer.abort([ended, None])  # Spark's driver, while this task still writes
        yield values("c", 1)  # into a ledger it starts after the abort

    with pytest.raises(WriteAbortedError, match=f"sink job {writer.job}: Spark aborted the write while task 0"):
        writer.write(rows_the_driver_aborts_between())
    # On object stores the ended task's ledgers, staged at their final names, wait for maintenance
    # as orphans; nothing of the late task's is left anywhere.
    assert data_files() - before <= {ledger.file for _, _, ledger in ended.staged}
    assert not [f for f in data_files() if f.startswith(layout.STAGING_DIR)]
    if store.name == "local":
        assert not os.path.exists(os.path.join(store.root, layout.STAGING_DIR, writer.job))
    assert [b.list_offsets("t", p, "latest") for p in (0, 1)] == [0, 0]
    # The job's mark goes as a writer's record does, once transactional.id.expiration.ms is over.
    expiry = b.config["transactional.id.expiration.ms"]
    Broker(store.root, store.conf, clock=ManualClock(int(time.time() * 1000) + expiry + 1)).maintenance()
    assert b.store.get(layout.sink_key(writer.job)).value is None


def test_a_late_applier_appends_nothing_once_the_batchs_ledger_was_merged_away(store: Store) -> None:
    """An applier that read a batch job's record before another completed it comes to a partition
    that has forgotten the batch and merged its ledger into a larger one: the ledger's id is gone
    from the partition, and its file, in the trash until ``file.delete.delay.ms``, is not taken again."""
    b = store.broker(managedLedgerMaxEntriesPerLedger=1)  # each produce seals the ledger before it
    b.create_topic("t", 1)
    staged = b.sink_commits.stage("t", 0, "_staging/job/0/task-0")
    staged.append([build_record_batch(_records("s", 3))])
    ledgers = staged.finish()
    b.sink_commits.commit("job", 0, {("t", 0): ledgers}, streaming=False)
    b.produce("t", _records("p", 1))
    b.produce("t", _records("q", 1))
    assert b.maintenance().errors == []
    assert all(l.id != ledgers[0].ledger_id for l in b.managed_ledger("t", 0).view().ledgers)
    late = b.append_staged("t", 0, ledgers, ("spark:job", 0))
    assert late.duplicate
    assert [r.value for r in b.fetch("t", 0, 0)] == [b"s0", b"s1", b"s2", b"p0", b"q0"] and b.verify() == {}
    # Once the trash is emptied, a still later applier fails for want of the file.
    emptied = ManualClock(int(time.time() * 1000) + b.topic_config("t")["file.delete.delay.ms"] + 1)
    later = Broker(store.root, store.conf, clock=emptied)
    merged_away = b.managed_ledger("t", 0).ledger_path(ledgers[0].ledger_id)
    assert later.maintenance().errors == [] and not b.fileio.exists(merged_away)
    with pytest.raises(StorageError, match=f"{ledgers[0].ledger_id:016x}"):
        later.append_staged("t", 0, ledgers, ("spark:job", 0))
    assert b.list_offsets("t", 0, "latest") == 5 and b.verify() == {}


def test_a_large_staged_output_rolls_into_ledgers_of_bounded_size(store: Store) -> None:
    # Object stores build each ledger in memory before writing it: a task's output must not be one ledger.
    b = store.broker(managedLedgerMaxSizePerLedgerMbytes=1, wholeLedgerMaxSizeMbytes=1)
    b.create_topic("t", 1)
    values = [f"{i:06}".encode() * 4_000 for i in range(150)]  # 24 KB each, 3.6 MB in all
    staged = b.sink_commits.stage("t", 0, "_staging/q/0/task")
    for start in range(0, len(values), 5):
        staged.append([build_record_batch([Record(v)]) for v in values[start : start + 5]])
    ledgers = staged.finish()
    assert len(ledgers) >= 3 and all(l.length < (1 << 20) + 5 * 25_000 for l in ledgers)
    b.append_staged("t", 0, ledgers, ("spark:q", 0))
    got = b.fetch("t", 0, 0, max_records=1_000, max_bytes=1 << 30)
    assert [(r.offset, r.value) for r in got] == list(enumerate(values))
    # A failed attempt takes every ledger it sealed with it.
    failed = b.sink_commits.stage("t", 0, "_staging/q/1/task")
    for start in range(0, len(values), 5):
        failed.append([build_record_batch([Record(v)]) for v in values[start : start + 5]])
    before = {f for f, _ in b.fileio.walk_files("")}
    failed.discard()
    gone = before - {f for f, _ in b.fileio.walk_files("")}
    assert len(gone) >= 3 and all(f.endswith(".ledger") for f in gone)
    assert b.list_offsets("t", 0, "latest") == len(values) and b.verify() == {}


def test_a_kafka_transaction_goes_on_through_a_server_restart(store: Store) -> None:
    """Each transactional produce is durable before it is answered (synced, or its own ledger where
    ledgers are written whole), and a restarted server takes the transaction up, a retry of the
    last produce included, and commits it whole."""
    b = store.broker()
    b.create_topic("out", 1)

    def batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
        records = [Record(v, timestamp_ms=int(time.time() * 1000)) for v in values]
        return build_record_batch(
            records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
        )

    first = TransactionCoordinator(b)
    pid, epoch = first.init_producer_id("tx", 60_000)
    first.add_partitions("tx", pid, epoch, [("out", 0)])
    first.produce("tx", "out", 0, batch(pid, epoch, 0, b"a", b"b"))
    first.produce("tx", "out", 0, batch(pid, epoch, 2, b"c"))
    restarted = TransactionCoordinator(store.broker())
    restarted.produce("tx", "out", 0, batch(pid, epoch, 0, b"a", b"b"))  # retries: their answers were lost
    restarted.produce("tx", "out", 0, batch(pid, epoch, 2, b"c"))
    restarted.produce("tx", "out", 0, batch(pid, epoch, 3, b"d"))
    restarted.end("tx", pid, epoch, commit=True)
    assert [r.value for r in b.fetch("out", 0, 0, max_records=10)] == [b"a", b"b", b"c", b"d"]
    assert b.fileio.walk_files(layout.STAGING_DIR) == [] and b.verify() == {}


def test_two_kop_serve_over_the_store_serve_a_group_from_one_of_them(store: Store) -> None:
    """The group's live entry, written by CAS on every backend, decides which server has it: the
    other refuses its clients, naming the first, until it is free."""
    conf = [f"{k}={v}" for k, v in store.conf.items()]
    with Broker(store.root, store.conf) as b:
        b.create_topic("grouped", 1)
    with KopServer(store.root, conf) as first, KopServer(store.root, conf) as second:
        consumer = Consumer({"bootstrap.servers": first.bootstrap, "group.id": "g", "client.id": "c"})
        consumer.subscribe(["grouped"])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer was never assigned its partition"
            consumer.poll(0.1)
        with connect(second) as sock:
            found = kio_call(sock, request_class(10, 3)(key="g", key_type=0))
        assert found.error_code == ErrorCode.coordinator_not_available
        assert found.error_message == f"group 'g' is served by the kop serve at PLAINTEXT://{first.bootstrap}"
        consumer.close()  # leaves: the group is free once the first has published so
        deadline = time.monotonic() + 60
        with connect(second) as sock:
            while kio_call(sock, request_class(10, 3)(key="g", key_type=0)).error_code != ErrorCode.none:
                assert time.monotonic() < deadline, "the group was never free for the second server"


def test_kafka_clients_produce_transact_consume_and_commit_through_kop_serve(store: Store) -> None:
    """What applications feeding a store run: ``kop serve`` on it, librdkafka's idempotent
    producer, a transactional one, and a consumer group that subscribes and commits."""
    with KopServer(store.root, [f"{k}={v}" for k, v in store.conf.items()]) as server:
        client = {"bootstrap.servers": server.bootstrap}
        admin = AdminClient(client)
        for f in admin.create_topics([NewTopic("c", 3, 1)]).values():
            f.result(30)
        acked: list[tuple[int, int, bytes]] = []
        producer = Producer({**client, "enable.idempotence": True, "linger.ms": 5})
        for i in range(300):
            producer.produce("c", key=b"k%d" % (i % 7), value=b"v%d" % i, on_delivery=_acked_into(acked))
        assert producer.flush(60) == 0
        tx = Producer({**client, "transactional.id": "tx"})
        tx.init_transactions(30)
        tx.begin_transaction()
        for i in range(20):
            tx.produce("c", value=b"t%d" % i, partition=i % 3)
        tx.commit_transaction(30)
        consumer = Consumer({**client, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["c"])
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < 320 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.value()))
        consumer.commit(asynchronous=False)
        consumer.close()
    assert sorted(v for _, _, v in got) == sorted([b"v%d" % i for i in range(300)] + [b"t%d" % i for i in range(20)])
    assert set(acked) <= set(got), "the idempotent producer's records where it was told they are"
    with store.broker() as b:
        ends = {("c", p): b.list_offsets("c", p, "latest") for p in range(3)}
        assert {tp: o.offset for tp, o in b.fetch_offsets("g").items()} == ends
    for (_, p), end in ends.items():  # continuous: a transaction's records are appended at its commit
        assert sorted(o for q, o, _ in got if q == p) == list(range(end))


def test_a_fetch_parked_in_kop_serve_wakes_when_another_process_appends(store: Store) -> None:
    """A parked fetch looks again for what other processes append: by a listing on an object
    store, and on ZooKeeper and etcd by watches, which ask nothing until told."""
    store.broker().create_topic("p", 1)
    with KopServer(store.root, [f"{k}={v}" for k, v in store.conf.items()]) as server:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "p", "fetch.wait.max.ms": 30_000})
        consumer.assign([TopicPartition("p", 0, 0)])
        assert consumer.poll(1) is None  # parked at the log end
        value = uuid.uuid4().bytes
        with store.broker() as b:
            b.produce("p", [Record(value=value)], 0)
        started = time.monotonic()
        m = consumer.poll(20)
        waited = time.monotonic() - started
        consumer.close()
    assert m is not None and m.value() == value
    # Well within the 5 s a kept view of a partition stands at most on ZooKeeper and etcd
    # (PROBED_MAX_AGE_S), which a look that missed the change would wait out; on an object store
    # it would wait out the whole 30 s.
    assert waited < 3, f"the 30 s fetch wait was cut short only after {waited:.1f} s"


def _acked_into(acked: list[tuple[int, int, bytes]]) -> Callable[[Any, Any], None]:
    def delivered(error: Any, m: Any) -> None:
        assert error is None, error
        acked.append((m.partition(), m.offset(), m.value()))

    return delivered


def test_cli_commands(store: Store, tmp_path: Path) -> None:
    def kop(*args: str, stdin: str = "") -> str:
        conf = [f"--conf={k}={v}" for k, v in store.conf.items()]
        out = subprocess.run(
            [PYTHON, "-m", "kop_spark.cli", "--root", store.root, *conf, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=python_subprocess_env(),
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    kop("topics", "create", "t", "--partitions", "2")
    assert "t" in kop("topics", "list").split()
    kop("produce", "t", "--key-separator", ":", stdin="a:1\nb:2\nc:3\n")
    consumed = kop("consume", "t", "--from-beginning", "--group", "g", "--timeout-ms", "0")
    assert sorted(consumed.split()) == ["1", "2", "3"]
    assert "g" in kop("groups", "list").split()
    assert "t" in kop("groups", "describe", "--group", "g")
    kop("maintenance")
    kop("verify")  # exits 1 on any damage
    ledger = store.broker().view("t", 0).ledgers[0]
    dumped = kop("dump-ledger", f"{store.root}/{ledger.file}")
    assert "ManagedLedger: managed-ledgers/" in dumped and f"ConfirmedLength: {ledger.length}" in dumped


def test_disk_space_is_the_local_filesystems_and_unknown_on_an_object_store(store: Store) -> None:
    with store.broker() as b:
        usage = b.fileio.disk_usage()  # what DescribeLogDirs tells (KIP-827)
    if store.name == "local":
        assert (
            usage is not None
            and usage[0] == shutil.disk_usage(os.path.dirname(store.root)).total
            and 0 < usage[1] < usage[0]
        )
    else:
        assert usage is None


@pytest.mark.parametrize("scheme", ["s3", "gs"])
@pytest.mark.parametrize("metadata", ["bucket", "etcd"])
def test_a_missing_bucket_is_named_before_anything_is_written(
    scheme: str, metadata: str, running: dict[str, servers.Server]
) -> None:
    conf: dict[str, Any] = {"metadataStoreOperationTimeoutSeconds": 5}
    if metadata == "etcd":  # where a topic could be recorded before its first ledger failed
        conf["metadataStoreUrl"] = f"etcd:http://127.0.0.1:{running['etcd'].port}/{uuid.uuid4().hex[:10]}"
    b = Broker(f"{scheme}://no-such-bucket/x", conf)
    with pytest.raises(StorageError, match=f"{scheme}://no-such-bucket"):
        b.create_topic("t", 1)
    if metadata == "etcd":
        assert b.store.list_keys("") == []


def test_wrong_credentials_are_named(running: dict[str, servers.Server], monkeypatch: pytest.MonkeyPatch) -> None:
    b = Broker(
        f"az://{servers.BUCKET}/x", {"azure_storage_account_key": "d3Jvbmc=", "metadataStoreOperationTimeoutSeconds": 5}
    )
    with pytest.raises(StorageError, match=f"az://{servers.BUCKET}/x"):
        b.create_topic("t", 1)


def test_a_malformed_service_account_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", '{"client_email": ""}')
    with pytest.raises(ConfigError, match=r"^cannot open gs://b/x: .*service account.*private_key") as raised:
        Broker("gs://b/x").create_topic("t", 1)
    assert "\n" not in str(raised.value)  # obstore's debug dump of the error is left out


def test_an_unknown_scheme_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises((ConfigError, StorageError), match="ftp://host/x"):
        Broker("ftp://host/x").create_topic("t", 1)


def _refuse(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{name} called on a store that takes whole files only")

    return refused


def test_a_whole_file_mount_is_written_whole_with_metadata_in_etcd(
    running: dict[str, servers.Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local directory standing in for a UC Volume or /dbfs: ledgers are written whole, once,
    in sequence; nothing appends, truncates, renames, links or locks there."""
    import fcntl
    import os

    real_open = os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND

    def open_for_reading_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & write_flags:
            raise AssertionError(f"os.open({path}, {flags:#o}) on a store that takes whole files only")
        return real_open(path, flags, *args, **kwargs)

    for name in ("link", "ftruncate", "truncate", "pwrite", "pwritev", "rename", "replace"):
        monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
    monkeypatch.setattr(fcntl, "flock", _refuse("fcntl.flock"))
    monkeypatch.setattr(os, "open", open_for_reading_only)
    etcd = f"etcd:http://127.0.0.1:{running['etcd'].port}/{uuid.uuid4().hex[:10]}"
    conf = {"wholeFileWrites": True, "metadataStoreUrl": etcd, "managedLedgerMaxEntriesPerLedger": 2}
    root = str(tmp_path / "volume")
    b = Broker(root, conf)
    b.create_topic("t", 1)
    for i in range(6):
        b.produce("t", _records(f"w{i}-", 2), partition=0)
    b.commit_offsets("g", {("t", 0): 5})
    assert b.maintenance(orphan_grace_ms=0).errors == []
    got = Broker(root, conf).fetch("t", 0, 0, max_records=100)
    assert [r.offset for r in got] == list(range(12))
    assert Broker(root, conf).fetch_offsets("g")[("t", 0)].offset == 5
    assert not (tmp_path / "volume" / "_metadata").exists()


def test_databricks_mounts_take_whole_files_by_themselves() -> None:
    assert takes_whole_files_only("/Volumes/main/default/vol/kop") and takes_whole_files_only("/dbfs/mnt/kop")
    assert takes_whole_files_only("/data/kop", whole_files=True)
    assert not takes_whole_files_only("/data/kop") and not takes_whole_files_only("/Volumesque/kop")
    assert not takes_whole_files_only("s3://bucket/Volumes/x", whole_files=True)


def test_a_whole_file_root_without_network_metadata_is_refused_at_the_first_write(tmp_path: Path) -> None:
    root = str(tmp_path / "vol")
    b = Broker(root, {"wholeFileWrites": True})
    assert b.list_topics() == []
    with pytest.raises(StorageError, match=r"metadataStoreUrl.*cloud storage URI"):
        b.create_topic("t", 1)
    assert not os.path.exists(root), "refused before anything was written"


def test_a_hung_object_store_is_an_error_and_nothing_acknowledged_is_lost(running: dict[str, servers.Server]) -> None:
    """The S3 server stops answering (SIGSTOP) in the middle of a run of produce calls: a call fails
    within bounded time naming the store, and once it answers again, writing goes on at the next
    offset with every acknowledged record in place."""
    root = f"s3://{servers.BUCKET}/hung-{uuid.uuid4().hex[:8]}"
    conf = {"metadataStoreOperationTimeoutSeconds": 2}
    b = Broker(root, conf)
    b.create_topic("t", 1)
    acked = [b.produce("t", [Record(value=f"a{i}".encode())], partition=0) for i in range(5)]
    moto = running["s3"].process
    assert moto is not None
    os.kill(moto.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StorageError, match=servers.BUCKET):
            b.produce("t", [Record(value=b"lost")], partition=0)
        assert time.monotonic() - started < 60  # bounded (loosely): not a hang
    finally:
        os.kill(moto.pid, signal.SIGCONT)
    after = Broker(root, conf)
    end = after.list_offsets("t", 0, "latest")
    assert after.produce("t", [Record(value=b"after")], partition=0) == [(0, end, 1)]
    values = [r.value for r in after.fetch("t", 0, 0, max_records=100)]
    assert values[:5] == [f"a{i}".encode() for i in range(5)] and [a[0][1] for a in acked] == list(range(5))
    assert values[-1] == b"after" and set(values[5:-1]) <= {b"lost"}, "the failed call may have landed, once"


def test_an_abfss_uri_names_the_container_and_account(running: dict[str, servers.Server]) -> None:
    """Databricks' form of an ADLS location reaches the same container as ``az://``."""
    space = f"abfss-{uuid.uuid4().hex[:8]}"
    b = Broker(f"abfss://{servers.BUCKET}@{servers.AZURITE_ACCOUNT}.dfs.core.windows.net/{space}")
    b.create_topic("t", 1)
    b.produce("t", [Record(value=b"via abfss")], partition=0)
    assert [r.value for r in Broker(f"az://{servers.BUCKET}/{space}").fetch("t", 0, 0)] == [b"via abfss"]
