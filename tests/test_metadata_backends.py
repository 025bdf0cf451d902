"""One contract for every metadata backend, each against its server on loopback: files,
ZooKeeper, etcd, S3 (moto's server), GCS (its XML API, ``gcs_process``) and Azure Blob (Azurite)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
from kazoo.protocol.states import Callback

from kop_spark import Broker, Record
from kop_spark.broker import FetchedBatches, PartitionFetch, PartitionViews
from kop_spark.errors import (
    BadVersionError,
    ConfigError,
    MetadataStoreUnavailableError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
)
from kop_spark.record import RecordBatch
from kop_spark.storage.ledger_metadata import LedgerRecord, LogMetadata
from kop_spark.storage.metadata import etcd_watch, listings, open_metadata_store, zookeeper
from kop_spark.storage.metadata.etcd import EtcdMetadataStore
from kop_spark.storage.metadata.watches import Watches
from kop_spark.storage.metadata.zookeeper import Children, close_sessions
from kop_spark.storage.metadata_store import (
    PROBED_MAX_AGE_S,
    PROBED_UNUSED_S,
    UNPROBED,
    MetadataStore,
    ProbedCache,
    Versioned,
    update,
)

from . import servers
from .conftest import PYTHON, python_subprocess_env
from .in_flight_proxy import InFlightProxy
from .servers import BUCKET

TIMEOUT_S = 3


class Backend(NamedTuple):
    name: str
    url: str
    server: servers.Server | None

    def open(self) -> MetadataStore:
        return open_metadata_store(self.url, timeout_s=TIMEOUT_S, session_timeout_s=TIMEOUT_S)


BACKENDS = ["file", "zookeeper", "etcd", "s3", "gcs", "azure"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A fresh, empty namespace on one backend."""
    name, space = request.param, f"t{uuid.uuid4().hex[:12]}"
    if name == "file":
        return Backend(name, str(tmp_path / "metadata"), None)
    running = request.getfixturevalue("running")
    server = running[name]
    url = {
        "zookeeper": f"zk:127.0.0.1:{server.port}/{space}",
        "etcd": f"etcd:http://127.0.0.1:{server.port}/{space}",
        "s3": f"s3://{BUCKET}/{space}/_metadata",
        "gcs": f"gs://{BUCKET}/{space}/_metadata",
        "azure": f"az://{BUCKET}/{space}/_metadata",
    }[name]
    return Backend(name, url, server)


def test_create_update_delete_and_recreate(backend: Backend) -> None:
    s = backend.open()
    assert s.get("a/b") == (None, 0)
    v1 = s.create("a/b", {"n": 1})
    assert s.get("a/b") == ({"n": 1}, v1)
    with pytest.raises(BadVersionError):
        s.create("a/b", {"n": 2})
    v2 = s.put("a/b", {"n": 2}, v1)
    with pytest.raises(BadVersionError):
        s.put("a/b", {"n": 3}, v1)  # stale
    assert s.get("a/b") == ({"n": 2}, v2)
    v3 = s.put("a/b", None, v2)
    assert s.get("a/b") == (None, v3)
    v4 = s.create("a/b", {"n": 4})
    assert v1 < v2 < v3 < v4, "versions keep increasing through a deletion"
    with pytest.raises(BadVersionError):
        s.put("a/b", {"n": 5}, v2)  # a version from before the deletion
    assert backend.open().get("a/b") == ({"n": 4}, v4), "a second client sees the same"


def test_a_stale_writer_loses_even_when_the_value_came_back(backend: Backend) -> None:
    """ABA: on S3 an e-tag is a hash of the content, so the same value written again would match
    a stale writer's If-Match, were the version not part of what is stored."""
    a, b = backend.open(), backend.open()
    v1 = a.create("k", {"n": 1})
    assert a.get("k") == ({"n": 1}, v1)
    v2 = b.put("k", {"n": 2}, v1)
    b.put("k", {"n": 1}, v2)
    with pytest.raises(BadVersionError):
        a.put("k", {"n": 3}, v1)
    assert b.get("k").value == {"n": 1}


def test_list_keys(backend: Backend) -> None:
    s = backend.open()
    for key in ("topics/x", "topics/x/0", "topics/y", "topicsz", "sinks/w"):
        s.create(key, {"k": key})
    s.put("topics/y", None, s.get("topics/y").version)
    assert s.list_keys("topics") == ["topics/x", "topics/x/0", "topics/y"]
    assert s.list_keys("topics/x") == ["topics/x/0"]  # a directory listed, not a key
    assert s.list_keys("nothing") == []
    assert s.list_keys("") == ["sinks/w", "topics/x", "topics/x/0", "topics/y", "topicsz"]


def test_probes_of_many_keys_change_only_where_a_write_came(backend: Backend) -> None:
    """Equal probes promise no write came between them. The servers answer for many keys in one
    request (etcd, ZooKeeper, object stores' listings), so they must give a probe of every key."""
    s = backend.open()
    keys = [f"ml/p{i}" for i in range(140)]  # past one etcd transaction's 128 operations
    for key in keys:
        s.create(key, {"k": key})
    before = s.probe_many([*keys, "ml/absent"])
    update(s, "ml/p7", lambda v: {**(v or {}), "n": 1})
    update(s, "ml/p139", lambda v: None)
    after = s.probe_many([*keys, "ml/absent"])
    assert set(before) == set(after) == {*keys, "ml/absent"}
    if backend.name != "file":
        assert None not in [before[k] for k in keys] and before["ml/absent"] is None
        assert [k for k in keys if before[k] != after[k]] == ["ml/p7", "ml/p139"]
    for key in ("ml/p7", "ml/p139"):
        assert before[key] is None or before[key] != after[key]


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"], indirect=True)
def test_a_value_read_from_an_object_store_is_kept_while_its_e_tag_stands(backend: Backend) -> None:
    """An object store's probe is the e-tag a listing gives, which every write changes (the
    version is part of what is stored): what was read stands until then, where a file's probe
    stands only ``PROBED_MAX_AGE_S``. Each read again was a billed GET: of every topic at each
    log cleaner pass, of every partition a consumer fetches from, every 5 s."""
    s, other = backend.open(), backend.open()
    s.create("k", {"n": 1})
    now, loads = [0.0], []
    cache = ProbedCache(s, monotonic=lambda: now[0])

    def look() -> dict:
        return cache.get("k", lambda: loads.append(now[0]) or s.get("k").value, s.probe_many(["k"])["k"])

    assert look() == {"n": 1}
    now[0] = 10 * PROBED_MAX_AGE_S
    assert look() == {"n": 1} and loads == [0.0]
    update(other, "k", lambda v: {"n": 2})
    assert look() == {"n": 2} and loads == [0.0, now[0]]
    now[0] += PROBED_UNUSED_S  # looked at by no one since: a topic deleted elsewhere, say
    cache.get("j", dict, None)
    assert len(cache) == 0


def test_recent_probes_stand_in_for_a_parked_look_but_never_past_a_write_through_the_store(backend: Backend) -> None:
    """A parked fetch looks again every 50 ms for other processes' writes; on an object store each
    look was a LIST, billed, one for each idle consumer of a topic. A probe taken that recently may
    stand in, but never past a write through the same store: a fetch that its server wakes for its
    own append must see it. Another process's write is seen by the next look that takes none. A
    look after a write here takes the listing patched with the object written, as a new listing
    shows it: the server's own appends each made the next look list again."""
    s, other = backend.open(), backend.open()
    keys = [f"ml/p{i}" for i in range(5)]
    for key in keys:
        s.create(key, {"k": key})
    since = len(backend.server.log.read_text()) if backend.name == "s3" and backend.server else 0
    before = s.probe_many(keys, 60)
    update(other, "ml/p1", lambda v: {**(v or {}), "n": 1})
    shared = s.probe_many(keys, 60)
    fresh = s.probe_many(keys)
    update(s, "ml/p3", lambda v: {**(v or {}), "n": 1})
    after_own = s.probe_many(keys, 60)
    kept = backend.name in ("s3", "gcs", "azure")
    assert shared == (before if kept else fresh)
    changed = [k for k in keys if fresh[k] is None or fresh[k] != before[k]]
    assert changed == (keys if backend.name == "file" else ["ml/p1"])  # files written moments ago probe None
    assert after_own["ml/p3"] is None or after_own["ml/p3"] != fresh["ml/p3"]
    if kept:
        assert after_own == s.probe_many(keys), "the listing patched with the write is not as a new one"
    if backend.name == "s3" and backend.server:
        listings = [r for r in servers.requests_since(backend.server, since, '"GET ') if "list-type=2" in r]
        assert len(listings) == 3, "the second look, or the look after a write here, listed again"


def test_probes_that_may_take_a_recent_listing_wait_for_one_under_way(running: dict[str, servers.Server]) -> None:
    """The members of a group look at their partitions at about the same moments: each listed,
    though any one listing could have stood in for all. A second such probe of the same keys waits
    for the listing under way (held here until a second request comes, or 3 s, longer than the 1.5 s
    it takes listings within) and takes it; one of other keys of the directory (another topic's)
    lists beside it."""
    moto, url = running["s3"], f"s3://{BUCKET}/t{uuid.uuid4().hex[:12]}/_metadata"
    keys = [f"ml/p{i}" for i in range(4)]
    direct = open_metadata_store(url, timeout_s=TIMEOUT_S)
    for key in keys:
        direct.create(key, {"k": key})
    first, second, at_once, listings = _probe_beside_one_under_way(moto, url, keys, keys)
    assert second == first and all(second.values()) and (at_once, listings) == (1, 1)
    _, second, at_once, listings = _probe_beside_one_under_way(moto, url, keys[:2], keys[2:])
    assert all(second.values()) and (at_once, listings) == (2, 2)


def test_listings_of_keys_no_longer_probed_are_dropped_in_time() -> None:
    """A directory's listings are kept by the keys they cover: a server's consumers move between
    topics, and a listing of keys no one probes any more would stay as long as the server ran."""
    now, made = [0.0], []
    kept = listings.RecentListings(monotonic=lambda: now[0])

    def listing(name: str) -> Callable[[], list]:
        return lambda: made.append(name) or []

    kept.listed("d", "a", "b", 1000, listing("old"))
    now[0] = listings.LISTINGS_KEPT_S + 1
    kept.listed("d", "c", "d", 1000, listing("other keys"))  # the old listing goes now
    kept.listed("d", "a", "b", 1000, listing("again"))
    assert made == ["old", "other keys", "again"]


def test_a_listing_under_way_during_a_write_here_is_kept_with_the_object_written() -> None:
    """A write here patches the listings kept with the object it wrote, and one under way as it
    ends too, which may show the object before it; a write whose object is not known (no e-tag)
    cannot be patched in, and the directory is listed again."""
    kept = listings.RecentListings()

    def listing_beside(path: str, written: dict | None) -> Callable[[], list]:
        def listing() -> list:
            kept.wrote(path, written)  # lands while the listing is under way, after it passed the object
            return [{"path": "d/a", "e_tag": "1"}, {"path": "d/b", "e_tag": "1"}]

        return listing

    def unlisted() -> list:
        raise AssertionError("listed again")

    def tags(objects: list) -> dict:
        return {o["path"]: o["e_tag"] for o in objects}

    assert tags(kept.listed("d", "d/a", "d/b", 60, listing_beside("d/b", {"path": "d/b", "e_tag": "2"}))) == {
        "d/a": "1",
        "d/b": "2",
    }
    assert tags(kept.listed("d", "d/a", "d/b", 60, unlisted)) == {"d/a": "1", "d/b": "2"}
    kept.wrote("d/a", {"path": "d/a", "e_tag": "3"})
    kept.wrote("d/c", {"path": "d/c", "e_tag": "1"})  # beyond the listing's keys: not in it
    assert tags(kept.listed("d", "d/a", "d/b", 60, unlisted)) == {"d/a": "3", "d/b": "2"}
    kept.wrote("d/a", None)
    made: list[list] = []
    kept.listed("d", "d/a", "d/b", 60, lambda: made.append([]) or [])
    kept.listed("d", "d/a", "d/b", 0, listing_beside("d/b", None))
    kept.listed("d", "d/a", "d/b", 60, lambda: made.append([]) or [])
    assert len(made) == 2, "a listing taken beside a write not known was kept"


def _probe_beside_one_under_way(
    moto: servers.Server, url: str, first_keys: list[str], second_keys: list[str]
) -> tuple[dict, dict, int, int]:
    """Each probe's answer (taking listings 1.5 s old) of a fresh client, the second made while the
    first's listing is held; the most requests held at once, and the listings made."""
    with InFlightProxy(moto.port, gather=2, hold_s=3) as proxy, ThreadPoolExecutor(1) as pool:
        s = open_metadata_store(url, timeout_s=30, options={"aws_endpoint_url": proxy.url})
        since = len(moto.log.read_text())
        first = pool.submit(s.probe_many, first_keys, 1.5)
        proxy.wait_in_flight(1)
        second = s.probe_many(second_keys, 1.5)
        answers = first.result(), second, proxy.most_in_flight
    listings = [r for r in servers.requests_since(moto, since, '"GET ') if "list-type=2" in r]
    return *answers, len(listings)


def _large_managed_ledger(ledgers: int) -> dict:
    now = 1_790_000_000_000
    records = [
        LedgerRecord.new(
            i,
            f"ledgers/public/default/events-partition-0/{i:016x}.ledger",
            i * 1000,
            now + i,
            entries=random.randrange(1, 1000),
            records=1000,
            length=random.randrange(1 << 20, 1 << 27),
            max_timestamp=now + i * 7,
        )
        for i in range(ledgers)
    ]
    return LogMetadata(0, ledgers * 1000, records).to_json()


def test_a_managed_ledger_reads_back_what_every_version_wrote() -> None:
    """Ledger records are read by position; one an earlier version wrote, without ``modified_ms``,
    still reads, to its default, and one with a field this version does not know is refused."""
    value = _large_managed_ledger(50)
    meta = LogMetadata.from_json(value)
    assert meta.to_json() == value
    with pytest.raises(TypeError):
        LedgerRecord.from_json({**value["ledgers"][0], "later_field": 1})
    for ledger in value["ledgers"]:
        del ledger["modified_ms"]
    old = LogMetadata.from_json(value)
    assert [l._replace(modified_ms=-1) for l in meta.ledgers] == old.ledgers


def test_values_at_the_size_of_a_large_managed_ledger(backend: Backend) -> None:
    value = _large_managed_ledger(20_000)  # several MB of JSON: more than any backend takes raw
    s = backend.open()
    v = s.create("ledgers/big", value)
    assert backend.open().get("ledgers/big") == (value, v)
    value["next_offset"] += 1
    assert s.put("ledgers/big", value, v) > v


COUNTER = r"""
import sys
from kop_spark.storage.metadata import open_metadata_store
from kop_spark.storage.metadata_store import update

store = open_metadata_store(sys.argv[1], timeout_s=10, session_timeout_s=10)
me, rounds = sys.argv[2], int(sys.argv[3])
for i in range(rounds):
    def change(value):
        value = dict(value)
        value["n"] += 1
        value[me] = value.get(me, 0) + 1
        return value
    update(store, "counter", change)
    print(i + 1, flush=True)  # acknowledged
"""


def _counter(backend: Backend, name: str, rounds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-c", COUNTER, backend.url, name, str(rounds)],
        env=python_subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )


def test_racing_processes_lose_no_update(backend: Backend) -> None:
    """Three processes increment one value by compare-and-set: exactly one winner per version."""
    s = backend.open()
    s.create("counter", {"n": 0})
    procs = [_counter(backend, f"w{i}", 40) for i in range(3)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0
        assert out.split()[-1] == "40"
    assert s.get("counter").value == {"n": 120, "w0": 40, "w1": 40, "w2": 40}


def test_a_holder_killed_mid_operation_leaves_the_store_whole(backend: Backend) -> None:
    s = backend.open()
    s.create("counter", {"n": 0})
    rng = random.Random(7)
    before = 0
    for round_ in range(3):
        p = _counter(backend, f"k{round_}", 10_000)
        assert p.stdout is not None
        printed = [p.stdout.readline() for _ in range(rng.randrange(5, 40))]
        p.send_signal(signal.SIGKILL)
        p.wait()
        printed += p.stdout.read().split()
        acknowledged = int(printed[-1])
        # The killed process's last write may still be on its way to the server (Azurite once
        # took it after this read). A write of our own fences it: a compare-and-set the dead
        # process sent against an older version can no longer land, so the count read is final.
        n = update(s, "counter", lambda v, r=round_: {**v, "fenced": r}).value["n"]
        # Every acknowledged increment is there; one more may have landed unacknowledged.
        assert before + acknowledged <= n <= before + acknowledged + 1
        before = n
    assert update(s, "counter", lambda v: {**v, "n": v["n"] + 1})
    assert s.get("counter").value["n"] == before + 1


def test_zookeeper_looks_at_watched_keys_ask_the_server_nothing_until_it_tells_of_a_change(
    running: dict[str, servers.Server],
) -> None:
    """A parked fetch looks at its partitions several times a second, and a produce reads its
    topic: on ZooKeeper each look asked the server about every key. A key read or probed once is
    watched, and looks at it ask nothing until ZooKeeper tells of its next change."""
    server = running["zookeeper"]
    url = _url("zookeeper", server)
    s = Backend("zookeeper", url, server).open()
    keys = [f"ml/p{i}" for i in range(30)]
    for key in keys:
        s.create(key, {"k": key})
    first = s.probe_many(keys)
    s.create("topic", {"partitions": 1})
    assert s.probe("topic") is None  # never looked at: read it, which watches it
    topic = s.get("topic")
    received = servers.zookeeper_packets(server.port)[0]
    looks = [s.probe_many(keys) for _ in range(20)]
    singles = {key: s.probe(key) for key in [*keys, "topic"]}
    assert servers.zookeeper_packets(server.port)[0] - received <= 5, "looks at unchanged keys asked the server"
    assert looks == [first] * 20 and singles == {**first, "topic": singles["topic"]} and None not in singles.values()
    # A key only read and written (a CAS's) is not watched: each write would cost an event.
    s.create("cas", {"n": 0})
    sent = servers.zookeeper_packets(server.port)[1]
    for _ in range(20):
        update(s, "cas", lambda v: {"n": v["n"] + 1})
    assert servers.zookeeper_packets(server.port)[1] - sent <= 2 * 20 + 5, "the CAS's reads set watches"
    assert s.get("topic") == topic
    _update_elsewhere(url, "ml/p7")
    changed = _await_change(s, keys, first)
    assert changed == ["ml/p7"] and s.get("ml/p7").value == {"k": "ml/p7", "n": 1}
    # A write through this process's session is seen at once, told of or not yet.
    with _events_held(f"127.0.0.1:{server.port}"):
        update(Backend("zookeeper", url, server).open(), "ml/p3", lambda v: {**(v or {}), "n": 1})
        assert s.probe("ml/p3") is None and s.probe_many(["ml/p3"])["ml/p3"] != first["ml/p3"]


def test_a_zookeeper_listing_again_asks_nothing_and_sees_every_change(running: dict[str, servers.Server]) -> None:
    """Every topic is listed for a Metadata request of all topics, and at every look of a Spark
    stream subscribed by pattern: on ZooKeeper a walk of the tree, a request a znode, each time."""
    server = running["zookeeper"]
    url = _url("zookeeper", server)
    s = Backend("zookeeper", url, server).open()
    keys = [f"topics/t{i}" for i in range(20)] + ["topics/p/child"]
    for key in keys:
        s.create(key, {"k": key})
    listed = s.list_keys("topics")
    received = servers.zookeeper_packets(server.port)[0]
    assert [s.list_keys("topics") for _ in range(5)] == [listed] * 5 == [sorted(keys)] * 5
    assert servers.zookeeper_packets(server.port)[0] - received <= 5, "a listing of unchanged keys asked the server"
    _update_elsewhere(url, "topics/new")  # a new child of a listed znode
    _update_elsewhere(url, "topics/p")  # data for a znode that was only a parent
    deadline = time.monotonic() + 10
    while len(s.list_keys("topics")) < len(keys) + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.list_keys("topics") == sorted([*keys, "topics/new", "topics/p"])
    # A key made through this process's session is listed at once, told of or not yet.
    with _events_held(f"127.0.0.1:{server.port}"):
        Backend("zookeeper", url, server).open().create("topics/mine", {"k": 1})
        assert "topics/mine" in s.list_keys("topics")


def test_a_zookeeper_session_that_lost_its_connection_watches_its_keys_again(
    running: dict[str, servers.Server],
) -> None:
    """kazoo drops every watch when its connection is lost, and sets none again: a key watched
    before would have looked unchanged for ever after."""
    server = running["zookeeper"]
    url = _url("zookeeper", server)
    s = Backend("zookeeper", url, server).open()
    s.create("k", {"n": 0})
    s.create("dir/a", {"n": 0})
    s.create("other", {"n": 0})
    before, listed = s.probe_many(["k"]), s.list_keys("dir")
    server.stop(graceful=True)
    server.start()
    _eventually(lambda: s.get("other"))  # reconnected; "k" and "dir" untouched since their watches were lost
    _update_elsewhere(url, "k")
    _update_elsewhere(url, "dir/b")
    assert _await_change(s, ["k"], before) == ["k"]
    assert listed == ["dir/a"] and s.list_keys("dir") == ["dir/a", "dir/b"]


def test_a_watch_told_of_a_change_before_its_answer_is_kept_keeps_nothing() -> None:
    """kazoo hands watch events to a thread of their own, which may run before the thread that
    asked keeps the answer: kept then, the token would stand for ever, its watch spent."""
    watches = Watches()
    mark = watches.mark("/ml/p0")
    watches.changed("/ml/p0")  # the change the watch set by that request tells of
    watches.keep("/ml/p0", mark, (1, 2))
    watches.keep_listing("/ml/p0", mark, Children(["x"], True))
    assert watches.look("/ml/p0") is UNPROBED and watches.listing("/ml/p0") is None
    mark = watches.mark("/ml/p0")
    watches.away()
    watches.keep("/ml/p0", mark, (1, 3))
    assert watches.look("/ml/p0") is UNPROBED
    watches.keep("/ml/p0", watches.mark("/ml/p0"), (1, 4))
    assert watches.look("/ml/p0") == (1, 4)
    # etcd's watch is one stream: while it is down, and until it stands again, nothing is kept.
    watches.away(standing=False)
    mark = watches.mark("/ml/p0")
    watches.keep("/ml/p0", mark, (1, 5))
    watches.standing()
    watches.keep_listing("/ml/p0", mark, Children(["y"], True))
    assert watches.look("/ml/p0") is UNPROBED and watches.listing("/ml/p0") is None
    watches.keep("/ml/p0", watches.mark("/ml/p0"), (1, 6))
    assert watches.look("/ml/p0") == (1, 6)


def test_etcd_looks_at_unchanged_keys_ask_nothing_while_its_watch_stands(running: dict[str, servers.Server]) -> None:
    """As on ZooKeeper, but by one watch of every key of the store (as Pulsar's etcd store keeps),
    started by looks at many keys (a fetch's, a stream's): a process that only reads and writes
    keys and looks at one (a producer's at its topic) starts none, since the watch brings it
    every write's value."""
    server = running["etcd"]
    backend = Backend("etcd", _url("etcd", server), server)
    writer = _etcd(Backend("etcd", _url("etcd", server), server))
    writer.create("cas", {"n": 0})
    for _ in range(5):
        assert writer.probe("cas") is None
        update(writer, "cas", lambda v: {"n": v["n"] + 1})
    assert etcd_watch.running_watch(writer.endpoints, _prefix_of(writer)) is None, "a producer started a watch"
    s = _etcd(backend)
    keys = [f"ml/p{i}" for i in range(30)]
    for key in [*keys, "topic"]:
        s.create(key, {"k": key})
    _await_standing(s)  # from here on, what is kept stands until told of a change
    first = s.probe_many(keys)
    assert s.probe("topic") is None  # never looked at: read it, which keeps it
    topic = s.get("topic")
    requests = _etcd_requests(backend)
    looks = [s.probe_many(keys) for _ in range(20)]
    singles = {key: s.probe(key) for key in [*keys, "topic"]}
    assert _etcd_requests(backend) - requests <= 2, "looks at unchanged keys asked etcd"  # 20 if they asked
    assert looks == [first] * 20 and singles == {**first, "topic": singles["topic"]} and None not in singles.values()
    assert s.get("topic") == topic
    _update_elsewhere(backend.url, "ml/p7")
    assert _await_change(s, keys, first) == ["ml/p7"] and s.get("ml/p7").value == {"k": "ml/p7", "n": 1}
    # A write through this process is seen at once, told of or not yet.
    with _etcd_events_held(s):
        update(_etcd(backend), "ml/p3", lambda v: {**(v or {}), "n": 1})
        assert s.probe("ml/p3") is None and s.probe_many(["ml/p3"])["ml/p3"] != first["ml/p3"]


def test_an_etcd_listing_again_asks_nothing_and_sees_every_key_made(running: dict[str, servers.Server]) -> None:
    server = running["etcd"]
    backend = Backend("etcd", _url("etcd", server), server)
    s = _etcd(backend)
    keys = [f"topics/t{i}" for i in range(20)] + ["topics/p/child"]
    for key in keys:
        s.create(key, {"k": key})
    _await_standing(s)
    listed, everything = s.list_keys("topics"), s.list_keys("")
    requests = _etcd_requests(backend)
    assert [s.list_keys("topics") for _ in range(5)] == [listed] * 5 == [sorted(keys)] * 5
    assert s.list_keys("") == everything == sorted(keys)
    assert _etcd_requests(backend) - requests <= 2, "a listing of unchanged keys asked etcd"  # 6 if they asked
    _update_elsewhere(backend.url, "topics/p")  # a key where there was only a parent
    _update_elsewhere(backend.url, "topics/p/child")  # a change of a listed key's value lists nothing new
    _update_elsewhere(backend.url, "topics/new")
    deadline = time.monotonic() + 10
    while len(s.list_keys("topics")) < len(keys) + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.list_keys("topics") == s.list_keys("") == sorted([*keys, "topics/new", "topics/p"])
    assert s.list_keys("topics/p") == ["topics/p/child"]
    with _etcd_events_held(s):
        _etcd(backend).create("topics/mine", {"k": 1})
        assert "topics/mine" in s.list_keys("topics") and "topics/mine" in s.list_keys("")


def test_an_etcd_watch_whose_stream_broke_keeps_nothing_from_before(running: dict[str, servers.Server]) -> None:
    """A change made while the watch was down (here between etcd's restart and the watch made
    again) is told by no stream: what was kept before must go with the stream."""
    server = running["etcd"]
    url = _url("etcd", server)
    s = _etcd(Backend("etcd", url, server))
    s.create("k", {"n": 0})
    s.create("dir/a", {"n": 0})
    _await_standing(s)
    before, listed = s.probe_many(["k"]), s.list_keys("dir")
    with etcd_watch._watchers_lock:  # holds the watch's thread before it watches again
        server.stop(graceful=True)
        server.start()
        _update_elsewhere(url, "k")
        _update_elsewhere(url, "dir/b")
    assert _await_change(s, ["k"], before) == ["k"]
    assert listed == ["dir/a"] and s.list_keys("dir") == ["dir/a", "dir/b"]


def test_an_etcd_watch_no_one_looks_through_stops(
    running: dict[str, servers.Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(etcd_watch, "IDLE_S", 0.5)
    server = running["etcd"]
    s = _etcd(Backend("etcd", _url("etcd", server), server))
    s.create("k", {"n": 0})
    watch = _await_standing(s)
    watch._thread.join(10)
    assert not watch._thread.is_alive() and etcd_watch.running_watch(s.endpoints, _prefix_of(s)) is None
    assert _await_standing(s) is not watch and s.probe_many(["k"]) == {"k": s.get("k").version}


def _etcd(backend: Backend) -> EtcdMetadataStore:
    store = backend.open()
    assert isinstance(store, EtcdMetadataStore)
    return store


def _prefix_of(store: EtcdMetadataStore) -> bytes:
    return store._prefix.encode()


def _await_standing(s: EtcdMetadataStore) -> etcd_watch.EtcdWatch:
    """The store's watch, started by a look, once it stands (until then, looks ask etcd)."""
    deadline = time.monotonic() + 10
    while True:
        s.probe_many([])
        watch = etcd_watch.running_watch(s.endpoints, _prefix_of(s))
        if watch is not None and watch.watches.mark("") is not None:
            return watch
        assert time.monotonic() < deadline, "the etcd watch never stood"
        time.sleep(0.01)


@contextlib.contextmanager
def _etcd_events_held(s: EtcdMetadataStore) -> Iterator[None]:
    """Hold up the etcd watch's thread at its next event, as a busy machine may."""
    watch, release = _await_standing(s), threading.Event()
    told = watch._told
    watch._told = lambda key, event: (release.wait(30), told(key, event))  # type: ignore[method-assign]  # held
    try:
        yield
    finally:
        release.set()
        del watch._told


@contextlib.contextmanager
def _events_held(hosts: str) -> Iterator[None]:
    """Hold up the thread that hands this process's ZooKeeper session's watch events on, as a
    busy machine may: what happens meanwhile must not wait for them."""
    release = threading.Event()
    session = zookeeper._sessions[(hosts, os.getpid())]
    session.client.handler.dispatch_callback(Callback("watch", lambda: release.wait(30), ()))
    try:
        yield
    finally:
        release.set()


def _update_elsewhere(url: str, key: str) -> None:
    """Add ``n: 1`` to ``key`` (made if need be) from another process: another ZooKeeper session."""
    code = (
        "import sys; from kop_spark.storage.metadata import open_metadata_store; "
        "from kop_spark.storage.metadata_store import update; "
        "update(open_metadata_store(sys.argv[1], timeout_s=10), sys.argv[2], lambda v: {**(v or {}), 'n': 1})"
    )
    subprocess.run([PYTHON, "-c", code, url, key], env=python_subprocess_env(), check=True, timeout=60)


def _await_change(s: MetadataStore, keys: list[str], before: dict, timeout_s: float = 10) -> list[str]:
    """The keys whose probes differ from ``before``, once one does: ZooKeeper tells of another
    session's change as its server applies it, after that session was answered."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = s.probe_many(keys)
        changed = [k for k in keys if now[k] != before[k]]
        if changed or time.monotonic() > deadline:
            return changed
        time.sleep(0.01)


def test_a_process_done_with_zookeeper_ends_its_sessions_and_a_store_used_after_opens_another(
    running: dict[str, servers.Server],
) -> None:
    def sessions() -> list[str]:
        return [t.name for t in threading.enumerate() if "zk_loop" in t.name]

    s = open_metadata_store(f"zk:127.0.0.1:{running['zookeeper'].port}/t{uuid.uuid4().hex[:12]}", timeout_s=10)
    version = s.create("a", {"n": 1})
    assert sessions()
    close_sessions()
    assert sessions() == []  # kazoo's thread stopped: nothing reconnects in the background
    assert s.get("a") == ({"n": 1}, version)


@pytest.mark.parametrize("url", ["zk:127.0.0.1:{port}", "etcd:http://127.0.0.1:{port}", "s3://nobucket/x"])
def test_nothing_listening_is_an_error_naming_it_in_bounded_time(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    port = servers.free_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    s = open_metadata_store(url.format(port=port), timeout_s=1, session_timeout_s=1)
    started = time.monotonic()
    try:
        with pytest.raises(MetadataStoreUnavailableError, match=f"127.0.0.1:{port}|nobucket"):
            s.get("a")
    finally:  # a ZooKeeper session would go on reconnecting, with kazoo's jitter from ``random``, all run
        close_sessions(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 20  # bounded: not a hang (the bound is loose on purpose)


@pytest.mark.parametrize("name", ["zookeeper", "etcd", "s3", "gcs", "azure"])
def test_a_hung_server_is_an_error_then_works_again(name: str, running: dict[str, servers.Server]) -> None:
    """SIGSTOP: the server takes connections into its backlog and never answers, the worst case
    for a client. Calls fail within bounded time, nothing unstored is acknowledged, and once it
    answers again the store goes on with nothing lost."""
    server = running[name]
    space = f"h{uuid.uuid4().hex[:10]}"
    url = {
        "zookeeper": f"zk:127.0.0.1:{server.port}/{space}",
        "etcd": f"etcd:http://127.0.0.1:{server.port}/{space}",
        "s3": f"s3://{BUCKET}/{space}",
        "gcs": f"gs://{BUCKET}/{space}",
        "azure": f"az://{BUCKET}/{space}",
    }[name]
    s = Backend(name, url, server).open()
    v = s.create("k", {"n": 1})
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        _wait_stopped(server.process.pid)
        for attempt in (lambda: s.get("k"), lambda: s.put("k", {"n": 2}, v)):
            started = time.monotonic()
            with pytest.raises(MetadataStoreUnavailableError):
                attempt()
            assert time.monotonic() - started < 10 * TIMEOUT_S
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    _eventually(lambda: s.get("k"))
    # The write that got no answer may land even now, but only on the version it named: once the
    # store has moved past it, it can no longer change anything.
    update(s, "k", lambda value: {"n": value["n"] + 10})
    assert s.get("k").value in ({"n": 11}, {"n": 12})


@pytest.mark.parametrize("name", ["zookeeper", "etcd", "azure"])
def test_a_restarted_server_serves_what_it_stored(name: str, running: dict[str, servers.Server]) -> None:
    server = running[name]
    s = Backend(name, _url(name, server), server).open()
    v = s.create("k", {"n": 1})
    server.stop(graceful=True)
    try:
        with pytest.raises(MetadataStoreUnavailableError):
            s.put("k", {"n": 2}, v)
    finally:
        server.start()
    current = _eventually(lambda: s.get("k"))
    assert current.value == {"n": 1}
    assert s.put("k", {"n": 3}, current.version) > current.version


def test_etcd_calls_share_a_kept_connection_which_a_restart_while_idle_does_not_fail(
    running: dict[str, servers.Server],
) -> None:
    server = running["etcd"]
    s = Backend("etcd", _url("etcd", server), server).open()
    opened = _connections_to(server.port)
    v = s.create("k", {"n": 1})
    for _ in range(20):
        s.get("k")
    assert len(_connections_to(server.port) - opened) <= 1
    server.stop(graceful=True)
    server.start()
    assert s.put("k", {"n": 2}, v) > v  # the first call after the restart, on the kept connection


def _connections_to(port: int) -> set[str]:
    """This machine's TCP connections to ``port``, by their client's address, those closed lately
    (TIME_WAIT, at whichever end closed first) too."""
    clients = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        here, there = line.split()[1:3]
        if int(there.split(":")[1], 16) == port:
            clients.add(here)
        elif int(here.split(":")[1], 16) == port:
            clients.add(there)
    return clients


def _wait_stopped(pid: int, timeout_s: float = 10) -> None:
    """Return once every thread of ``pid`` is stopped: ``kill`` returns before a thread running on
    another core has taken the signal, and such a thread could still answer a request."""
    deadline = time.monotonic() + timeout_s
    tasks = Path(f"/proc/{pid}/task")
    while True:
        try:  # the state follows the parenthesised command name in /proc/<pid>/task/<tid>/stat
            states = {(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()}
        except FileNotFoundError:  # a thread ended while we looked (or the process did)
            states = {"gone"}
        if states <= {"T", "t"}:
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: thread states {states}"
        time.sleep(0.01)


def _url(name: str, server: servers.Server) -> str:
    space = f"r{uuid.uuid4().hex[:10]}"
    return {
        "zookeeper": f"zk:127.0.0.1:{server.port}/{space}",
        "etcd": f"etcd:http://127.0.0.1:{server.port}/{space}",
        "azure": f"az://{BUCKET}/{space}",
    }[name]


def _eventually(call: Callable[[], Versioned], attempts: int = 50) -> Versioned:
    """The call's result once the client has reconnected (each failure waits its own timeout)."""
    for _ in range(attempts - 1):
        try:
            return call()
        except MetadataStoreUnavailableError:
            continue
    return call()


@pytest.mark.parametrize(
    "url, named",
    [
        ("zk:", "zk:"),
        ("zk:host", "host"),
        ("zk:host:notaport", "notaport"),
        ("etcd:host:2379", "host:2379"),
        ("etcd:http://host", "http://host"),
        ("mysql://db/x", "mysql"),
        ("abfss://container/x", "abfss://container/x"),
        ("zk:h:1/../up", "up"),
    ],
)
def test_a_url_that_does_not_parse_is_refused_naming_it(url: str, named: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=named.replace(".", r"\.")):
        open_metadata_store(url)


def test_python_without_kazoo_is_told_what_to_install(tmp_path: Path) -> None:
    code = "import sys; sys.modules['kazoo'] = None\nfrom kop_spark.storage.metadata import open_metadata_store\n"
    code += "open_metadata_store('zk:127.0.0.1:2181')"
    out = subprocess.run([sys.executable, "-c", code], env=python_subprocess_env(), capture_output=True, text=True)
    assert "kop-spark[zookeeper]" in out.stderr


READER = r"""
import sys
from kop_spark import Broker
b = Broker(sys.argv[1], {"metadataStoreUrl": sys.argv[2]})
print(b.list_topics(), b.list_groups(), b.fetch_offsets("g"), len(b.fetch("t", 0, 0)) + len(b.fetch("t", 1, 0)))
"""


def test_a_broker_keeps_its_metadata_on_each_backend(backend: Backend, tmp_path: Path) -> None:
    """Topics, produce with rollover, group commits and maintenance through ``metadataStoreUrl``;
    another process on the same store sees the same."""
    conf = {"metadataStoreUrl": backend.url, "managedLedgerMaxEntriesPerLedger": 3}
    data = str(tmp_path / "data")
    with Broker(data, conf) as b:
        b.create_topic("t", 2)
        for i in range(10):
            b.produce("t", [Record(value=b"v%d" % i, key=b"k%d" % i)])
        b.commit_offsets("g", {("t", 0): 2, ("t", 1): 1})
        b.maintenance(orphan_grace_ms=0)
        written = b.fetch("t", 0, 0) + b.fetch("t", 1, 0)
        assert sorted(r.value for r in written) == sorted(b"v%d" % i for i in range(10))
    out = subprocess.run([PYTHON, "-c", READER, data, backend.url], env=python_subprocess_env(), capture_output=True)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().split("] ", 2)[:2] == ["['t'", "['g'"]
    assert "OffsetAndMetadata(offset=2" in out.stdout.decode() and out.stdout.decode().strip().endswith(" 10")
    if backend.name != "file":
        assert not (tmp_path / "data" / "_metadata").exists(), "the metadata went to the backend, not beside the data"


def test_a_fetch_of_many_partitions_sees_another_brokers_append_at_once_and_reads_only_what_changed(
    backend: Backend, tmp_path: Path
) -> None:
    conf = {"metadataStoreUrl": backend.url}
    data = str(tmp_path / "data")
    with Broker(data, conf) as reader, Broker(data, conf) as writer:
        writer.create_topic("t", 40)
        wanted = [PartitionFetch("t", p, 0, 1 << 20) for p in range(40)]
        assert _ends(reader.fetch_partitions(wanted, 1 << 20)) == [0] * 40
        writer.produce("t", [Record(value=b"x")], 3)
        requests = _etcd_requests(backend)
        fetched = reader.fetch_partitions(
            [*wanted, PartitionFetch("t", 40, 0, 1), PartitionFetch("t", 3, 5, 1)], 1 << 20
        )
        if backend.name == "etcd":  # a transaction of probes, partition 3's read, the topic's for partition 40
            assert _etcd_requests(backend) - requests <= 5, "a read a partition"
        views = PartitionViews(reader.admin, reader.store).existing([("t", 3), ("t", 40), ("gone", 0), ("t", 0)])
        assert {tp: v.log_end_offset for tp, v in views.items()} == {("t", 3): 1, ("t", 0): 0}
    assert _ends(fetched) == [1 if p == 3 else 0 for p in range(40)] + [PartitionNotFoundError, OffsetOutOfRangeError]
    assert isinstance(fetched[3], FetchedBatches) and RecordBatch(fetched[3].batches[0]).base_offset == 0


def _ends(fetched: list[FetchedBatches | Exception]) -> list[int | type]:
    """Each partition's high watermark, or the type of its error."""
    return [f.high_watermark if isinstance(f, FetchedBatches) else type(f) for f in fetched]


def _etcd_requests(backend: Backend) -> int:
    return servers.etcd_requests(backend.server.port) if backend.server and backend.name == "etcd" else 0


def test_a_broker_refuses_a_bad_metadata_url_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="metadataStoreUrl 'zk:nohost'"):
        Broker(str(tmp_path / "data"), {"metadataStoreUrl": "zk:nohost"})
    assert not (tmp_path / "data").exists()
