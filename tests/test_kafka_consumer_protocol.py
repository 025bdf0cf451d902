"""Consumer groups over the wire, Kafka's consumer rebalance protocol (KIP-848,
``group.protocol=consumer``): real librdkafka consumers share a topic with no partition ever
owned by two, take over a killed member's partitions, follow a regex subscription; a static
member restarts without moving anyone's partitions; members go on through a restart of the server; the group shows in ``kop groups``, admin
clients and ListGroups, and fences stale commits. A group of classic consumers moves to the
consumer protocol one member at a time, as a rolling restart moves it, and back (KIP-848's online
migration), members of either protocol consuming and committing, with no partition owned by two
at any poll. The same session against librdkafka's mock cluster: test_kafka_differential."""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest
from kio.schema.errors import ErrorCode

from kop_spark import Broker
from kop_spark.broker import GroupSnapshots
from kop_spark.kafka.messages import request_class

from .group_clients import (
    assigned,
    consumed_through_a_restart,
    doomed_member,
    kop_groups,
    poll_until,
    produce,
    until_live,
)
from .kafka_wire import call, connect, kio_call, wire_request
from .kop_server import KopServer

CONF = ["group.consumer.heartbeat.interval.ms=200", "group.consumer.session.timeout.ms=3000"]


@contextlib.contextmanager
def _serving(tmp_path: Path, conf: list[str]) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 4)
        b.create_topic("ev-1", 1)
    with KopServer(root, conf) as s:
        yield s


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KopServer]:
    with _serving(tmp_path, CONF) as s:
        yield s


@pytest.fixture
def member(server: KopServer) -> Iterator[Callable[..., Consumer]]:
    """Makes members of group g; those a failed test left open are closed while the server is up
    (librdkafka destroying an open consumer-protocol member whose server is gone spins)."""
    made: list[Consumer] = []

    def make(name: str, **extra: Any) -> Consumer:
        made.append(Consumer({**_consumer_conf(server), "client.id": name, **extra}))
        return made[-1]

    yield make
    for c in made:
        with contextlib.suppress(RuntimeError):  # closed by the test
            c.close()


def _consumer_conf(server: KopServer) -> dict[str, Any]:
    return {
        "bootstrap.servers": server.bootstrap,
        "group.id": "g",
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


def never_shared(*consumers: Consumer) -> Any:
    def check() -> None:
        owned = [assigned(c) for c in consumers]
        for i, mine in enumerate(owned):
            for theirs in owned[i + 1 :]:
                assert not mine & theirs, f"partitions {mine & theirs} owned twice"

    return check


def test_members_share_the_partitions_never_owning_one_twice(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    one, two, three = (
        member("one"),
        member("two"),
        member("three"),
    )
    one.subscribe(["t"])
    poll_until([one], lambda _: assigned(one) == {0, 1, 2, 3})
    two.subscribe(["t"])
    three.subscribe(["t"])
    everyone = [one, two, three]
    poll_until(
        everyone, lambda _: sorted(len(assigned(c)) for c in everyone) == [1, 1, 2], each_round=never_shared(*everyone)
    )
    produce(server, 200)  # after the rebalance: each record is read once, by its partition's owner
    got = poll_until(everyone, lambda got: len(got) >= 200, each_round=never_shared(*everyone))
    assert len(got) == 200 and len({(p, o) for _, p, o in got}) == 200
    for c in everyone:
        assert {p for m, p, _ in got if m == c.memberid()} == assigned(c)
        c.commit(asynchronous=False)  # OffsetCommit v9, at the member's epoch
    three.close()  # it leaves: the others take its partitions
    poll_until([one, two], lambda _: assigned(one) | assigned(two) == {0, 1, 2, 3}, each_round=never_shared(one, two))
    one.close()
    two.close()
    with Broker(server.root) as b:
        committed = {tp: o.offset for tp, o in b.fetch_offsets("g").items()}
        assert committed == {("t", p): b.list_offsets("t", p, "latest") for p in range(4)}


def test_a_killed_members_partitions_move_after_its_session_timeout(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    survivor = member("survivor")
    survivor.subscribe(["t"])
    poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
    with doomed_member({"bootstrap.servers": server.bootstrap, "group.protocol": "consumer"}) as got_some:
        poll_until([survivor], lambda _: got_some.is_set() and len(assigned(survivor)) == 2)
    poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
    survivor.close()


def test_a_killed_classic_members_partitions_move_after_its_own_session_timeout(tmp_path: Path) -> None:
    with _serving(tmp_path, ["group.consumer.heartbeat.interval.ms=200"]) as server:  # the group's session: 45 s
        survivor = Consumer({**_consumer_conf(server), "client.id": "survivor"})
        try:
            survivor.subscribe(["t"])
            poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
            classic = {"bootstrap.servers": server.bootstrap, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
            with doomed_member(classic) as got_some:  # a classic member of the consumer-protocol group
                poll_until([survivor], lambda _: got_some.is_set() and len(assigned(survivor)) == 2)
            poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})  # within 30 s: its own 6 s
        finally:
            survivor.close()  # while the server is up (see ``member``)


def test_a_static_member_restarts_without_moving_anyone_elses_partitions(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    moves: list[str] = []
    other = member("other", **{"group.instance.id": "other"})
    other.subscribe(
        ["t"], on_assign=lambda c, ps: moves.append("assign"), on_revoke=lambda c, ps: moves.append("revoke")
    )
    static = member("static", **{"group.instance.id": "static"})
    static.subscribe(["t"])
    poll_until([other, static], lambda _: len(assigned(other)) == len(assigned(static)) == 2)
    before, seen = assigned(static), len(moves)
    static.close()  # a static member steps away (epoch -2): its partitions wait for it
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    (future,) = admin.describe_consumer_groups(["g"]).values()
    assert sorted(m.client_id for m in future.result(30).members) == ["other", "static"]  # still there
    again = member("static", **{"group.instance.id": "static"})
    again.subscribe(["t"])
    poll_until([other, again], lambda _: assigned(again) == before)
    assert len(moves) == seen and len(assigned(other)) == 2, "the other member's partitions moved"
    other.close()
    again.close()


@pytest.mark.parametrize("stop", ["kill", "stop"])
def test_members_of_either_protocol_go_on_through_a_server_restart_without_a_rebalance(
    tmp_path: Path, stop: str
) -> None:
    """As after a Kafka coordinator's failover: the restarted server takes the group up as it was
    (epochs, target, each member's partitions), so heartbeats and commits are accepted and nobody's
    partitions move, a classic member's (KIP-848's online migration) included."""
    conf = ["group.consumer.heartbeat.interval.ms=200", "group.consumer.session.timeout.ms=10000"]
    with _serving(tmp_path, conf) as server:
        moves: list[str] = []
        modern = Consumer({**_consumer_conf(server), "client.id": "modern"})
        classic = _classic(server, "classic", "cooperative-sticky")
        try:
            for name, c in (("modern", modern), ("classic", classic)):
                c.subscribe(
                    ["t"],
                    on_assign=lambda _, ps, n=name: moves.append(f"{n} assigned {len(ps)}"),
                    on_revoke=lambda _, ps, n=name: moves.append(f"{n} revoked {len(ps)}"),
                    on_lost=lambda _, ps, n=name: moves.append(f"{n} lost {len(ps)}"),
                )
            both = [modern, classic]
            poll_until(
                both, lambda _: len(assigned(modern)) == len(assigned(classic)) == 2, each_round=never_shared(*both)
            )
            kept = _kept(server, 2)
            assert kept["type"] == "consumer"
            before = (assigned(modern), assigned(classic), list(moves))
            consumed_through_a_restart(server, both, stop)
            _commit_all(both)  # at the epoch, and the generation, each was in before the restart
            assert (assigned(modern), assigned(classic), moves) == before
            assert _kept(server, 2)["epoch"] == kept["epoch"]
        finally:
            modern.close()  # while the server is up (see ``member``)
            classic.close()
        assert _kept(server, 0) == {}  # no members: nothing kept, nobody to restore


def _kept(server: KopServer, members: int) -> dict[str, Any]:
    """Until the server keeps group g, for a restart, with ``members`` members (none: nothing kept)."""
    deadline = time.monotonic() + 30
    with Broker(server.root) as b:
        while len((kept := GroupSnapshots(b.store).load().get("g", {})).get("members", ())) != members:
            assert time.monotonic() < deadline, f"the group was not kept with {members} members: {kept}"
            time.sleep(0.05)
    return kept


def test_a_regex_subscription_takes_topics_created_later(server: KopServer, member: Callable[..., Consumer]) -> None:
    c = member("regex")
    c.subscribe(["^ev-.*"])

    def owns(*topics: str) -> bool:
        return {tp.topic for tp in c.assignment()} == set(topics)

    poll_until([c], lambda _: owns("ev-1"))
    with Broker(server.root) as b:  # by another process: the server sees it within a second
        b.create_topic("ev-2", 2)
    poll_until([c], lambda _: owns("ev-1", "ev-2") and len(c.assignment()) == 3)
    c.close()


def test_a_member_subscribing_by_a_full_name_is_assigned_the_topic(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    """The server assigns: a subscription to ``persistent://public/default/t`` is one to ``t``."""
    c = member("full")
    c.subscribe(["persistent://public/default/t"])
    produce(server, 20)
    got = poll_until([c], lambda got: len(got) >= 20)
    assert len(c.assignment()) == 4 and len({(p, o) for _, p, o in got}) == 20
    c.close()


def test_the_group_shows_in_kop_groups_the_admin_client_and_list_groups(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    one = member("one", **{"group.remote.assignor": "range"})
    two = member("two", **{"group.remote.assignor": "range"})
    one.subscribe(["t"])
    two.subscribe(["t"])
    poll_until([one, two], lambda _: len(assigned(one)) == len(assigned(two)) == 2)
    first, second = sorted([one, two], key=lambda c: c.memberid())
    assert assigned(first) == {0, 1} and assigned(second) == {2, 3}  # range: contiguous, in member-id order
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    described = admin.describe_consumer_groups(["g"])["g"].result(timeout=30)  # ConsumerGroupDescribe
    assert (described.type, described.state, described.partition_assignor) == (
        ConsumerGroupType.CONSUMER,
        ConsumerGroupState.STABLE,
        "range",
    )
    assert {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members} == {
        "one": assigned(one),
        "two": assigned(two),
    }
    listed = admin.list_consumer_groups().result(timeout=30).valid
    assert [(g.group_id, g.state, g.type) for g in listed] == [
        ("g", ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER)
    ]
    for kind, found in ((ConsumerGroupType.CONSUMER, ["g"]), (ConsumerGroupType.CLASSIC, [])):  # ListGroups v5
        assert [g.group_id for g in admin.list_consumer_groups(types={kind}).result(timeout=30).valid] == found
    one.commit(offsets=[TopicPartition("t", p, 0) for p in assigned(one)], asynchronous=False)
    two.commit(offsets=[TopicPartition("t", p, 0) for p in assigned(two)], asynchronous=False)
    until_live(server, 2)
    shown = kop_groups(server, "describe", "g")
    rows = {line.split()[2]: line.split()[-1] for line in shown.stdout.splitlines() if line.startswith("g ")}
    assert rows == {str(p): "one" if p in assigned(one) else "two" for p in range(4)}, shown.stdout
    state = json.loads(kop_groups(server, "describe", "g", "--state", "--output", "json").stdout)
    assert [(s["strategy"], s["state"], s["members"]) for s in state] == [("range", "Stable", 2)]
    assert kop_groups(server, "delete", "g").returncode == 1  # an active group
    (refused,) = admin.delete_consumer_groups(["g"]).values()
    with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
        refused.result(30)
    one.close()
    two.close()
    until_live(server, 0)
    assert kop_groups(server, "delete", "g").returncode == 0


def test_other_protocol_types_and_stale_commits_are_refused(server: KopServer, member: Callable[..., Consumer]) -> None:
    c = member("modern")
    c.subscribe(["t"])
    poll_until([c], lambda _: assigned(c) == {0, 1, 2, 3})
    with connect(server) as sock:
        join = wire_request(
            JoinGroupRequest,
            5,
            group_id="g",
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            member_id="",
            group_instance_id=None,
            protocol_type="connect",
            protocols=[{"name": "sessioned", "metadata": b""}],
        )
        assert call(sock, join).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL: consumers only
        listed = call(sock, wire_request(ListGroupsRequest, 4, states_filter=[]))
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [("g", "consumer", "Stable")]
        classic_view = call(
            sock, wire_request(DescribeGroupsRequest, 5, groups=["g"], include_authorized_operations=False)
        )
        assert [g.error_code for g in classic_view.groups] == [69]  # GROUP_ID_NOT_FOUND: not a classic group

        def commit(version: int, epoch: int, member_id: str) -> int:
            partition = {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
            request = wire_request(
                OffsetCommitRequest,
                version,
                group_id="g",
                generation_id_or_member_epoch=epoch,
                member_id=member_id,
                topics=[{"name": "t", "partitions": [partition]}],
            )
            return int(call(sock, request).topics[0].partitions[0].error_code)

        subscribed = wire_request(
            OffsetDeleteRequest, 0, group_id="g", topics=[{"name": "t", "partitions": [{"partition_index": 0}]}]
        )
        assert call(sock, subscribed).topics[0].partitions[0].error_code == 86  # GROUP_SUBSCRIBED_TO_TOPIC
        assert commit(9, 999, c.memberid()) == 113  # STALE_MEMBER_EPOCH
        asked = {"group_id": "g", "member_id": c.memberid(), "member_epoch": 999, "topics": None}
        assert call(sock, wire_request(OffsetFetchRequest, 9, groups=[asked])).groups[0].error_code == 113
        assert commit(8, 999, c.memberid()) == 35  # UNSUPPORTED_VERSION: members commit with v9
        assert commit(9, -1, "") == 25  # UNKNOWN_MEMBER_ID: the group has members
    c.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)  # the member's own is taken
    c.close()


# -- moving between the protocols (KIP-848's online migration) -----------------------------------

RECORDS = 40


def _classic(server: KopServer, name: str, strategy: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "g",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )


def _member_types(server: KopServer) -> list[int]:
    """The group's members as ConsumerGroupDescribe tells them (0 classic, 1 consumer protocol)."""
    host, port = server.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        request = request_class(69, 1)(group_ids=("g",), include_authorized_operations=False)
        (group,) = kio_call(sock, request).groups
    return sorted(int(m.member_type) for m in group.members)


def _commit_all(consumers: list[Consumer]) -> None:
    for c in consumers:
        positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
        if positions:
            answered = c.commit(offsets=positions, asynchronous=False)
            assert answered is not None and all(tp.error is None for tp in answered), answered


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_rolling_upgrade_moves_a_classic_group_to_the_consumer_protocol(
    server: KopServer, member: Callable[..., Consumer], strategy: str
) -> None:
    produce(server, RECORDS)
    a, b = _classic(server, "a", strategy), _classic(server, "b", strategy)
    for c in (a, b):
        c.subscribe(["t"])
    seen: set[tuple[int, int]] = set()  # (partition, offset) of every record consumed

    def until(condition: Callable[[], bool]) -> Callable[[list[tuple[str, int, int]]], bool]:
        def done(got: list[tuple[str, int, int]]) -> bool:
            seen.update((p, o) for _, p, o in got)
            return condition()

        return done

    poll_until([a, b], until(lambda: bool(assigned(a) and assigned(b))))
    new = member("new")  # the first instance restarted with group.protocol=consumer converts the group
    new.subscribe(["t"])
    mixed = [a, b, new]
    everything = {0, 1, 2, 3}
    poll_until(
        mixed,
        until(lambda: bool(assigned(new)) and assigned(a) | assigned(b) | assigned(new) == everything),
        each_round=never_shared(*mixed),
    )
    assert _member_types(server) == [0, 0, 1]
    _commit_all(mixed)  # the classic members commit with the generation they were told
    a.close()
    renewed = member("renewed")
    renewed.subscribe(["t"])
    mixed = [b, new, renewed]
    poll_until(mixed, until(lambda: bool(assigned(renewed)) and len(seen) == RECORDS), each_round=never_shared(*mixed))
    assert _member_types(server) == [0, 1, 1]
    _commit_all(mixed)
    b.close()
    produce(server, RECORDS)
    upgraded = [new, renewed]
    poll_until(
        upgraded,
        until(lambda: assigned(new) | assigned(renewed) == everything and len(seen) == 2 * RECORDS),
        each_round=never_shared(*upgraded),
    )
    assert _member_types(server) == [1, 1]


def test_a_rollback_moves_a_group_back_to_the_classic_protocol(
    server: KopServer, member: Callable[..., Consumer]
) -> None:
    produce(server, RECORDS)
    modern = member("modern")
    modern.subscribe(["t"])
    poll_until([modern], lambda _: assigned(modern) == {0, 1, 2, 3})
    old = _classic(server, "old", "range")  # an instance rolled back to the classic protocol
    old.subscribe(["t"])
    both = [modern, old]
    poll_until(both, lambda _: len(assigned(old)) == 2 and len(assigned(modern)) == 2, each_round=never_shared(*both))
    assert _member_types(server) == [0, 1]
    mine = sorted(assigned(old))
    (answered,) = old.commit(offsets=[TopicPartition("t", mine[0], 1)], asynchronous=False) or [None]
    assert answered is not None and answered.error is None
    modern.close()  # the last consumer-protocol member gone, the group goes back to the classic protocol
    poll_until([old], lambda _: assigned(old) == {0, 1, 2, 3})
    with connect(server) as sock:
        described = call(
            sock, wire_request(DescribeGroupsRequest, 5, groups=["g"], include_authorized_operations=False)
        )
        listed = call(sock, wire_request(ListGroupsRequest, 5, states_filter=[], types_filter=["Classic"])).groups
    assert [(g.group_id, g.group_type) for g in listed] == [("g", "classic")]
    (group,) = described.groups
    assert (group.error_code, group.protocol_type, group.protocol_data, len(group.members)) == (
        0,
        "consumer",
        "range",
        1,
    )
    another = _classic(server, "another", "range")  # whose leader assigns now
    another.subscribe(["t"])
    both = [old, another]
    poll_until(both, lambda _: len(assigned(old)) == len(assigned(another)) == 2, each_round=never_shared(*both))
    another.close()
    old.close()
    with Broker(server.root) as broker:
        assert broker.fetch_offsets("g")[("t", mine[0])].offset == 1


def test_a_classic_group_of_another_protocol_type_is_not_converted(server: KopServer) -> None:
    with connect(server) as joining, connect(server) as sock, concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(call, joining, _classic_join("g", "connect"))  # waits out the first rebalance
        deadline = time.monotonic() + 30
        while not call(sock, wire_request(ListGroupsRequest, 4, states_filter=[])).groups:
            assert time.monotonic() < deadline, "the connect member never joined"
        assert kio_call(sock, _consumer_join("g")).error_code == ErrorCode.group_id_not_found
        assert answer.result(30).error_code == 0  # the connect group carries on


def test_with_migration_disabled_groups_keep_their_protocol(tmp_path: Path) -> None:
    with _serving(tmp_path, [*CONF, "group.consumer.migration.policy=disabled"]) as server:
        classic = _classic_owning_all(server)
        with connect(server) as sock:
            assert kio_call(sock, _consumer_join("g")).error_code == ErrorCode.group_id_not_found
            modern = kio_call(sock, _consumer_join("h"))  # a consumer-protocol group of its own
            assert modern.error_code == ErrorCode.none
            assert call(sock, _classic_join("h")).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL: not mixed
        classic.close()


def test_with_upgrades_only_a_group_stays_with_the_consumer_protocol(tmp_path: Path) -> None:
    with _serving(tmp_path, [*CONF, "group.consumer.migration.policy=upgrade"]) as server:
        classic = _classic_owning_all(server)
        modern = Consumer({**_consumer_conf(server), "client.id": "modern"})
        try:
            modern.subscribe(["t"])
            both = [classic, modern]
            poll_until(
                both, lambda _: len(assigned(classic)) == len(assigned(modern)) == 2, each_round=never_shared(*both)
            )
        finally:
            modern.close()  # while the server is up (see ``member``)
        poll_until([classic], lambda _: assigned(classic) == {0, 1, 2, 3})
        assert _member_types(server) == [0]  # a classic member of a consumer-protocol group still
        classic.close()


@pytest.mark.parametrize("group", ["", "ñ" * 100], ids=["empty", "too-long"])
def test_a_group_id_that_cannot_name_a_group_is_refused_by_each_protocol(server: KopServer, group: str) -> None:
    """Kafka refuses an empty group id (INVALID_GROUP_ID at JoinGroup, INVALID_REQUEST at the
    KIP-848 heartbeats); kop also one too long to keep (255 bytes once escaped for a key)."""
    too_long = ErrorCode.invalid_group_id
    with connect(server) as sock:
        assert call(sock, _classic_join(group)).error_code == ErrorCode.invalid_group_id
        share_join = request_class(76, 1)(group_id=group, member_id="m", member_epoch=0, subscribed_topic_names=("t",))
        for request in (_consumer_join(group), share_join):
            answer = kio_call(sock, request)
            assert answer.error_code == (too_long if group else ErrorCode.invalid_request), answer
            assert (group[:10] if group else "empty") in answer.error_message


def _classic_owning_all(server: KopServer) -> Consumer:
    classic = _classic(server, "classic", "range")
    classic.subscribe(["t"])
    poll_until([classic], lambda _: assigned(classic) == {0, 1, 2, 3})
    return classic


def _consumer_join(group: str) -> Any:
    return request_class(68, 0)(
        group_id=group,
        member_id="",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=("t",),
        server_assignor=None,
        topic_partitions=(),
    )


def _classic_join(group: str, protocol_type: str = "consumer") -> Any:
    """A JoinGroup v3: no MEMBER_ID_REQUIRED round, the member is in as soon as it asks."""
    return wire_request(
        JoinGroupRequest,
        3,
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        protocol_type=protocol_type,
        protocols=[{"name": "range", "metadata": b""}],
    )
