"""A soak of ``kop serve``: an idempotent librdkafka producer writes keyed records and tombstones
to a compacted topic while the cleaner, merges and retention run as often as they can; every few
seconds the producer pauses and a consumer reads each partition whole. What it read must be, for
every key, the latest value acknowledged at its offset (or nothing, for a tombstone), and only
records acknowledged at the offsets read. It found a producer refused as out of sequence on stale
metadata, and ledgers fenced by their own writer (see ``test_storage_faults``)."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from . import servers
from .kop_server import KopServer

PARTITIONS = 3
KEYS = 5000  # most keys' latest values lie in compacted ledgers, thinned to a few records a batch
# The default run soaks each root briefly (a first compaction racing the producer is in it: the run
# that found a producer refused on a log state gone back took 6 s); the slow run for longer.
SOAKS = [pytest.param(15, id="15s"), pytest.param(120, id="120s", marks=pytest.mark.slow)]
_CONF = [
    "log.cleaner.backoff.ms=300",
    "log.retention.check.interval.ms=1000",
    "managedLedgerMaxEntriesPerLedger=20",
    "maintenanceIntervalSeconds=5",
]
_TOPIC = {
    "cleanup.policy": "compact",
    "max.compaction.lag.ms": "3000",
    "min.cleanable.dirty.ratio": "0.2",
    "delete.retention.ms": "2000",
    "segment.ms": "2000",
}

Acked = dict[tuple[int, bytes], dict[int, bytes | None]]  # (partition, key) -> offset -> value


class _Writer(threading.Thread):
    """Produces until stopped, pausing (all acknowledged) whenever asked."""

    def __init__(self, bootstrap: str):
        super().__init__()
        self.bootstrap = bootstrap
        self.acked: Acked = {}
        self.errors: list[str] = []
        self.lock = threading.Condition()
        self.delivered = 0
        self.stop, self.pause, self.paused = threading.Event(), threading.Event(), threading.Event()

    def _delivered(self, err: KafkaError | None, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        with self.lock:
            self.acked.setdefault((msg.partition(), msg.key()), {})[msg.offset()] = msg.value()
            self.delivered += 1
            self.lock.notify_all()

    def wait_for(self, delivered: int) -> None:
        """Until ``delivered`` records in all were acknowledged (or the writer failed)."""
        with self.lock:
            assert self.lock.wait_for(lambda: self.delivered >= delivered or self.errors, 120), "the writer stalled"

    def run(self) -> None:
        try:
            self._produce()
        except Exception as e:  # a fatal producer error: the test reports it
            self.errors.append(repr(e))
        finally:
            self.paused.set()

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        seq = 0
        while not self.stop.is_set():
            if self.pause.is_set():
                assert p.flush(60) == 0
                self.paused.set()
                while self.pause.is_set() and not self.stop.is_set():
                    p.poll(0.01)
                self.paused.clear()
            for _ in range(200):
                key = b"k%d" % random.randrange(KEYS)
                value = None if random.random() < 0.05 else b"%s:%d" % (key, seq)
                seq += 1
                p.produce("soak", key=key, value=value, on_delivery=self._delivered)
            p.poll(0.02)
        assert p.flush(60) == 0


def _read_whole(
    bootstrap: str, group: str
) -> tuple[dict[int, int], dict[tuple[int, bytes], list[tuple[int, bytes | None]]]]:
    """Each partition's end, and what a consumer reads of it up to there, by key."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition("soak", p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition("soak", p, 0) for p in range(PARTITIONS)])
        read: dict[tuple[int, bytes], list[tuple[int, bytes | None]]] = {}
        last = dict.fromkeys(range(PARTITIONS), -1)
        done: set[int] = set()
        while len(done) < PARTITIONS:
            m = c.poll(30)
            assert m is not None, "a read of the whole topic stalled"
            p = m.partition()
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                assert m.offset() >= ends[p], f"partition {p} ended at {m.offset()}, before {ends[p]}"
                done.add(p)
                continue
            assert m.offset() > last[p], "offsets went back"
            last[p] = m.offset()
            read.setdefault((p, m.key()), []).append((m.offset(), m.value()))
        return ends, read
    finally:
        c.close()


def _wrongs(acked: Acked, read: dict) -> list[str]:
    wrongs = []
    for (p, key), values in acked.items():
        got = read.get((p, key), [])
        for offset, value in got:
            if values.get(offset, b"never") != value:
                wrongs.append(f"{p}/{key!r}: read {value!r} at {offset}, never acknowledged there")
        latest = max(values)  # the writer was paused, all of it acknowledged, before the read
        if values[latest] is not None and (not got or got[-1] != (latest, values[latest])):
            wrongs.append(f"{p}/{key!r}: latest {values[latest]!r} at {latest}, read {got[-1:]}")
    return wrongs


@pytest.mark.parametrize("soak_s", SOAKS)
@pytest.mark.parametrize("root", ["local", "s3", "s3+zookeeper", "s3+etcd"])
def test_a_compacted_topic_under_load_keeps_every_keys_latest_value(tmp_path, request, root: str, soak_s: int) -> None:
    """On an object store too, its metadata in the bucket or in ZooKeeper or etcd: ledgers are
    uploaded whole, and the partitions' keys are listed or watched."""
    store, conf = str(tmp_path / "store"), _CONF
    if root.startswith("s3"):
        running, space = request.getfixturevalue("running"), uuid.uuid4().hex[:12]
        store = f"s3://{servers.BUCKET}/{space}"
        metadata = {
            "s3": None,  # in the bucket
            "s3+zookeeper": f"zk:127.0.0.1:{running['zookeeper'].port}/{space}",
            "s3+etcd": f"etcd:http://127.0.0.1:{running['etcd'].port}/{space}",
        }[root]
        conf = [*_CONF, f"metadataStoreUrl={metadata}"] if metadata else _CONF
    with KopServer(store, conf) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic("soak", PARTITIONS, 1, config=_TOPIC)]).values():
            f.result(30)
        writer = _Writer(server.bootstrap)
        writer.start()
        checks, until = 0, time.monotonic() + soak_s
        try:
            while time.monotonic() < until and not writer.errors:
                writer.wait_for(writer.delivered + 30_000)  # the cleaner has ledgers to compact meanwhile
                writer.pause.set()
                writer.paused.wait(90)
                if writer.errors:
                    break
                ends, read = _read_whole(server.bootstrap, f"check-{checks}")
                with writer.lock:
                    acked = {k: dict(v) for k, v in writer.acked.items()}
                writer.pause.clear()
                assert _wrongs(acked, read) == []
                assert all(max(o for (q, _), v in acked.items() if q == p for o in v) < ends[p] for p in ends)
                checks += 1
        finally:
            writer.stop.set()
            writer.pause.clear()
            writer.join(120)
        assert writer.errors == []
        assert checks >= 3
