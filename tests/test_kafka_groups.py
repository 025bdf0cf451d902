"""Consumer groups over the wire, Kafka's classic rebalance protocol: real librdkafka consumers
share a topic and take over a killed member's partitions; a static member restarts without a
rebalance; and a commit from a stale or unknown member is refused (by hand on the protocol, so
each step is deterministic)."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest
from kio.schema.errors import ErrorCode
from kio.schema.sync_group.v5.request import SyncGroupRequestAssignment

from kop_spark import Broker, layout
from kop_spark.broker import GroupServer, GroupSnapshots, LiveGroup, LiveMember
from kop_spark.broker.live_groups import LiveGroups
from kop_spark.clock import ManualClock
from kop_spark.errors import MetadataStoreUnavailableError
from kop_spark.kafka.context import ServerContext
from kop_spark.kafka.group import GroupState, JoinRequest
from kop_spark.kafka.group_publisher import GroupPublisher
from kop_spark.kafka.group_servers import GroupServers
from kop_spark.kafka.handlers.consumer_groups import consumer_group_heartbeat
from kop_spark.kafka.handlers.groups import sync_group
from kop_spark.kafka.messages import RequestHeader, request_class
from kop_spark.storage.metadata_store import update

from .group_clients import (
    assigned,
    consumed_through_a_restart,
    doomed_member,
    kop_groups,
    poll_until,
    produce,
    until_live,
)
from .kafka_wire import call, connect, wire_request
from .kop_server import KopServer

CONF = ["group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000"]
NOW = 1_700_000_000_000
ANY_CHARACTERS = "orders:v2 ñ/x@-."  # a group id Kafka takes and a metadata key does not


@pytest.fixture
def server(tmp_path) -> Iterator[KopServer]:
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 4)
    with KopServer(root, CONF) as s:
        yield s


def _consumer(server: KopServer, name: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": server.bootstrap,
        "group.id": "g",
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
    }
    return Consumer({**conf, **extra})


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_is_served_by_one_of_two_servers_over_a_store_at_a_time(server: KopServer, protocol: str) -> None:
    """Each kop serve coordinates groups of its own: a member that came to a second server over the
    store while the group had members on the first was a group of its own, given every partition,
    and consumed every record the first did. It is refused until the group is free, then takes
    over from the group's commits."""

    def consumer(server: KopServer, name: str) -> Consumer:
        if protocol == "classic":
            return _consumer(server, name)
        conf = {"group.id": "g", "client.id": name, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        return Consumer({**conf, "bootstrap.servers": server.bootstrap, "group.protocol": "consumer"})

    with KopServer(server.root, CONF) as other:
        first, second = consumer(server, "first"), consumer(other, "second")
        first.subscribe(["t"])
        produce(server, 40)
        got = poll_until([first], lambda got: len(got) >= 40)
        second.subscribe(["t"])
        refused = f"group 'g' has members on the kop serve at PLAINTEXT://{server.bootstrap}"
        poll_until([second], lambda _: any(refused in line for line in other.log))
        produce(server, 40)
        got += poll_until([first, second], lambda got: len(got) >= 40)
        assert {member for member, _, _ in got} == {first.memberid()} and not second.assignment()
        first.commit(asynchronous=False)
        first.close()  # the group is free: the second server takes it up
        produce(server, 40)
        then = poll_until([second], lambda then: len(then) >= 40)
        assert assigned(second) == {0, 1, 2, 3}
        assert len(got) == 80 and len(then) == 40 and len({(p, o) for _, p, o in got + then}) == 120


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_second_server_started_over_a_store_leaves_the_first_servers_groups_as_kept(
    server: KopServer, protocol: str
) -> None:
    """A server starting takes up the groups kept in the store, as after its own restart: one that
    another server serves is put out again, and what that server kept of it stays for its restart.
    (That it is never deleted, whenever the check comes, is the publisher test's.)"""
    extra = {} if protocol == "classic" else {"group.protocol": "consumer"}
    conf = {"group.id": "g", "client.id": "c", "auto.offset.reset": "earliest", **extra}
    c = Consumer({**conf, "bootstrap.servers": server.bootstrap})
    c.subscribe(["t"])
    poll_until([c], lambda _: len(assigned(c)) == 4)
    with Broker(server.root) as b:
        kept = GroupSnapshots(b.store).load()["g"]
        assert c.memberid() in json.dumps(kept)
        with KopServer(server.root, CONF) as other:
            other.wait_for("group 'g' has members on the kop serve at")  # it took the group up, then put it out
            assert GroupSnapshots(b.store).load()["g"] == kept
            live = b.live_groups.get("g")
            assert live is not None and [m.member_id for m in live.members] == [c.memberid()]
    c.close()


def test_a_group_another_server_holds_is_put_out_and_not_kept() -> None:
    """What a server publishes of a group decides whether it keeps it: a group whose members it
    took in (or restored) while another server held it is put out, and neither it nor its going
    is kept, which would overwrite what the other server keeps for its own restart."""
    there = GroupServer("host-b :9092", "PLAINTEXT://b:9092")
    members: dict[str, tuple[LiveMember, ...]] = {"held": (LiveMember("m", "c", "h", ()),), "ours": ()}
    lost: list[str] = []
    saved: list[str] = []
    published: list[str] = []

    async def publish(group_id: str, live: LiveGroup, valid_ms: int) -> GroupServer | None:
        published.append(group_id)
        return there if group_id == "held" else None

    async def save(group_id: str) -> None:
        saved.append(group_id)

    def give_up(group_id: str, holder: GroupServer) -> None:
        lost.append(group_id)
        members[group_id] = ()  # as the coordinators do, which tell the publisher of the change
        publisher.changed(group_id)

    async def run() -> None:
        task = asyncio.ensure_future(publisher.run())
        publisher.changed("held")
        publisher.changed("ours")
        while published.count("held") < 2:  # published, put out, and its going published
            await asyncio.sleep(0)
        task.cancel()

    publisher = GroupPublisher(
        publish, lambda g: LiveGroup("Stable", members[g]) if members[g] else None, lambda: (), save, give_up
    )
    asyncio.run(run())
    assert (lost, saved) == (["held"], ["ours"])


def test_a_group_entry_is_not_taken_from_another_servers_members_while_it_holds(tmp_path) -> None:
    one, two = GroupServer("host-a :9092", "PLAINTEXT://a:9092"), GroupServer("host-b :9092", "PLAINTEXT://b:9092")
    member = LiveMember("m", "client", "10.0.0.1", (("t", 0),))
    clock = ManualClock(NOW)
    with Broker(str(tmp_path)) as b:
        live = LiveGroups(b.store, clock)
        assert live.publish("g", LiveGroup("Stable", (member,), one), 30_000) is None
        assert live.publish("g", LiveGroup("Stable", (member,), two), 30_000) == one
        assert live.publish("g", LiveGroup("Empty", (), two), 30_000) == one  # a stop's withdrawal leaves it be
        assert live.publish("g", LiveGroup("Stable", (member,), one), 30_000) is None  # its own, again
        assert getattr(live.get("g"), "server", None) == one
        clock.advance(30_001)  # lapsed: its server was killed
        assert live.publish("g", LiveGroup("Stable", (member,), two), 30_000) is None
        assert live.publish("g", LiveGroup("Empty", (), two), 30_000) is None
        assert live.get("g") is None  # no members: free for any server
        assert live.publish("g", LiveGroup("Stable", (member,), one), 30_000) is None


def test_every_group_with_live_members_is_found_with_its_type_and_assignor(tmp_path) -> None:
    """What ``kop groups list`` adds to the groups with offsets: those whose members have
    committed nothing yet. A lapsed entry, or one with no members, counts for none."""
    server, member = GroupServer("host-a :9092", "PLAINTEXT://a:9092"), LiveMember("m", "c", "10.0.0.1", ())
    clock = ManualClock(NOW)
    with Broker(str(tmp_path)) as b:
        live = LiveGroups(b.store, clock)
        live.publish("lapses", LiveGroup("Stable", (member,), server), 1_000)
        clock.advance(1_001)
        live.publish("app:orders", LiveGroup("Stable", (member,), server, "range", "classic"), 30_000)
        live.publish("queue", LiveGroup("Stable", (member,), server, "simple", "share"), 30_000)
        live.publish("left", LiveGroup("Empty", (), server, "uniform", "consumer"), 30_000)
        assert {g: (x.type, x.strategy, x.state) for g, x in live.all().items()} == {
            "app:orders": ("classic", "range", "Stable"),
            "queue": ("share", "simple", "Stable"),
        }
        live.publish("app:orders", LiveGroup("Empty", (), server, "range", "classic"), 30_000)
        assert list(live.all()) == ["queue"]
        entries = [b.store.get(layout.live_group_key(g)).value for g in ("app:orders", "left")]
        assert entries == [None, None], "a group with no members left its entry, to be read at every listing"


def test_a_server_that_cannot_read_which_server_serves_a_group_refuses_it_for_now() -> None:
    """A store that cannot be read: the group's clients are answered as while a coordinator loads
    (they ask again), not dropped by a connection closed on an unexpected error."""
    me = GroupServer("host-a :9092", "PLAINTEXT://a:9092")
    entries: dict[str, LiveGroup] = {
        "there": LiveGroup("Stable", (), GroupServer("host-b :9092", "b")),
        "here": LiveGroup("Stable", (), me),
    }

    async def published(group_id: str) -> LiveGroup | None:
        if group_id == "unreadable":
            raise MetadataStoreUnavailableError("etcd at 127.0.0.1:1 did not answer within 5 s")
        return entries.get(group_id)

    servers = GroupServers(me, published, lambda group_id: None)
    refusals = {g: asyncio.run(servers.refusal(g)) for g in ("there", "here", "free", "unreadable")}
    assert refusals == {
        "there": "group 'there' is served by the kop serve at b",
        "here": None,
        "free": None,
        "unreadable": "cannot tell which server serves group 'unreadable': etcd at 127.0.0.1:1 did not answer within 5 s",
    }


def test_members_a_server_took_in_while_another_served_the_group_are_put_out(server: KopServer) -> None:
    """Two servers may take members in at once, each before the other published the group: the
    one that finds the group held by the other's members when it publishes gives its own up."""
    c = _consumer(server, "c")
    c.subscribe(["t"])
    poll_until([c], lambda _: len(assigned(c)) == 4)
    with Broker(server.root) as b:  # as a second server that published first would have
        other = GroupServer("elsewhere :9092", "PLAINTEXT://elsewhere:9092")
        member = LiveMember("there", "client", "10.0.0.1", (("t", 0),))
        entry = {"state": "Stable", "expires_ms": b.clock.now_ms() + 60_000, "members": [member._asdict()]}
        # By hand (a publish would not take it from the server), by CAS again if the server's refresh comes between
        update(b.store, layout.live_group_key("g"), lambda _: {**entry, "server": other._asdict()})
    poll_until([c], lambda _: not c.assignment())  # at the server's next refresh of the group
    assert "group 'g' has members on the kop serve at PLAINTEXT://elsewhere:9092" in "".join(server.log)


def test_two_members_share_the_partitions_and_consume_everything_once(server: KopServer) -> None:
    one, two = _consumer(server, "one"), _consumer(server, "two")
    one.subscribe(["t"])
    two.subscribe(["t"])
    poll_until([one, two], lambda _: len(assigned(one)) == len(assigned(two)) == 2)
    produce(server, 200)  # after the rebalance: each record is read once, by its partition's owner
    got = poll_until([one, two], lambda got: len(got) >= 200)
    assert len(got) == 200 and len({(p, o) for _, p, o in got}) == 200
    assert assigned(one) | assigned(two) == {0, 1, 2, 3} and not assigned(one) & assigned(two)
    for member in {m for m, _, _ in got}:
        assert {p for m, p, _ in got if m == member} <= (assigned(one) if member == one.memberid() else assigned(two))
    one.commit(asynchronous=False)
    two.commit(asynchronous=False)
    one.close()
    two.close()
    with Broker(server.root) as b:
        committed = {tp: o.offset for tp, o in b.fetch_offsets("g").items()}
        assert committed == {("t", p): b.list_offsets("t", p, "latest") for p in range(4)}


def test_a_killed_members_partitions_move_after_its_session_timeout(server: KopServer) -> None:
    survivor = _consumer(server, "survivor")
    survivor.subscribe(["t"])
    poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
    conf = {"bootstrap.servers": server.bootstrap, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
    with doomed_member(conf) as got_some:  # the survivor keeps polling: it takes part in the rebalance
        poll_until([survivor], lambda _: got_some.is_set() and len(assigned(survivor)) == 2)
    poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
    survivor.close()


def test_a_static_member_restarts_without_a_rebalance(server: KopServer) -> None:
    rebalances: list[str] = []
    other = _consumer(server, "other", **{"group.instance.id": "other"})
    other.subscribe(["t"], on_assign=lambda c, ps: rebalances.append("assign"))
    static = _consumer(server, "static", **{"group.instance.id": "static", "session.timeout.ms": 10_000})
    static.subscribe(["t"])
    poll_until([other, static], lambda _: len(assigned(other)) == 2 and len(assigned(static)) == 2)
    before, count = assigned(static), len(rebalances)
    static.close()  # a static member does not leave on close
    again = _consumer(server, "static", **{"group.instance.id": "static", "session.timeout.ms": 10_000})
    again.subscribe(["t"])
    poll_until([other, again], lambda _: assigned(again) == before)
    assert len(rebalances) == count, "the other member was rebalanced"
    other.close()
    again.close()


def _settled(server: KopServer, members: int, group: str = "g") -> int | None:
    """Until the server has kept the group's settled generation with ``members`` members (none kept
    for 0); returns that generation."""
    deadline = time.monotonic() + 30
    with Broker(server.root) as b:
        while len((kept := GroupSnapshots(b.store).load().get(group, {})).get("members", ())) != members:
            assert time.monotonic() < deadline, f"the group's generation was not kept: {kept}"
            time.sleep(0.05)
    return kept.get("generation")


@pytest.mark.parametrize(("stop", "group"), [("kill", "g"), ("stop", ANY_CHARACTERS)])
def test_members_go_on_through_a_server_restart_without_a_rebalance(server: KopServer, stop: str, group: str) -> None:
    """As after a Kafka coordinator's failover: the restarted server takes the group up as it
    settled, its members' heartbeats and commits are accepted, and nobody's partitions move."""
    rebalances: list[str] = []

    def member(name: str) -> Consumer:
        c = _consumer(server, name, **{"session.timeout.ms": 10_000, "group.id": group})
        c.subscribe(
            ["t"],
            on_assign=lambda _, ps: rebalances.append(f"{name} assigned"),
            on_revoke=lambda _, ps: rebalances.append(f"{name} revoked"),
            on_lost=lambda _, ps: rebalances.append(f"{name} lost"),
        )
        return c

    one, two = member("one"), member("two")
    poll_until([one, two], lambda _: len(assigned(one)) == len(assigned(two)) == 2)
    generation = _settled(server, 2, group)
    before = (assigned(one), assigned(two), list(rebalances))
    consumed_through_a_restart(server, [one, two], stop)
    one.commit(asynchronous=False)  # in the generation it was in before the restart
    two.commit(asynchronous=False)
    assert (assigned(one), assigned(two), rebalances) == before
    assert _settled(server, 2, group) == generation
    until_live(server, 2, group)
    one.close()
    two.close()
    assert _settled(server, 0, group) is None  # a group without members: nothing kept, nobody to restore


def test_a_member_gone_while_the_server_was_down_is_out_after_its_session_timeout(server: KopServer) -> None:
    survivor = _consumer(server, "survivor", **{"session.timeout.ms": 10_000})
    survivor.subscribe(["t"])
    conf = {"bootstrap.servers": server.bootstrap, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
    with doomed_member(conf) as got_some:
        poll_until([survivor], lambda _: got_some.is_set() and len(assigned(survivor)) == 2)
        _settled(server, 2)
        server.kill()
    server.start()  # the group as it settled, the doomed member in it until its session ends
    poll_until([survivor], lambda _: assigned(survivor) == {0, 1, 2, 3})
    survivor.close()


def _join(sock: Any, member_id: str = "") -> Any:
    request = wire_request(
        JoinGroupRequest,
        5,
        group_id="fenced",
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    )
    answer = call(sock, request)
    if answer.error_code == 79:  # MEMBER_ID_REQUIRED: join again with the id handed out
        return _join(sock, answer.member_id)
    assert answer.error_code == 0
    return answer


def _commit(sock: Any, generation: int, member_id: str) -> int:
    request = wire_request(
        OffsetCommitRequest,
        7,
        group_id="fenced",
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}],
    )
    return int(call(sock, request).topics[0].partitions[0].error_code)


def _heartbeat(sock: Any, generation: int, member_id: str) -> int:
    request = wire_request(HeartbeatRequest, 3, group_id="fenced", generation_id=generation, member_id=member_id)
    return int(call(sock, request).error_code)


def test_commits_are_fenced_by_generation_and_member(server: KopServer) -> None:
    with connect(server) as a_sock, connect(server) as b_sock:
        a = _join(a_sock)
        assert a.generation_id == 1 and a.leader == a.member_id
        sync = wire_request(
            SyncGroupRequest, 3, group_id="fenced", generation_id=1, member_id=a.member_id, assignments=[]
        )
        assert call(a_sock, sync).error_code == 0
        assert _commit(a_sock, 1, a.member_id) == 0
        assert _commit(a_sock, -1, "") == 25  # UNKNOWN_MEMBER_ID: the group has members
        joined: list[Any] = []
        b_join = threading.Thread(target=lambda: joined.append(_join(b_sock)))
        b_join.start()
        deadline = time.monotonic() + 30
        while _heartbeat(a_sock, 1, a.member_id) != 27:  # REBALANCE_IN_PROGRESS once B has asked to join
            assert time.monotonic() < deadline
        a2 = _join(a_sock, a.member_id)
        b_join.join(30)
        assert a2.generation_id == joined[0].generation_id == 2
        assert _commit(a_sock, 2, a.member_id) == 27  # REBALANCE_IN_PROGRESS until the leader's sync
        assert _commit(a_sock, 1, a.member_id) == 22  # ILLEGAL_GENERATION
        assert _commit(a_sock, 2, "stranger") == 25  # UNKNOWN_MEMBER_ID


def test_kop_groups_shows_wire_members_and_refuses_to_reset_an_active_group(server: KopServer) -> None:
    one, two = _consumer(server, "one"), _consumer(server, "two")
    one.subscribe(["t"])
    two.subscribe(["t"])
    poll_until([one, two], lambda _: len(assigned(one)) == len(assigned(two)) == 2)
    until_live(server, 2)
    uncommitted = json.loads(kop_groups(server, "describe", "g", "--output", "json").stdout)
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in uncommitted] == [(p, "-", "-") for p in range(4)]
    assert kop_groups(server, "list").stdout.split() == ["g"]  # members, no offsets yet
    assert json.loads(kop_groups(server, "list", "--state", "--output", "json").stdout) == [
        {"group": "g", "state": "Stable"}
    ]
    one.commit(offsets=[TopicPartition("t", p, 0) for p in range(4)], asynchronous=False)
    described = kop_groups(server, "describe", "g")
    assert described.returncode == 0, described.stderr
    rows = {line.split()[2]: line.split()[6:] for line in described.stdout.splitlines() if line.startswith("g ")}
    assert {p: (who[2], who[1]) for p, who in rows.items()} == {
        str(p): ("one" if p in assigned(one) else "two", "/127.0.0.1") for p in range(4)
    }
    header, state = kop_groups(server, "describe", "g", "--state").stdout.strip().split("\n")
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert re.match(rf"g +PLAINTEXT://{server.bootstrap} \(", state), state
    assert state.split()[-3:] == ["range", "Stable", "2"]
    members = json.loads(kop_groups(server, "describe", "g", "--members", "--verbose", "--output", "json").stdout)
    assert {m["client_id"]: (m["partitions"], m["assignment"]) for m in members} == {
        name: (len(c_assigned), f"t({','.join(map(str, sorted(c_assigned)))})")
        for name, c_assigned in (("one", assigned(one)), ("two", assigned(two)))
    }
    refused = kop_groups(server, "reset-offsets", "g", "--all-topics", "--to-latest", "--execute")
    assert refused.returncode == 1 and "can only be reset if the group 'g' is inactive" in refused.stderr
    assert kop_groups(server, "delete", "g").returncode == 1
    one.close()
    two.close()  # each leaves the group
    until_live(server, 0)
    assert "has no active members" in kop_groups(server, "describe", "g").stdout
    assert "has no active members" in kop_groups(server, "describe", "g", "--members").stdout
    _, empty = kop_groups(server, "describe", "g", "--state").stdout.strip().split("\n")
    assert empty.split() == ["g", "-", "Empty", "0"]
    assert kop_groups(server, "list", "--state", "stable").stdout.split() == ["GROUP", "STATE"]
    assert kop_groups(server, "list", "--state", "Stable,Empty").stdout.split() == ["GROUP", "STATE", "g", "Empty"]
    assert kop_groups(server, "reset-offsets", "g", "--all-topics", "--to-latest", "--execute").returncode == 0


def test_a_rebalance_under_way_leaves_the_last_settled_generation_kept(tmp_path) -> None:
    """What a restarted server would restore is always a generation the leader assigned: never one
    still joining or syncing."""

    async def scenario() -> None:
        ctx = ServerContext(Broker(str(tmp_path), {"group.initial.rebalance.delay.ms": 0}), {})
        m = ctx.membership

        def request(member_id: str = "") -> JoinRequest:
            return JoinRequest("g", member_id, None, ("c", "h"), (30_000, 30_000), "consumer", [("range", b"")], False)

        def kept() -> tuple[int, int]:
            value = ctx.snapshots.load()["g"]
            return value["generation"], len(value["members"])

        first = await m.join(request())
        await m.sync("g", first.generation, first.member_id, None, {first.member_id: b"all"})
        await ctx.save_group("g")
        assert kept() == (1, 1)
        newcomer = asyncio.ensure_future(m.join(request()))
        await asyncio.sleep(0)  # the newcomer's join runs up to its wait: a rebalance begins
        again = await m.join(request(first.member_id))
        assert m.groups["g"].state == GroupState.COMPLETING_REBALANCE and again.generation == 2
        await ctx.save_group("g")
        assert kept() == (1, 1)  # not the generation being synced
        second = await newcomer
        await m.sync("g", 2, first.member_id, None, {first.member_id: b"half", second.member_id: b"half"})
        await ctx.save_group("g")
        assert kept() == (2, 2)
        ctx.close()

    asyncio.run(scenario())


def test_what_a_member_is_told_is_kept_before_it_is_told(tmp_path) -> None:
    """A SyncGroup and a ConsumerGroupHeartbeat that move a member on are answered only once the
    group is kept, as Kafka answers once the group's records are written: a server killed just
    after answering restarts with what its members were told. (The group publisher, which keeps
    the other changes a moment later, is not running here.)"""

    async def scenario() -> None:
        broker = Broker(str(tmp_path), {"group.initial.rebalance.delay.ms": 0})
        broker.create_topic("t", 4)
        ctx = ServerContext(broker, {})
        joining = JoinRequest("g", "", None, ("c", "h"), (30_000, 30_000), "consumer", [("range", b"")], False)
        joined = await ctx.membership.join(joining)
        sync = request_class(14, 5)(
            group_id="g",
            generation_id=joined.generation,
            member_id=joined.member_id,
            assignments=(SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"all"),),
        )
        assert (await sync_group(ctx, RequestHeader(14, 5, 0, "c"), sync)).error_code == ErrorCode.none
        assert ctx.snapshots.load()["g"]["generation"] == joined.generation

        beat = request_class(68, 1)(
            group_id="h",
            member_id="m",
            member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=("t",),
            topic_partitions=(),
        )
        answer = await consumer_group_heartbeat(ctx, RequestHeader(68, 1, 0, "c"), beat)
        (member,) = ctx.snapshots.load()["h"]["members"]
        (told,) = answer.assignment.topic_partitions
        assert (member["epoch"], len(member["assigned"])) == (answer.member_epoch, len(told.partitions)) == (1, 4)
        ctx.close()
        broker.close()

    asyncio.run(scenario())


def test_a_group_its_last_member_left_is_forgotten(tmp_path) -> None:
    """As Kafka forgets an empty group: a server that saw short-lived group ids (``app-<uuid>``)
    kept each for as long as it ran. Its offsets stay the store's; a member of its last generation
    is refused, and a commit outside any generation taken, as by an empty group; the next member
    starts a generation afresh, as after a restart."""

    async def scenario() -> None:
        ctx = ServerContext(Broker(str(tmp_path), {"group.initial.rebalance.delay.ms": 0}), {})
        m = ctx.membership
        joining = JoinRequest("g", "", None, ("c", "h"), (30_000, 30_000), "consumer", [("range", b"")], False)
        first = await m.join(joining)
        await m.sync("g", first.generation, first.member_id, None, {first.member_id: b"all"})
        assert "g" in m.groups
        assert m.leave("g", first.member_id, None) == ErrorCode.none
        assert "g" not in m.groups
        assert m.validate_commit("g", first.generation, first.member_id, None) == ErrorCode.illegal_generation
        assert m.validate_commit("g", -1, "", None) == ErrorCode.none
        again = await m.join(joining)
        assert again.generation == 1 and again.member_id != first.member_id
        ctx.close()

    asyncio.run(scenario())
