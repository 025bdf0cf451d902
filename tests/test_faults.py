"""Invariants 1-3 of DESIGN.md §2 when a write is interrupted by an exception rather than killed:
KeyboardInterrupt, a full disk, an I/O error, a short write or an exception of the caller's own,
landing at every step of append, seal, roll-over, fence, staging, compaction (explicit and the
background cleaner's), retention (an open ledger's too), merging, orphan removal, group commits,
expiry and topic deletion. Clean-up code runs then (kill -9 never exercises it), and then the same
Broker is used again, as the CLI's ``with`` block and a retrying caller would. A shutdown's stop at
each point housekeeping looks at it abandons a rewrite and leaves the store as it was.

After each fault: nothing the metadata confirms is damaged (``Broker.verify``), every acknowledged
record is read back by a fresh reader at the offset it was given, offsets run without a gap,
nothing that was never attempted is visible, an interrupted append is all there or not at all,
and both the interrupted Broker and a new one go on writing.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kop_spark import Broker, Record, layout
from kop_spark.errors import HousekeepingStoppedError
from kop_spark.record import build_record_batch

from .conftest import read_partition
from .faults import FAULTS, Fault, Injector, injected

CONF = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMergeInPassing": 3}
Offsets = dict[tuple[str, int], int]


@dataclass
class Ledger:
    """What the test told the store, and what the store acknowledged."""

    acked: dict[tuple[str, int, int], bytes] = field(default_factory=dict)  # (topic, partition, offset) -> value
    attempted: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # value -> (topic, partition)
    in_flight: list[bytes] = field(default_factory=list)  # values of the append a fault interrupted
    commits: dict[str, Offsets] = field(default_factory=dict)  # group -> last acknowledged commit
    commit_in_flight: tuple[str, Offsets] | None = None
    counter: itertools.count = field(default_factory=itertools.count)

    def produce(
        self, b: Broker, topic: str, partition: int, n: int, key: bytes | None = None, timestamp_ms: int | None = None
    ) -> None:
        values = [f"v{next(self.counter)}".encode() for _ in range(n)]
        self.in_flight = values
        for v in values:
            self.attempted[v] = (topic, partition)
        records = [Record(v, key if key is not None else v, timestamp_ms) for v in values]
        ((_, base, _count),) = b.produce(topic, records, partition)
        for i, v in enumerate(values):
            self.acked[(topic, partition, base + i)] = v
        self.in_flight = []

    def stage(self, b: Broker, topic: str, partition: int, n: int, batch_id: int) -> None:
        values = [f"v{next(self.counter)}".encode() for _ in range(n)]
        self.in_flight = values
        for v in values:
            self.attempted[v] = (topic, partition)
        ledgers = []
        for task, part in enumerate((values[: n // 2], values[n // 2 :])):  # two tasks' output, moved in together
            staged = b.sink_commits.stage(topic, partition, f"_staging/q/{batch_id}/{task}")
            staged.append([build_record_batch([Record(v, v)]) for v in part])
            ledgers += staged.finish()
        result = b.append_staged(topic, partition, ledgers, ("spark:q", batch_id))
        for i, v in enumerate(values):
            self.acked[(topic, partition, result.base_offset + i)] = v
        self.in_flight = []

    def commit(self, b: Broker, group: str, offsets: Offsets) -> None:
        self.commit_in_flight = (group, offsets)
        b.commit_offsets(group, offsets)
        self.commits[group] = offsets
        self.commit_in_flight = None

    def settle(self, b: Broker) -> None:
        """Whatever an interrupted operation did or did not do is now the state to keep."""
        self.in_flight = []
        if self.commit_in_flight is not None:
            group, offsets = self.commit_in_flight
            if {tp: o.offset for tp, o in b.fetch_offsets(group).items()} == offsets:
                self.commits[group] = offsets
            self.commit_in_flight = None


def check_store(root: str, ledger: Ledger, compacted: set[str] = frozenset(), expiring: set[str] = frozenset()) -> None:
    b = Broker(root, conf=CONF)
    assert b.verify() == {}, "damage in what the metadata confirms"
    visible: dict[bytes, tuple[str, int, int]] = {}
    for topic in b.list_topics():
        for p in range(b.partitions_for(topic)):
            start, end, records = read_partition(b, topic, p)
            if topic not in compacted:
                assert [r.offset for r in records] == list(range(start, end)), (
                    f"{topic}-{p}: offsets must run {start}..{end - 1}"
                )
            for r in records:
                assert r.value not in visible, f"{r.value!r} appears twice"
                visible[r.value] = (topic, p, r.offset)
            for (t, q, o), v in ledger.acked.items():
                if (t, q) == (topic, p) and o >= start and topic not in compacted:
                    assert visible.get(v) == (t, q, o), f"acknowledged {v!r} at {t}-{q}@{o} lost or moved"
    for v, where in visible.items():
        assert v in ledger.attempted, f"{v!r} at {where} was never produced"
    in_flight = [v in visible for v in ledger.in_flight]
    assert all(in_flight) or not any(in_flight), "an interrupted append is visible in part"
    for group, offsets in ledger.commits.items():
        got = {tp: o.offset for tp, o in b.fetch_offsets(group).items()}
        in_flight_commit = (
            ledger.commit_in_flight[1] if ledger.commit_in_flight and ledger.commit_in_flight[0] == group else None
        )
        if group not in expiring:
            assert got in (offsets, in_flight_commit), f"group {group}: committed {offsets}, now {got}"
    b.close()


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: Callable[[Broker, Ledger], None]
    operation: Callable[[Broker, Ledger, str], None]
    compacted: set[str] = frozenset()
    expiring: set[str] = frozenset()
    direct_io: bool = False  # writes with O_DIRECT, which tmpfs before Linux 6.6 refuses: on a disk


def _setup_topic(b: Broker, ledger: Ledger) -> None:
    b.create_topic("t", 2)
    for i in range(3):
        ledger.produce(b, "t", i % 2, 2)


def _fence(b: Broker, ledger: Ledger, root: str) -> None:
    other = Broker(root, conf=CONF)
    ledger.produce(other, "t", 0, 2)  # fences b's open ledger
    ledger.produce(b, "t", 0, 2)  # b finds itself fenced: seals its ledger, starts another
    other.close()


def _setup_compacted(b: Broker, ledger: Ledger) -> None:
    _setup_topic(b, ledger)
    b.create_topic("c", 1, config={"cleanup.policy": "compact"})
    for i in range(6):
        ledger.produce(b, "c", 0, 1, key=f"k{i % 2}".encode())


def _setup_retention(b: Broker, ledger: Ledger) -> None:
    _setup_topic(b, ledger)
    b.create_topic("r", 1, config={"retention.bytes": 400, "file.delete.delay.ms": 0})
    for _ in range(6):
        ledger.produce(b, "r", 0, 2)


def _setup_expired_tail(b: Broker, ledger: Ledger) -> None:
    """A partition nobody writes to, its one ledger open and its records past retention.ms."""
    _setup_topic(b, ledger)
    b.create_topic("x", 1, config={"retention.ms": 60_000, "file.delete.delay.ms": 0})
    ledger.produce(b, "x", 0, 1, timestamp_ms=1)


def _setup_groups(b: Broker, ledger: Ledger) -> None:
    _setup_topic(b, ledger)
    ledger.commit(b, "g", {("t", 0): 1, ("t", 1): 1})
    b.commit_offsets("old", {("t", 0): 1}, expire_timestamp_ms=1)
    ledger.commits["old"] = {("t", 0): 1}


def _setup_deletion(b: Broker, ledger: Ledger) -> None:
    _setup_topic(b, ledger)
    b.create_topic("d", 2, config={"file.delete.delay.ms": 0})
    ledger.produce(b, "d", 0, 1)


def _setup_merge(b: Broker, ledger: Ledger) -> None:
    """Small closed ledgers of writers that took turns, and a file a crashed writer left."""
    _setup_topic(b, ledger)
    other = Broker(b.root, conf={**CONF, "managedLedgerMergeInPassing": 0})
    for i in range(4):
        ledger.produce(other if i % 2 else b, "t", 0, 1)
    other.close()
    b.fileio.create(layout.ledger_file(layout.data_dir(b.topic_name("t"), 0), 0xDEADBEEF)).close()


def _delete(b: Broker, ledger: Ledger, root: str) -> None:
    b.delete_topic("d")


SCENARIOS = [
    Scenario(
        "append and roll over", _setup_topic, lambda b, l, root: [l.produce(b, "t", 0, 3), l.produce(b, "t", 0, 1)]
    ),
    Scenario("seal on close", _setup_topic, lambda b, l, root: b.close()),
    Scenario("fence", _setup_topic, _fence),
    Scenario("staging", _setup_topic, lambda b, l, root: l.stage(b, "t", 1, 3, batch_id=1), direct_io=True),
    Scenario("compaction", _setup_compacted, lambda b, l, root: b.compact("c"), compacted={"c"}),
    # The background cleaner's: the ledgers no writer holds open, rewritten with no lock held.
    Scenario("cleaning", _setup_compacted, lambda b, l, root: b.clean_logs("c"), compacted={"c"}),
    # Retention is applied by every CAS of a partition; a produce rolls a ledger over and trims the head.
    Scenario("retention", _setup_retention, lambda b, l, root: [l.produce(b, "r", 0, 2), b.enforce_retention("r")]),
    Scenario("retention of an open ledger", _setup_expired_tail, lambda b, l, root: b.enforce_retention("x")),
    Scenario(
        "merge and orphan removal",
        _setup_merge,
        lambda b, l, root: b.maintenance(target_ledger_bytes=1 << 20, orphan_grace_ms=0),
    ),
    Scenario("group commit", _setup_groups, lambda b, l, root: l.commit(b, "g", {("t", 0): 3, ("t", 1): 2})),
    Scenario("expiry", _setup_groups, lambda b, l, root: b.expire_offsets(), expiring={"old"}),
    Scenario("topic deletion", _setup_deletion, _delete),
]


def _run(
    root: str, scenario: Scenario, monkeypatch, at: int | None = None, fault: Fault | None = None
) -> tuple[Injector, Ledger]:
    ledger = Ledger()
    b = Broker(root, conf=CONF)
    scenario.setup(b, ledger)
    injector = Injector(at, fault)
    try:
        with injected(monkeypatch, injector):
            scenario.operation(b, ledger, root)
    except (KeyboardInterrupt, Exception):
        pass
    check_store(root, ledger, scenario.compacted, scenario.expiring)
    # The interrupted Broker's clean-up (the CLI's `with` block), then more writes, by it and a new one.
    b.close()
    ledger.settle(Broker(root, conf=CONF))
    ledger.produce(b, "t", 0, 2)
    ledger.produce(Broker(root, conf=CONF), "t", 1, 2)
    if scenario.name == "topic deletion":
        again = Broker(root, conf=CONF)
        if "d" in again.list_topics():  # the fault came before the deletion began: do it again
            again.delete_topic("d")
        Broker(root, conf=CONF).maintenance(orphan_grace_ms=0)
        Broker(root, conf=CONF).create_topic("d", 1)
        ledger.acked = {k: v for k, v in ledger.acked.items() if k[0] != "d"}
    check_store(root, ledger, scenario.compacted, scenario.expiring)
    b.close()
    return injector, ledger


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_fault_at_every_step_loses_nothing(scenario, tmp_path, disk_tmp_path, monkeypatch):
    if scenario.direct_io:
        tmp_path = disk_tmp_path
    steps = _run(str(tmp_path / "count"), scenario, monkeypatch)[0].steps
    assert steps > 0
    for at in range(1, steps + 1):
        for fault in FAULTS:
            root = str(tmp_path / f"{at}-{FAULTS.index(fault)}")
            injector, _ = _run(root, scenario, monkeypatch, at, fault)
            assert injector.fired or injector.steps < at


class _StopAfter(threading.Event):
    """A shutdown's stop that is set once housekeeping has looked at it ``looks`` times: so a stop
    lands at each point housekeeping looks, in turn."""

    def __init__(self, looks: int):
        super().__init__()
        self.looks = looks

    def is_set(self) -> bool:
        self.looks -= 1
        return self.looks < 0


def _rewritten_store(root: str, operation: str) -> Broker:
    """Six one-entry ledgers for the operation to rewrite: keyed ones to compact, or small ones to
    merge. Compacted in passes, the map holds one batch, and the records of 400 KB come out as
    ledgers of 1 MiB, so that a stop lands after some are written."""
    conf: dict[str, object] = {"managedLedgerMaxEntriesPerLedger": 1, "managedLedgerMergeInPassing": 0}
    in_passes = operation == "compaction in passes"
    if in_passes:
        conf.update({"log.cleaner.dedupe.buffer.size": 1, "maintenanceTargetLedgerMbytes": 1})
    b = Broker(root, conf=conf)
    b.create_topic("t", 1, config={"cleanup.policy": "compact"} if operation != "merging" else {})
    for i in range(6):
        b.produce("t", [Record(b"v%d" % i + b"-" * (400_000 if in_passes else 0), key=b"k%d" % (i % 2))], 0)
    return b


def _store_state(b: Broker, root: str) -> tuple[object, ...]:
    """The log's ledgers, cleaning mark and records, and the files under the root less the
    metadata store's (a stopped compaction leaves versions behind: its mark, then its removal)."""
    view = b.admin.view("t", 0)[1]
    records = [(r.offset, r.key, r.value) for r in read_partition(b, "t", 0)[2]]
    files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    return view.ledgers, records, [f for f in files if not f.startswith("_metadata")], view.cleaning


def _assert_passes_done_whole(b: Broker, root: str, before: tuple[object, ...]) -> None:
    """A compaction in passes stopped: the passes done stand, the one under way left nothing. The
    records are those before less some superseded, and every ledger file is one the log refers to."""
    _, records, files, _ = _store_state(b, root)
    assert set(records) <= set(before[1]) and {r[1]: r for r in records} == {r[1]: r for r in before[1]}
    ml = b.managed_ledger("t", 0)
    ml.view()
    assert ml.last_known is not None
    assert {f for f in files if f.endswith(".ledger")} == ml.last_known.referenced()
    assert b.verify() == {}


@pytest.mark.parametrize("operation", ["compaction", "compaction in passes", "merging"])
def test_a_stop_at_every_point_of_a_rewrite_leaves_the_log_as_it_was(operation, tmp_path):
    """kop serve's stop (SIGTERM) at each point the background cleaner or maintenance looks at it:
    the rewrite is abandoned with HousekeepingStoppedError, and the log, its records and the files
    under the root are as before (the new ledger deleted). Without a stop the rewrite is done."""
    stopped_at = 0
    while True:
        root = str(tmp_path / str(stopped_at))
        b = _rewritten_store(root, operation)
        before = _store_state(b, root)
        stop = _StopAfter(stopped_at)
        try:
            if operation != "merging":
                b.housekeeping.clean_logs(None, stop)
            else:
                b.housekeeping.maintenance(None, orphan_grace_ms=0, stop=stop)
        except HousekeepingStoppedError:
            if operation == "compaction in passes":
                _assert_passes_done_whole(b, root, before)
            else:
                assert _store_state(b, root) == before, f"a stop at look {stopped_at} changed the store"
            stopped_at += 1
            continue
        finally:
            b.close()
        break
    after = _store_state(Broker(root), root)
    # compacted: k1's 3 stays beside k1's 5, which is in the open ledger
    assert after[0] != before[0] and after[1] == (before[1] if operation == "merging" else before[1][3:])
    entries = 6 - 1  # the last ledger is open: neither compaction nor merging takes it
    passes = 2 if operation != "merging" else 1  # compaction reads the log twice: keys, then survivors
    assert stopped_at > passes * entries, "housekeeping does not look at the stop before each entry"
