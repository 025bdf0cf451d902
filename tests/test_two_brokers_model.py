"""Two Brokers in one process share a store, each with its own caches (views, listings, topic
metadata, uploaded ledgers), and take turns at a topic in an order hypothesis picks: produce,
fetch, delete records, retention, compaction, maintenance, more partitions, the topic deleted and
made again. A model
holds what every acknowledged produce put where; each fetch, on either Broker, must return exactly
the model's records from its offset on, and a new Broker at the end must find the same."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from kop_spark import Broker, Record
from kop_spark.broker import FetchedBatches, PartitionFetch
from kop_spark.errors import ConfigError, UnknownTopicOrPartitionError
from kop_spark.record import RecordBatch

from . import servers

# Small ledgers and merges of three, so a few steps roll ledgers over and merge them.
CONF = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMergeInPassing": 3}
WHO = st.integers(0, 1)
# Retention by size: none, or about a ledger or a few (a record's value is a few bytes).
KEPT = st.sampled_from([-1, 150, 600])


def _key(value: bytes) -> bytes:
    """Three keys, taken in turn, so compaction has records to drop."""
    return b"k%d" % (int(value[1:]) % 3)


def _agrees(got: list[tuple[int, bytes]], log: list[bytes], offset: int, compacted: bool, whole: bool) -> bool:
    """Whether records read from ``offset`` are the log's from there (all of them: ``whole``). Of
    a compacted log, any of its records in order, with the latest of each key among them."""
    expected = list(enumerate(log))[offset:]
    if not compacted:
        return got == (expected if whole else expected[: len(got)])
    offsets = [o for o, _ in got]
    if offsets != sorted(set(offsets)) or not set(got) <= set(expected):
        return False
    latest = {_key(v): o for o, v in expected}
    return not whole or set(latest.values()) <= set(offsets)


def _root(kind: str, tmp: str, running: dict[str, servers.Server]) -> tuple[str, dict[str, Any]]:
    """A local root, or S3 with its metadata in the bucket (kept listings, no cheap probe) or in
    etcd (watched keys). A bucket of its own: moto lists a prefix by walking the whole bucket."""
    space = f"m{uuid.uuid4().hex[:12]}"
    if kind == "local":
        return f"{tmp}/{space}", {}
    servers.make_bucket(running["s3"].port, space)
    conf: dict[str, Any] = {"metadataStoreOperationTimeoutSeconds": 10}
    if kind == "s3+etcd":
        conf["metadataStoreUrl"] = f"etcd:http://127.0.0.1:{running['etcd'].port}/{space}"
    return f"s3://{space}/kop", conf


class TwoBrokers(RuleBasedStateMachine):
    kind = "local"
    tmp = ""
    running: ClassVar[dict[str, servers.Server]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.root, self.conf = _root(self.kind, self.tmp, self.running)
        self.brokers = [Broker(self.root, {**self.conf, **CONF}) for _ in range(2)]
        self.observer = Broker(self.root, {**self.conf, **CONF})
        self.topic = "t"
        self.logs: list[list[bytes]] = []
        self.starts: list[int] = []
        self.seen: list[list[int]] = []
        self.deleted: defaultdict[int, list[list[bytes]]] = defaultdict(list)  # each partition's logs before
        self.kept = -1
        self.compacted = False
        self.written = 0
        self.last_writer = 0

    @initialize(partitions=st.integers(1, 3), kept=KEPT, compacted=st.booleans())
    def create(self, partitions: int, kept: int, compacted: bool) -> None:
        self._made(self.brokers[0], partitions, kept, compacted)

    def _made(self, b: Broker, partitions: int, kept: int, compacted: bool) -> None:
        """A compacted topic keeps the latest record of each key; the others keep what retention
        by size leaves."""
        b.create_topic(
            self.topic, partitions, {"cleanup.policy": "compact"} if compacted else {"retention.bytes": kept}
        )
        self.logs, self.starts, self.compacted = [[] for _ in range(partitions)], [0] * partitions, compacted
        self.kept = -1 if compacted else kept
        self.seen = [[0] * partitions for _ in self.brokers]  # the log end each Broker last saw

    @rule(who=WHO, partition=st.integers(0, 5), count=st.integers(1, 4))
    def produce(self, who: int, partition: int, count: int) -> None:
        p = partition % len(self.logs)
        values = [f"v{self.written + i}".encode() for i in range(count)]
        self.written += count
        [(written_to, base, n)] = self.brokers[who].produce(
            self.topic, [Record(value=v, key=_key(v)) for v in values], partition=p
        )
        assert (written_to, base, n) == (p, len(self.logs[p]), count), f"broker {who} appended out of place"
        self.logs[p].extend(values)
        self.seen[who][p] = len(self.logs[p])
        self.last_writer = who

    @rule(who=WHO, partition=st.integers(0, 5), at=st.floats(0, 1))
    def fetch(self, who: int, partition: int, at: float) -> None:
        p = partition % len(self.logs)
        self._learn_log_start(p)
        offset = self.starts[p] + int(at * (len(self.logs[p]) - self.starts[p]))
        got = self.brokers[who].fetch(self.topic, p, offset, max_records=100_000)
        records = [(r.offset, r.value) for r in got]
        assert _agrees(records, self.logs[p], offset, self.compacted, whole=True), f"broker {who}, {p} from {offset}"
        self.seen[who][p] = len(self.logs[p])

    @rule(other=st.booleans(), partition=st.integers(0, 5), at=st.floats(0, 1) | st.just(1.0))
    def fetch_on_recent_looks(self, other: bool, partition: int, at: float) -> None:
        """A FETCH under ``kafkaMinFetchPeriodMs`` (or a parked one looking again) may take what it
        looked at lately for the log's end: it may miss the other Broker's latest appends, never
        what it saw or wrote itself, and an offset the log has is never refused (a consumer handed
        one by a fresh ListOffsets, or by a group member on another server, would reset its
        position). Half the time it is the Broker that did not write last: the one that may have
        missed a write."""
        who = 1 - self.last_writer if other else self.last_writer
        p = partition % len(self.logs)
        self._learn_log_start(p)
        offset = self.starts[p] + int(at * (len(self.logs[p]) - self.starts[p]))
        [got] = self.brokers[who].fetch_partitions([PartitionFetch(self.topic, p, offset, 1 << 20)], 1 << 20, 60.0)
        assert isinstance(got, FetchedBatches), f"broker {who} refused offset {offset} of partition {p}: {got!r}"
        records = [(r.offset, r.value) for b in got.batches for r in RecordBatch(b).records() if r.offset >= offset]
        if not _agrees(records, self.logs[p], offset, self.compacted, whole=False):
            # The topic as it stood at that look: made again since by the other Broker, which
            # this one learns at its next fresh look, as a Kafka consumer learns it from metadata.
            assert any(_agrees(records, log, offset, True, whole=False) for log in self.deleted[p]), p
            return
        assert got.high_watermark >= self.seen[who][p], f"broker {who} lost sight of records it had seen in {p}"

    @rule(who=WHO, partition=st.integers(0, 5), at=st.floats(0, 1))
    def delete_records(self, who: int, partition: int, at: float) -> None:
        p = partition % len(self.logs)
        self._learn_log_start(p)
        before = int(at * len(self.logs[p]))
        self.starts[p] = max(self.starts[p], before)
        assert self.brokers[who].delete_records(self.topic, p, before) == self.starts[p]

    @rule(who=WHO)
    def retention(self, who: int) -> None:
        self.brokers[who].enforce_retention(self.topic)
        for p in range(len(self.logs)):
            self._learn_log_start(p)

    @rule(who=WHO)
    def compact(self, who: int) -> None:
        if self.compacted:
            self.brokers[who].compact(self.topic)
        else:
            with pytest.raises(ConfigError, match=r"cleanup\.policy"):
                self.brokers[who].compact(self.topic)

    @rule(who=WHO)
    def clean_logs(self, who: int) -> None:
        """kop maintenance's pass: merges small ledgers, removes orphans, where the other Broker
        may plan reads on ledgers it merged away."""
        self.brokers[who].clean_logs(self.topic)

    def _learn_log_start(self, p: int) -> None:
        """Retention by size drops whole ledgers from the front, in a pass or as writers roll
        ledgers over; where it cuts depends on the ledgers' sizes, so the model takes the log
        start a third Broker finds, which may only move forward. (Asking the two under test
        would give each a fresh look before every step, where they should work from their own.)"""
        start = self.observer.list_offsets(self.topic, p, "earliest")
        assert self.starts[p] <= start <= len(self.logs[p]), f"partition {p}'s log start moved back"
        assert self.kept >= 0 or start == self.starts[p], f"partition {p}'s log start moved with no retention"
        self.starts[p] = start

    @rule(who=WHO, more=st.integers(1, 2))
    def add_partitions(self, who: int, more: int) -> None:
        self.brokers[who].create_partitions(self.topic, len(self.logs) + more)
        self.logs += [[] for _ in range(more)]
        self.starts += [0] * more
        self.seen = [s + [0] * more for s in self.seen]

    @rule(who=WHO, partitions=st.integers(1, 3), kept=KEPT, compacted=st.booleans())
    def recreate(self, who: int, partitions: int, kept: int, compacted: bool) -> None:
        """With new settings. On an object store a produce may take settings read within a
        second (PRODUCED_TOPIC_AGE_S), even those of the topic as it was before, but applies no
        retention by them to the log made again (``settings_read_ms``)."""
        b = self.brokers[who]
        b.delete_topic(self.topic)
        for p, log in enumerate(self.logs):
            self.deleted[p].append(log)
        self._made(b, partitions, kept, compacted)

    @rule(who=WHO)
    def produce_to_a_partition_past_the_end(self, who: int) -> None:
        """The other Broker may have made the topic again with fewer partitions a moment ago:
        a produce to a partition the topic no longer has is refused, never kept somewhere."""
        with pytest.raises(UnknownTopicOrPartitionError):
            self.brokers[who].produce(self.topic, [Record(value=b"lost", key=b"k0")], partition=len(self.logs))

    def teardown(self) -> None:
        try:
            with Broker(self.root, {**self.conf, **CONF}) as fresh:
                assert fresh.partitions_for(self.topic) == len(self.logs)
                for p, log in enumerate(self.logs):
                    self._learn_log_start(p)
                    got = [(r.offset, r.value) for r in fresh.fetch(self.topic, p, self.starts[p], max_records=100_000)]
                    assert _agrees(got, log, self.starts[p], self.compacted, whole=True), (
                        f"{p} as a new Broker reads it"
                    )
                assert fresh.verify(self.topic) == {}
        finally:
            for b in [*self.brokers, self.observer]:
                b.close()


@pytest.mark.timeout(900)  # a failure shrinks over S3 for minutes: let it, for a short example
@pytest.mark.parametrize("kind", ["local", "s3", "s3+etcd"])
def test_two_brokers_taking_turns_agree_with_the_model(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    running = {} if kind == "local" else request.getfixturevalue("running")
    machine = type(
        "TwoBrokersOn" + kind.title(), (TwoBrokers,), {"kind": kind, "tmp": str(tmp_path), "running": running}
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
