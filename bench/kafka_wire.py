"""Benchmark 9: Kafka clients through ``kop serve``, against librdkafka's in-memory mock cluster
(``test.mock.num.brokers=1``) measured in the same run: the rate a Kafka client reaches when the
broker costs next to nothing.

- produce: confluent-kafka, one partition, 100-byte values, idempotent, acks=all, linger.ms=5,
  batch.size=1 MB; kop with its durable defaults (fsync before acknowledging), against the mock;
- transactional produce: the same, with a transactional producer committing every 10,000 records,
  against the mock's and against kop's idempotent produce (what staging until the commit costs),
  and committing every 100 records (what a transaction costs, as an exactly-once stream
  processor committing every 100 ms pays it), against the mock's;
- consume: confluent-kafka reading the same records back (queued.min.messages raised), against
  the mock's produce rate (the issue's anchor) and its own consume rate;
- share consume (KIP-932): librdkafka's share consumer reading the same records, each poll's
  acceptance kept before the next is answered, against a consumer committing synchronously every
  500 records (the same durability in a consumer group's terms), itself against plain consume;
- latency: p99 of produce round trips at 1,000 records/s, and the time from an append by another
  process to a parked consumer receiving it (both for kop alone);
- kop serve's CPU seconds per million records produced and consumed, and its share of a core while
  a consumer of 100 partitions waits at their ends (its fetches parked, looking for other
  processes' appends), against a consumer of one partition;
- ListOffsets by time: the time a consumer's ``offsets_for_times`` of 100 partitions takes (one
  request), against that of one partition.

Rates are the best of three rounds on each side; a round runs both sides, one after the other.

    python bench/kafka_wire.py [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))
from kop_spark import Broker, Record  # noqa: E402 - importable only once the checkout is on sys.path
from tests.kop_server import KopServer  # noqa: E402 - as above
from tests.mock_cluster import mock_logger  # noqa: E402 - as above

VALUE = b"v" * 100
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20}


def produce_rate(conf: dict, n: int, topic: str = "bench") -> tuple[float, Producer]:
    """Records/s, and the producer (a mock cluster lives as long as the producer that made it)."""
    p = Producer({**PRODUCER, **conf})
    p.produce(topic, VALUE, partition=0)  # connections and the producer id before the clock
    p.flush(60)
    t = time.perf_counter()
    send(p, topic, n)
    assert p.flush(300) == 0
    return n / (time.perf_counter() - t), p


def send(p: Producer, topic: str, n: int) -> None:
    """Produce ``n`` records, waiting for room whenever the producer's queue is full."""
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.001)


def transactional_rate(conf: dict, n: int, topic: str, per_transaction: int = 10_000) -> tuple[float, Producer]:
    """Records/s of a transactional producer committing every ``per_transaction`` records, and
    the producer (as ``produce_rate``)."""
    p = Producer({**PRODUCER, **conf, "transactional.id": f"bench-{topic}"})
    p.init_transactions(60)
    t = time.perf_counter()
    for start in range(0, n, per_transaction):
        p.begin_transaction()
        send(p, topic, min(per_transaction, n - start))
        p.commit_transaction(300)
    return n / (time.perf_counter() - t), p


def consume_rate(bootstrap: str, topic: str = "bench") -> float:
    """Records/s reading the partition from its first offset still kept (the mock drops old
    segments) to its end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "queued.min.messages": 1_000_000,
            "fetch.wait.max.ms": 10,
        }
    )
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.assign([TopicPartition(topic, 0, low)])
    got, last, t = 0, low - 1, time.perf_counter()
    while last < high - 1:
        if time.perf_counter() - t > 600:
            raise TimeoutError(f"consumed {got} of {high - low} records from {bootstrap} in 10 minutes")
        for m in c.consume(10_000, 0.05):
            offset = m.offset()
            if m.error() is None and offset is not None:
                got, last = got + 1, offset
    rate = got / (time.perf_counter() - t)
    c.close()
    return rate


def share_consume_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records/s a share consumer (KIP-932) gets and accepts, the group starting at the partition's
    start; each poll's records accepted (kept before answered) with the next poll's fetch."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": f"share-{topic}"})
    c.subscribe([topic])
    got, t = 0, time.perf_counter()
    while got < records:
        got += sum(m.error() is None for m in c.poll(1) or [])
    c.commit_sync()
    rate = got / (time.perf_counter() - t)
    c.close()
    return rate


def committing_consume_rate(bootstrap: str, topic: str, records: int, per_poll: int = 500) -> float:
    """Records/s a consumer reads committing its offsets synchronously after each ``per_poll``
    records: what a share consumer's acknowledgements cost, in a consumer group's terms."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"commit-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, t = 0, time.perf_counter()
    while got < records:
        batch = [m for m in c.consume(per_poll, 1) if m.error() is None]
        if batch:
            got += len(batch)
            c.commit(message=batch[-1], asynchronous=False)
    rate = got / (time.perf_counter() - t)
    c.close()
    return rate


def _latency_into(latencies: list[float], sent: float) -> Callable[[object, object], None]:
    return lambda error, message: latencies.append(time.perf_counter() - sent)


def produce_p99_ms(bootstrap: str, n: int = 2000, per_second: int = 1000) -> float:
    p = Producer({**PRODUCER, "bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce("bench", VALUE, partition=0)  # the producer id and connections before the clock
    p.flush(60)
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(n):
        p.produce("bench", VALUE, partition=0, on_delivery=_latency_into(latencies, time.perf_counter()))
        p.poll(0)
        wait = start + (i + 1) / per_second - time.perf_counter()
        if wait > 0:
            p.poll(wait)
    p.flush(60)
    return statistics.quantiles(latencies, n=100)[98] * 1000


def wake_up_ms(root: str, bootstrap: str, rounds: int = 20) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wake", "fetch.wait.max.ms": 5000})
    with Broker(root) as b:
        end = b.list_offsets("bench", 0, "latest")
        c.assign([TopicPartition("bench", 0, end)])
        c.poll(0.5)  # parked at the log end
        waits = []
        for _ in range(rounds):
            t = time.perf_counter()
            b.produce("bench", [Record(VALUE)], 0)
            while c.poll(5) is None:
                pass
            waits.append(time.perf_counter() - t)
    c.close()
    return statistics.median(waits) * 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(server: KopServer, topic: str, seconds: float = 10) -> float:
    """kop serve's share of a core while a consumer assigned every partition of ``topic`` at its
    end waits for records that do not come."""
    assert server.proc is not None
    with Broker(server.root) as b:
        ends = [b.list_offsets(topic, p, "latest") for p in range(b.partitions_for(topic))]
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"idle-{topic}"})
    c.assign([TopicPartition(topic, p, end) for p, end in enumerate(ends)])
    c.poll(1)  # connected, its fetches parked
    used, start = cpu_seconds(server.proc.pid), time.perf_counter()
    while time.perf_counter() - start < seconds:
        c.poll(0.5)
    share = (cpu_seconds(server.proc.pid) - used) / (time.perf_counter() - start)
    c.close()
    return share


def offsets_by_time_ms(bootstrap: str, topic: str, partitions: int, rounds: int = 20) -> float:
    """The median time of a consumer's ``offsets_for_times`` of every partition of ``topic``, the
    first record at or after time 0 (one batch of each partition decoded)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"times-{topic}"})
    wanted = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.offsets_for_times(wanted, 30)  # connected
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        c.offsets_for_times(wanted, 30)
        times.append(time.perf_counter() - t)
    c.close()
    return statistics.median(times) * 1000


def run(n: int = 1_000_000, rounds: int = 3) -> list[tuple[str, float, str, float, str]]:
    """Rows of (benchmark, value, unit, ratio, baseline); rates are the best of ``rounds`` on
    either side, as two cores shared by client and server make single runs noisy. Each round runs
    the mock cluster and then kop serve, so that a slow or fast spell of the machine falls on both."""
    logger, mock = mock_logger("rdkafka-mock")
    mock_produce = mock_consume = produced = consumed = cpu = mock_txn = txn = mock_small = small = 0.0
    shared = committing = 0.0
    small_n = max(n // 50, 1_000)  # transactions of 100 records: a hundredth of the records takes longer
    with tempfile.TemporaryDirectory() as tmp:
        root = str(Path(tmp) / "store")
        with Broker(root) as b:
            for i in range(rounds):
                b.create_topic(f"bench{i}", 1)
                b.create_topic(f"txn{i}", 1)
            b.create_topic("bench", 1)
            b.create_topic("wide", 100)
            for p in range(100):
                b.produce("wide", [Record(value=VALUE)] * 10, p)
        with KopServer(root, ["share.auto.offset.reset=earliest"]) as server:
            assert server.proc is not None
            for i in range(rounds):
                # a new mock cluster each round, made by its producer
                rate, mock_cluster = produce_rate({"test.mock.num.brokers": 1, "logger": logger}, n)
                mock_cluster.poll(0)  # delivers librdkafka's log lines, among them the mock's address
                mock_produce, mock_consume = max(mock_produce, rate), max(mock_consume, consume_rate(mock.address))
                if i == rounds - 1:
                    mock_p99 = produce_p99_ms(mock.address)
                del mock_cluster
                rate, mock_cluster = transactional_rate({"test.mock.num.brokers": 1}, n, "txn")
                mock_txn = max(mock_txn, rate)
                del mock_cluster
                rate, mock_cluster = transactional_rate({"test.mock.num.brokers": 1}, small_n, "small", 100)
                mock_small = max(mock_small, rate)
                del mock_cluster
                txn = max(txn, transactional_rate({"bootstrap.servers": server.bootstrap}, n, f"txn{i}")[0])
                small = max(
                    small, transactional_rate({"bootstrap.servers": server.bootstrap}, small_n, f"txn{i}", 100)[0]
                )
                used = cpu_seconds(server.proc.pid)
                produced = max(produced, produce_rate({"bootstrap.servers": server.bootstrap}, n, f"bench{i}")[0])
                consumed = max(consumed, consume_rate(server.bootstrap, f"bench{i}"))
                cpu += cpu_seconds(server.proc.pid) - used
                committing = max(committing, committing_consume_rate(server.bootstrap, f"bench{i}", n))
                shared = max(shared, share_consume_rate(server.bootstrap, f"bench{i}", n))
            cpu /= rounds
            p99 = produce_p99_ms(server.bootstrap)
            wake = wake_up_ms(root, server.bootstrap)
            idle_one, idle_wide = idle_cpu(server, "bench"), idle_cpu(server, "wide")
            times_one, times_wide = (
                offsets_by_time_ms(server.bootstrap, "bench", 1),
                offsets_by_time_ms(server.bootstrap, "wide", 100),
            )
    return [
        ("produce through kop serve", produced, "records/s", produced / mock_produce, "mock cluster's produce"),
        ("consume through kop serve", consumed, "records/s", consumed / mock_produce, "mock cluster's produce"),
        ("consume through kop serve", consumed, "records/s", consumed / mock_consume, "mock cluster's consume"),
        ("mock cluster: produce", mock_produce, "records/s", 1.0, "itself"),
        ("mock cluster: consume", mock_consume, "records/s", 1.0, "itself"),
        ("kop serve CPU per million records produced and consumed", cpu * 1e6 / n, "s", float("nan"), "-"),
        ("p99 produce latency at 1,000 records/s", p99, "ms", p99 / mock_p99, "mock cluster's p99 (times as long)"),
        ("mock cluster: p99 produce latency at 1,000 records/s", mock_p99, "ms", 1.0, "itself"),
        ("parked fetch woken by another process's append (median)", wake, "ms", float("nan"), "-"),
        (
            "kop serve CPU, idle consumer of 100 partitions",
            100 * idle_wide,
            "% of a core",
            idle_wide / idle_one,
            "of 1 partition",
        ),
        ("kop serve CPU, idle consumer of 1 partition", 100 * idle_one, "% of a core", 1.0, "itself"),
        ("offsets_for_times of 100 partitions", times_wide, "ms", times_wide / times_one, "of 1 partition"),
        ("offsets_for_times of 1 partition", times_one, "ms", 1.0, "itself"),
        ("share consume (KIP-932) through kop serve", shared, "records/s", shared / committing, "committing consume"),
        ("consume committing each 500 records", committing, "records/s", committing / consumed, "kop's consume"),
        ("transactional produce through kop serve", txn, "records/s", txn / mock_txn, "mock cluster's"),
        ("transactional produce through kop serve", txn, "records/s", txn / produced, "kop's idempotent produce"),
        ("mock cluster: transactional produce", mock_txn, "records/s", 1.0, "itself"),
        ("transactional produce, 100 records a transaction", small, "records/s", small / mock_small, "mock cluster's"),
        ("mock cluster: transactional produce, 100 records a transaction", mock_small, "records/s", 1.0, "itself"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="the rows as JSON (what bench/run.py reads)")
    args = ap.parse_args()
    rows = run(args.records, args.rounds)
    if args.json:
        print(json.dumps(rows))
        return
    for name, value, unit, ratio, base in rows:
        print(f"{name:<58} {value:>14,.1f} {unit:<10} {ratio:5.2f}x {base}")


if __name__ == "__main__":
    main()
