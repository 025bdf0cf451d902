"""Benchmark 7: stores beyond one machine, on the same servers the tests start on loopback (moto's
S3 server, Azurite, etcd, ZooKeeper), each ratio against a peer measured in the same run:

- compare-and-set operations per second of each metadata backend (one key, read and updated in
  turn, as every append does), against the default backend, versioned files on the local disk;
- looks a second of a parked fetch of 100 partitions where nothing came (each partition's metadata
  probed, in one request where the backend can), against the same on files;
- produce on an ``s3://`` root (records/s of calls of 100 records), against a plain PUT of the same
  bytes to the same endpoint, the physical limit of that endpoint for writes of that size: one call
  at a time (without grouping: each call is a sealed ledger and a CAS of the partition's metadata in
  the bucket), and from 8 threads at once (the calls that arrive while one is written are grouped
  into one ledger and one CAS);
- reading a partition back through the Broker, against a plain GET of the same objects;
- a fetch of 100 partitions each with a new record, a Spark stream's look at their offsets, and a
  Spark task's read of their new records (and of one partition's 15 new ledgers), on an S3 root
  behind a proxy that holds each request 20 ms (S3's first-byte latency for small objects; moto on
  loopback answers in a millisecond): the partitions, or ledgers, read at once, against the same
  code reading them in turn;
- a Spark task's write of records to 100 partitions, and a transactional produce to 100 partitions,
  behind the same proxy: the partitions' ledgers written at once, against the same code writing them
  in turn;
- idle consumers of a topic, and idle members of a group each fetching its own partitions, their
  FETCH requests parked 500 ms and looking again as the server's do: the LIST requests a second when
  looks share a listing taken within their wait (or ``kafkaMinFetchPeriodMs``), against each taking
  its own;
- the requests a record costs a producer and a group member consuming through ``kop serve``,
  against the 3 each record needs (its upload, its CAS, its read).

    python bench/object_store.py [--ops 200] [--produces 200]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore
import pyarrow as pa
from confluent_kafka import Consumer, Producer
from pyspark.sql.types import BinaryType, StructField, StructType

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kop_spark import Broker, Record, layout
from kop_spark.broker import PartitionFetch
from kop_spark.broker.partition_views import PartitionViews
from kop_spark.kafka.handlers.fetch import next_look_in
from kop_spark.kafka.transaction_coordinator import TransactionCoordinator
from kop_spark.record import build_record_batch
from kop_spark.spark.batch_reader import KopBatchReader
from kop_spark.spark.options import SourceOptions
from kop_spark.spark.sink import KopBatchWriter, prepare
from kop_spark.storage.metadata import open_metadata_store
from kop_spark.storage.metadata_store import MetadataStore, update
from kop_spark.storage.object_fileio import ObjectFileIO
from kop_spark.storage.object_store import open_store, parse_location
from tests import servers
from tests.in_flight_proxy import InFlightProxy
from tests.kop_server import KopServer

THREADS = 8
FETCHED_PARTITIONS = 100
LATENCY_S = 0.02


def per_second(fn: Callable[[int], object], n: int) -> float:
    fn(-1)  # connections and sessions are made before the clock starts
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t)


def cas_rates(running: dict[str, servers.Server], tmp: Path, n: int) -> list[tuple[str, float, float, str]]:
    space = uuid.uuid4().hex[:8]
    urls = {
        "files (local disk, fsync)": str(tmp / "metadata"),
        "ZooKeeper": f"zk:127.0.0.1:{running['zookeeper'].port}/{space}",
        "etcd": f"etcd:http://127.0.0.1:{running['etcd'].port}/{space}",
        "S3 (moto)": f"s3://{servers.BUCKET}/{space}/_metadata",
        "Azure (Azurite)": f"az://{servers.BUCKET}/{space}/_metadata",
    }
    value = {"log_start_offset": 0, "next_offset": 0, "ledgers": [], "producers": {}}
    rates = {}
    for name, url in urls.items():
        store = open_metadata_store(url)
        store.create("k", value)
        rates[name] = per_second(functools.partial(_bump, store), n)
    looks = {name: look_rate(tmp / f"looks-{i}", url, n) for i, (name, url) in enumerate(urls.items())}
    files, files_looks = rates["files (local disk, fsync)"], looks["files (local disk, fsync)"]
    return [
        (
            name,
            rate,
            rate / files,
            f"{looks[name]:,.0f} | {looks[name] / files_looks:.2f}x",
        )
        for name, rate in rates.items()
    ]


def _bump(store: MetadataStore, i: int) -> None:
    update(store, "k", lambda v: {**(v or {}), "next_offset": i})


def look_rate(root: Path, url: str, n: int) -> float:
    """Looks a second of a parked fetch of 100 partitions where nothing came: every partition's
    metadata probed, none read again."""
    with Broker(str(root), {"metadataStoreUrl": url + "-looks"}) as b:
        b.create_topic("t", FETCHED_PARTITIONS)
        wanted = [PartitionFetch("t", p, 0, 1 << 20) for p in range(FETCHED_PARTITIONS)]
        time.sleep(1.5)  # the file backend's probe trusts a key's directory times a second after its last write
        return per_second(lambda i: b.fetch_partitions(wanted, 1 << 20), n)


def produce_rates(n: int) -> list[tuple[str, float, float]]:
    root = f"s3://{servers.BUCKET}/bench-{uuid.uuid4().hex[:8]}"
    b = Broker(root, {"managedLedgerMergeInPassing": 0})
    b.create_topic("t", 1)
    batch = [Record(key=os.urandom(16), value=os.urandom(100)) for _ in range(100)]
    produce = per_second(lambda i: b.produce("t", batch, partition=0), n)
    single_call_ledgers = b.view("t", 0).ledgers
    ledger = single_call_ledgers[-1]
    data = b.fileio.read_at(ledger.file, 0, ledger.length)
    with ThreadPoolExecutor(THREADS) as pool:

        def together(i: int) -> None:
            for f in [pool.submit(b.produce, "t", batch, partition=0) for _ in range(THREADS)]:
                f.result()

        grouped = per_second(together, max(n // THREADS, 1)) * THREADS
    store = open_store(parse_location(root), {}, 30)
    put = per_second(lambda i: obstore.put(store, f"plain/{i}-{uuid.uuid4().hex}", data), n)
    files = [ledger.file for ledger in single_call_ledgers]
    fetch = per_second(lambda i: b.fetch("t", 0, max(i, 0) * 100, max_records=100), min(n, len(files)))
    get = per_second(lambda i: bytes(obstore.get(store, files[max(i, 0)]).bytes()), min(n, len(files)))
    return [
        ("produce 100 records per call, one call at a time", produce * 100, produce / put),
        (f"produce 100 records per call, {THREADS} threads at once (grouped)", grouped * 100, grouped / put),
        ("fetch 100 records (one ledger)", fetch * 100, fetch / get),
    ]


def changed_reads(s3_port: int, rounds: int = 3) -> list[tuple[str, float, float]]:
    """Milliseconds, the best of ``rounds``, of a fetch of 100 partitions each with a new record
    (its metadata and a small ledger to read), of a look at their offsets after new records, and
    of a Spark task's read of new records, read at once and in turn."""
    root = f"s3://{servers.BUCKET}/bench-{uuid.uuid4().hex[:8]}"
    tps = [("t", p) for p in range(FETCHED_PARTITIONS)]
    best: dict[tuple[str, bool], float] = {}

    def timed(what: tuple[str, bool], fn: Callable[[], object]) -> None:
        t = time.perf_counter()
        fn()
        best[what] = min(best.get(what, float("inf")), (time.perf_counter() - t) * 1000)

    with (
        Broker(root, {"managedLedgerMergeInPassing": 0}) as writer,
        InFlightProxy(s3_port, latency_s=LATENCY_S) as proxy,
    ):
        writer.create_topic("t", FETCHED_PARTITIONS)

        def append_to(partitions: list[int]) -> None:
            for p in partitions:
                writer.produce("t", [Record(value=os.urandom(100))], partition=p)

        for at_once in (True, False):
            with Broker(root, {"aws_endpoint_url": proxy.url}) as b, _in_turn("read_parallelism", not at_once):
                if not at_once:
                    b.fileio.read_parallelism = b.store.read_parallelism = 1
                views = PartitionViews(b.admin, b.store)
                for _ in range(rounds):
                    ends = {tp: v.log_end_offset for tp, v in views.existing(tps).items()}
                    append_to([p for _, p in tps])
                    wanted = [PartitionFetch(*tp, ends[tp], 1 << 20) for tp in tps]
                    timed(("fetch", at_once), functools.partial(b.fetch_partitions, wanted, 50 << 20))
                    timed(("task", at_once), _task_read(root, proxy.url, ends))
                    ends = {tp: v.log_end_offset for tp, v in views.existing(tps).items()}
                    append_to([0] * 15)
                    timed(("ledgers", at_once), _task_read(root, proxy.url, {("t", 0): ends["t", 0]}))
                    append_to([p for _, p in tps])
                    timed(("look", at_once), functools.partial(views.existing, tps))
    each = f"{FETCHED_PARTITIONS} partitions, each with a new record"
    return [
        (f"a fetch of {each}", best["fetch", True], best["fetch", False]),
        (f"a Spark stream's look at the offsets of {each}", best["look", True], best["look", False]),
        (f"a Spark task's read of {each} (maxPartitions 1)", best["task", True], best["task", False]),
        ("a Spark task's read of one partition's 15 new ledgers", best["ledgers", True], best["ledgers", False]),
    ]


def idle_looks(s3: servers.Server, seconds: float = 5.0) -> list[tuple[str, float, float]]:
    """LIST requests a second of idle consumers of a topic of 100 partitions, each sending FETCH
    requests parked up to 500 ms (librdkafka's ``fetch.wait.max.ms``) that look again as the
    server's do, through a proxy holding each request 20 ms: looks that share a listing taken
    within their wait, against each taking its own. A request's first look lists, unless
    ``kafkaMinFetchPeriodMs`` lets it take one that recent. Consumers of the whole topic, then the
    members of a group, each fetching its own quarter of the partitions."""
    root = f"s3://{servers.BUCKET}/bench-{uuid.uuid4().hex[:8]}"
    Broker(root).create_topic("t", FETCHED_PARTITIONS)
    everything = [PartitionFetch("t", p, 0, 1 << 20) for p in range(FETCHED_PARTITIONS)]
    quarter = FETCHED_PARTITIONS // 4
    quarters = [everything[i * quarter : (i + 1) * quarter] for i in range(4)]  # as the range assignor gives
    each = f"{FETCHED_PARTITIONS} partitions"
    kinds = [
        (f"8 idle consumers of {each}", [everything] * 8, 0.0),
        (f"4 idle members of a group of {each}, a quarter each", quarters, 0.0),
        ("the same, kafkaMinFetchPeriodMs=1000", quarters, 1.0),
    ]
    rows = []
    with InFlightProxy(s3.port, latency_s=LATENCY_S) as proxy:
        for what, wanted, period_s in kinds:
            rates = {}
            for share in (True, False):
                with Broker(root, {"aws_endpoint_url": proxy.url}) as b:
                    b.fetch_partitions(everything, 50 << 20)  # the partitions' logs opened
                    since, until = len(s3.log.read_text()), time.monotonic() + seconds
                    with ThreadPoolExecutor(len(wanted)) as pool:
                        looking = [pool.submit(_idle_consumer, b, w, share, period_s, until) for w in wanted]
                        for f in looking:
                            f.result()
                    listings = [r for r in servers.requests_since(s3, since, '"GET ') if "list-type=2" in r]
                    rates[share] = len(listings) / seconds
            rows.append((f"LIST requests a second of {what}", rates[True], rates[False]))
    return rows


def records_flowing(s3: servers.Server, seconds: float = 15.0) -> list[tuple[str, float, float, float]]:
    """Requests a record of a producer sending 10 records a second to a topic of 4 partitions
    through ``kop serve`` on the S3 root, and a member of a group consuming them there, against
    the 3 each record needs (its upload, its CAS, its read), with ``kafkaMinFetchPeriodMs`` 0 and
    1000; and of those, the LISTs and the reads of partitions' metadata."""
    rows = []
    for period_ms in (0, 1000):
        root = f"s3://{servers.BUCKET}/bench-{uuid.uuid4().hex[:8]}"
        Broker(root).create_topic("t", 4)
        with KopServer(root, [f"kafkaMinFetchPeriodMs={period_ms}"]) as server:
            consumer = Consumer(
                {"bootstrap.servers": server.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
            )
            consumer.subscribe(["t"])
            producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
            consumed = [0]
            stop = threading.Event()
            flowing = threading.Thread(target=_flow, args=(producer, consumer, consumed, stop))
            flowing.start()
            time.sleep(16)  # the group formed, the consumer caught up, the log cleaner's first pass made
            since, before = len(s3.log.read_text()), consumed[0]
            time.sleep(seconds)
            requests, records = servers.requests_since(s3, since, root.rsplit("/", 1)[-1]), consumed[0] - before
            stop.set()
            flowing.join()
            consumer.close()
        listed = [r for r in requests if "list-type=2" in r]
        metadata = [r for r in requests if '"GET ' in r and f"/{layout.MANAGED_LEDGERS}/" in r and r not in listed]
        what = f"a record produced and consumed, kafkaMinFetchPeriodMs={period_ms}"
        rows.append((what, len(requests) / records, len(listed) / records, len(metadata) / records))
    return rows


def _flow(producer: Producer, consumer: Consumer, consumed: list[int], stop: threading.Event) -> None:
    """Produce a keyed record every 100 ms and consume what comes, until ``stop``."""
    i = 0
    while not stop.is_set():
        producer.produce("t", key=b"k%d" % i, value=b"x" * 100)
        producer.poll(0)
        i += 1
        end = time.monotonic() + 0.1
        while (left := end - time.monotonic()) > 0:
            m = consumer.poll(left)
            if m is not None and m.error() is None:
                consumed[0] += 1
    producer.flush(30)


def _idle_consumer(b: Broker, wanted: list[PartitionFetch], share: bool, period_s: float, until: float) -> None:
    """FETCH requests parked 500 ms each until ``until``, looking as the FETCH handler does."""
    while time.monotonic() < until:
        deadline, within_s = min(until, time.monotonic() + 0.5), period_s if share else 0.0
        while True:
            started = time.monotonic()
            b.fetch_partitions(wanted, 50 << 20, within_s)
            wait_s, left = next_look_in(time.monotonic() - started), deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, wait_s))
            within_s = max(within_s, wait_s) if share else 0.0


def changed_writes(s3_port: int, rounds: int = 3) -> list[tuple[str, float, float]]:
    """Milliseconds, the best of ``rounds``, of a Spark task's write of records to 100 partitions
    and of a transactional produce of a record to each of 100 partitions, their ledgers written at
    once and in turn."""
    root = f"s3://{servers.BUCKET}/bench-{uuid.uuid4().hex[:8]}"
    best: dict[tuple[str, bool], float] = {}
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    keys = [b"k%d" % i for i in range(10 * FETCHED_PARTITIONS)]
    rows = pa.RecordBatch.from_pydict(
        {"key": keys, "value": keys}, pa.schema([("key", pa.binary()), ("value", pa.binary())])
    )
    with InFlightProxy(s3_port, latency_s=LATENCY_S) as proxy:
        Broker(root).create_topic("t", FETCHED_PARTITIONS)
        sink = prepare({"kop.root": root, "topic": "t", "kop.aws_endpoint_url": proxy.url}, schema)
        for at_once in (True, False):
            with Broker(root, {"aws_endpoint_url": proxy.url}) as b, _in_turn("write_parallelism", not at_once):
                coordinator = TransactionCoordinator(b)
                for i in range(rounds):
                    t = time.perf_counter()
                    KopBatchWriter(sink).write(iter([rows]))
                    best["task", at_once] = min(best.get(("task", at_once), 1e9), (time.perf_counter() - t) * 1000)
                    tid = f"tx-{at_once}-{i}"
                    pid, epoch = coordinator.init_producer_id(tid, 60_000)
                    coordinator.add_partitions(tid, pid, epoch, [("t", p) for p in range(FETCHED_PARTITIONS)])
                    batch = build_record_batch(
                        [Record(b"x")], producer_id=pid, producer_epoch=epoch, is_transactional=True
                    )
                    t = time.perf_counter()
                    coordinator.produce_each(tid, [("t", p, batch) for p in range(FETCHED_PARTITIONS)])
                    best["txn", at_once] = min(best.get(("txn", at_once), 1e9), (time.perf_counter() - t) * 1000)
                    coordinator.end(tid, pid, epoch, commit=False)
    return [
        (
            f"a Spark task's write of records to {FETCHED_PARTITIONS} partitions",
            best["task", True],
            best["task", False],
        ),
        (f"a transactional produce to {FETCHED_PARTITIONS} partitions", best["txn", True], best["txn", False]),
    ]


@contextlib.contextmanager
def _in_turn(parallelism: str, yes: bool) -> Iterator[None]:
    """Files read, or written, one at a time, as a store serving one at a time has them; set on
    the class, for the Brokers a Spark task makes."""
    kept = getattr(ObjectFileIO, parallelism)
    setattr(ObjectFileIO, parallelism, 1 if yes else kept)
    try:
        yield
    finally:
        setattr(ObjectFileIO, parallelism, kept)


def _task_read(root: str, url: str, starts: dict[tuple[str, int], int]) -> Callable[[], object]:
    """One Spark task's read of the partitions in ``starts`` from there to their ends, planned now."""
    starting = {"t": {str(p): start for (_, p), start in starts.items()}}
    options = {"kop.root": root, "kop.aws_endpoint_url": url, "assign": json.dumps({"t": sorted(p for _, p in starts)})}
    options |= {"startingOffsets": json.dumps(starting), "maxPartitions": "1"}
    reader = KopBatchReader(SourceOptions.parse(options, streaming=False))
    (task,) = reader.partitions()
    return lambda: sum(batch.num_rows for batch in reader.read(task))


def run(ops: int = 200, produces: int = 200) -> tuple[list, list, list, list, list, list]:
    with tempfile.TemporaryDirectory() as tmp:
        started = servers.start_all(Path(tmp) / "servers")
        running = next(started)
        try:
            port = running["s3"].port
            return (
                cas_rates(running, Path(tmp), ops),
                produce_rates(produces),
                changed_reads(port),
                changed_writes(port),
                idle_looks(running["s3"]),
                records_flowing(running["s3"]),
            )
        finally:
            started.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--produces", type=int, default=200)
    args = ap.parse_args()
    cas, produce, changed, written, idle, flowing = run(args.ops, args.produces)
    print(
        f"| metadata backend | CAS/s | speed vs files on the local disk | looks/s of a fetch of "
        f"{FETCHED_PARTITIONS} partitions, nothing new | speed vs files |"
    )
    for name, rate, ratio, looks in cas:
        print(f"| {name} | {rate:,.0f} | {ratio:.2f}x | {looks} |")
    print("| S3 root | records/s | speed vs plain PUT/GET of the same bytes |")
    for name, rate, ratio in produce:
        print(f"| {name} | {rate:,.0f} | {ratio:.2f}x |")
    print(f"| S3 root, {LATENCY_S * 1000:.0f} ms a request | ms, read at once | ms, read in turn | speed vs in turn |")
    for name, at_once, in_turn in changed:
        print(f"| {name} | {at_once:,.0f} | {in_turn:,.0f} | {in_turn / at_once:.2f}x |")
    print(f"| S3 root, {LATENCY_S * 1000:.0f} ms a request | ms, written at once | ms, in turn | speed vs in turn |")
    for name, at_once, in_turn in written:
        print(f"| {name} | {at_once:,.0f} | {in_turn:,.0f} | {in_turn / at_once:.2f}x |")
    print(f"| S3 root, {LATENCY_S * 1000:.0f} ms a request | looks sharing a listing | each its own | fewer |")
    for name, shared, own in idle:
        print(f"| {name} | {shared:,.1f} | {own:,.1f} | {own / shared:.2f}x |")
    print(
        "| S3 root, through kop serve | requests a record | of them LISTs | reads of partition metadata | times the 3 a record needs |"
    )
    for name, per_record, lists, reads in flowing:
        print(f"| {name} | {per_record:.2f} | {lists:.2f} | {reads:.2f} | {per_record / 3:.2f}x |")


if __name__ == "__main__":
    main()
