"""The consumer rebalance protocol (KIP-848) as the coordinator runs it, driven as clients drive
it: each member heartbeats, saying what it owns (what it was last told), and the properties
Kafka promises hold at every step: no partition has two owners; a member gives up partitions
before another gets them; a group left alone settles, with every partition owned by one member
subscribed to it. Real clients against ``kop serve``: test_kafka_consumer_protocol."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kop_spark.broker import TopicInfo
from kop_spark.config import Config
from kop_spark.kafka.assignors import ASSIGNORS, RangeAssignor, UniformAssignor
from kop_spark.kafka.classic_members import ClassicMembers
from kop_spark.kafka.consumer_group import ConsumerGroup, ConsumerGroupState
from kop_spark.kafka.consumer_group_coordinator import ConsumerGroupCoordinator, Heartbeat, HeartbeatAnswer
from kop_spark.kafka.consumer_protocol import assigned_partitions, encode_subscription
from kop_spark.kafka.group import JoinRequest
from kop_spark.kafka.group_membership import GroupMembership

TP = tuple[str, int]


def topic(name: str, partitions: int) -> TopicInfo:
    return TopicInfo(name, uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions)


class World:
    """A coordinator over topics the test may change (read afresh at every heartbeat)."""

    def __init__(self, *topics: TopicInfo, **conf: Any):
        self.topics = list(topics)
        self.changed: list[str] = []

        async def read() -> list[TopicInfo]:
            return list(self.topics)

        config = Config({"group.consumer.session.timeout.ms": 60_000, **conf})
        self.start = lambda: ConsumerGroupCoordinator(config, read, self.changed.append, topics_refresh_s=0)
        self.coordinator = self.start()

    def restart(self) -> None:
        """As ``kop serve`` restarts: a new coordinator takes the groups up from what the old one
        kept of them (each change is kept before its member is told), as JSON in the store."""
        kept = [json.loads(json.dumps(g.to_snapshot())) for g in self.coordinator.groups.values()]
        self.coordinator.close()
        self.coordinator = self.start()
        for value in kept:
            restored = ConsumerGroup.from_snapshot(value)
            assert restored.to_snapshot() == value
            self.coordinator.install(restored)

    def ids(self) -> dict[uuid.UUID, str]:
        return {t.topic_id: t.name for t in self.topics}


class Client:
    """One member as a consumer runs it: it owns what it was last told, and says so; partitions
    taken away it gives up only after the answer, by its next heartbeat (a consumer finishes
    with them first), so until then it still holds them."""

    def __init__(self, world: World, member_id: str, topics: tuple[str, ...] = ("t",), **join: Any):
        self.world, self.member_id, self.topics, self.join = world, member_id, topics, join
        self.epoch = 0
        self.owned: frozenset[TP] = frozenset()
        self.releasing: frozenset[TP] = frozenset()

    def holds(self) -> frozenset[TP]:
        return self.owned | self.releasing

    async def beat(self, epoch: int | None = None, **fields: Any) -> HeartbeatAnswer:
        self.releasing = frozenset()
        joining = self.epoch == 0 if epoch is None else epoch == 0
        by_name = {name: i for i, name in self.world.ids().items()}
        owned = {}
        for t, p in sorted(self.owned):
            owned.setdefault(by_name[t], []).append(p)
        values: dict[str, Any] = {
            "group_id": "g",
            "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "client": ("client-" + self.member_id, "/127.0.0.1"),
            "topic_names": self.topics if joining else None,
            "owned": tuple((i, tuple(ps)) for i, ps in owned.items()),
            **(self.join if joining else {}),
            **fields,
        }
        hb = Heartbeat(**values)
        answer = await self.world.coordinator.heartbeat(hb, lambda t: True)
        if answer.error == ErrorCode.none:
            self.epoch = answer.member_epoch
            if answer.assignment is not None:
                ids = self.world.ids()
                told = frozenset((ids[i], p) for i, ps in answer.assignment for p in ps)
                self.releasing, self.owned = self.owned - told, told
        return answer


class ClassicClient:
    """A classic-protocol member of the group, as a consumer runs one: it joins with its
    subscription and what it owns, takes its assignment from SyncGroup, and joins again when its
    heartbeat says so, or when it is no longer a member. A cooperative one gives up partitions
    taken away after the SyncGroup that took them (by its next call); an eager one gives up
    everything before it joins again."""

    def __init__(self, world: World, member_id: str, topics: tuple[str, ...] = ("t",), eager: bool = False):
        self.world, self.member_id, self.topics, self.eager = world, member_id, topics, eager
        self.generation = -1
        self.owned: frozenset[TP] = frozenset()
        self.releasing: frozenset[TP] = frozenset()

    def holds(self) -> frozenset[TP]:
        return self.owned | self.releasing

    @property
    def classic(self) -> ClassicMembers:
        """The server's classic side of the coordinator the world has now (it is never given the group back)."""
        return ClassicMembers(self.world.coordinator, GroupMembership(0))

    async def beat(self, epoch: int | None = None) -> HeartbeatAnswer:
        self.releasing = frozenset()
        if epoch == -1:
            return HeartbeatAnswer(self.classic.leave("g", self.member_id, None))
        if self.generation >= 0:
            code = await self.classic.heartbeat("g", self.generation, self.member_id, None, lambda t: True)
            if code == ErrorCode.none:
                return HeartbeatAnswer(code)
        if self.eager:
            self.owned = frozenset()
        metadata = encode_subscription(self.topics, self.owned)
        client, protocols = ("c-" + self.member_id, "/127.0.0.1"), [("cooperative-sticky", metadata)]
        request = JoinRequest("g", self.member_id, None, client, (60_000, 60_000), "consumer", protocols, True)
        joined = await self.classic.join(request, lambda t: True)
        assert joined.error == ErrorCode.none and not joined.leader, joined
        self.generation = joined.generation
        synced = self.classic.sync("g", self.generation, self.member_id, None)
        assert synced.error == ErrorCode.none, synced
        told = frozenset(assigned_partitions(synced.assignment))
        self.releasing, self.owned = self.owned - told, told
        return HeartbeatAnswer(ErrorCode.none)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def no_two_owners(clients: list[Client | ClassicClient]) -> None:
    seen: dict[TP, str] = {}
    for c in clients:
        for tp in c.holds():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


async def settle(clients: list[Client | ClassicClient], rounds: int = 10) -> None:
    for _ in range(rounds):
        for c in clients:
            assert (await c.beat()).error == ErrorCode.none
            no_two_owners(clients)


async def joined(*clients: Client) -> None:
    """The clients join in turn and heartbeat until the group is stable."""
    for c in clients:
        await c.beat()
    await settle(list(clients))


# -- the assignors ------------------------------------------------------------------------------

subscriptions = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.frozensets(st.sampled_from(["a", "b", "c"]), min_size=1),
    min_size=1,
)
counts = st.fixed_dictionaries({"a": st.integers(0, 12), "b": st.integers(0, 5), "c": st.integers(0, 3)})


@settings(max_examples=200, deadline=None)
@given(subscriptions, counts, st.sampled_from(sorted(ASSIGNORS)), st.data())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(subs, parts, name, data) -> None:
    every = [(t, p) for t, n in parts.items() for p in range(n)]
    current = {m: frozenset(data.draw(st.lists(st.sampled_from(every), unique=True)) if every else []) for m in subs}
    out = ASSIGNORS[name].assign(subs, parts, current)
    assert set(out) == set(subs)
    owners: dict[TP, str] = {}
    for member, tps in out.items():
        for tp in tps:
            assert tp not in owners and tp[0] in subs[member]
            owners[tp] = member
    wanted = set().union(*subs.values())
    assert set(owners) == {tp for tp in every if tp[0] in wanted}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 40), st.sampled_from(sorted(ASSIGNORS)))
def test_members_of_one_subscription_get_shares_that_differ_by_one_at_most(members, n, name) -> None:
    subs = {f"m{i}": frozenset({"a"}) for i in range(members)}
    out = ASSIGNORS[name].assign(subs, {"a": n}, {})
    sizes = [len(tps) for tps in out.values()]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("eager", [False, True])
def test_a_classic_member_gives_up_partitions_before_another_gets_them(eager) -> None:
    async def scenario() -> None:
        w = World(topic("t", 6))
        a, classic = Client(w, "a"), ClassicClient(w, "classic", eager=eager)
        await a.beat()
        await classic.beat()  # a classic member of a consumer-protocol group
        await a.beat(epoch=-1)
        await settle([classic])
        assert len(classic.owned) == 6
        b = Client(w, "b")
        clients: list[Client | ClassicClient] = [classic, b]
        await b.beat()
        assert b.owned == frozenset()  # the classic member still owns all six
        await classic.beat()  # told to join again, it does, and is given three
        assert len(classic.owned) == 3
        no_two_owners(clients)  # a cooperative member still holds the other three, an eager one none
        await b.beat()
        no_two_owners(clients)
        assert b.owned == frozenset() or eager  # not until it has said it gave them up ...
        await settle(clients)
        assert (
            len(b.owned) == 3 and w.coordinator.groups["g"].state == ConsumerGroupState.STABLE
        )  # ... at its next join

    run(scenario)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 7), st.integers(1, 40))
def test_uniform_keeps_what_members_own_and_moves_only_what_a_newcomer_gets(members, n) -> None:
    subs = {f"m{i}": frozenset({"a"}) for i in range(members)}
    before = UniformAssignor().assign(subs, {"a": n}, {})
    assert UniformAssignor().assign(subs, {"a": n}, before) == before  # nothing changed: nothing moves
    after = UniformAssignor().assign({**subs, "new": frozenset({"a"})}, {"a": n}, before)
    moved = sum(len(before[m] - after[m]) for m in subs)
    assert moved == len(after["new"])
    sizes = [len(tps) for tps in after.values()]
    assert max(sizes) - min(sizes) <= 1


def test_range_gives_each_topic_in_contiguous_ranges_in_member_order() -> None:
    subs = {"b": frozenset({"t", "u"}), "a": frozenset({"t", "u"})}
    out = RangeAssignor().assign(subs, {"t": 5, "u": 2}, {})
    assert out == {
        "a": frozenset({("t", 0), ("t", 1), ("t", 2), ("u", 0)}),
        "b": frozenset({("t", 3), ("t", 4), ("u", 1)}),
    }


# -- reconciliation ----------------------------------------------------------------------------


def test_a_newcomer_gets_partitions_only_once_their_owner_has_given_them_up() -> None:
    async def scenario() -> None:
        w = World(topic("t", 6))
        a, b = Client(w, "a"), Client(w, "b")
        await a.beat()
        assert len(a.owned) == 6 and a.epoch == 1
        await b.beat()  # the target now splits them, but a still owns all six
        assert b.owned == frozenset() and b.epoch == 2
        await a.beat()  # a is asked to revoke three: it keeps its epoch until it has
        assert len(a.owned) == 3 and a.epoch == 1
        await b.beat()  # a has not said it gave them up yet
        assert b.owned == frozenset()
        await a.beat()  # it says so, and moves to the new epoch
        assert a.epoch == 2
        await b.beat()
        assert len(b.owned) == 3 and b.owned.isdisjoint(a.owned)
        assert w.coordinator.groups["g"].state == ConsumerGroupState.STABLE
        published = len(w.changed)
        await settle([a, b])  # heartbeats that change nothing are not published (a store write each)
        assert len(w.changed) == published
        await b.beat(epoch=-1)
        assert len(w.changed) == published + 1

    run(scenario)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "grow", "restart"]), st.integers(0, 5)), max_size=40),
    st.sampled_from(["consumer", "mixed"]),
)
def test_no_partition_ever_has_two_owners_and_a_group_left_alone_settles(steps, protocols) -> None:
    """Members of the consumer protocol only, or with classic ones (cooperative and eager), the
    server restarted at any step: its members never notice."""

    async def scenario() -> None:
        w = World(topic("t", 5), topic("u", 3))
        clients: dict[int, Client | ClassicClient] = {}
        for op, i in steps:
            c = clients.get(i)
            if op == "join" and c is None:
                subscribed = ("t", "u") if i % 2 else ("t",)
                classic = protocols == "mixed" and i in (2, 3, 4) and "g" in w.coordinator.groups
                made = (
                    ClassicClient(w, f"m{i}", subscribed, eager=i == 4) if classic else Client(w, f"m{i}", subscribed)
                )
                clients[i] = made
                await made.beat()
            elif op == "leave" and c is not None:
                await c.beat(epoch=-1)
                del clients[i]
            elif op == "beat" and c is not None:
                await c.beat()
            elif op == "grow":
                w.topics[i % 2] = topic(w.topics[i % 2].name, w.topics[i % 2].partitions + 1)
            elif op == "restart":
                w.restart()
            no_two_owners(list(clients.values()))
        await settle(list(clients.values()))
        if clients:
            group = w.coordinator.groups["g"]
            assert group.state == ConsumerGroupState.STABLE
            owned = [tp for c in clients.values() for tp in c.owned]
            everything = {(t.name, p) for t in w.topics for p in range(t.partitions)}
            subscribed = {t for c in clients.values() for t in c.topics}
            assert sorted(owned) == sorted(tp for tp in everything if tp[0] in subscribed)
            for c in clients.values():
                assert c.owned == group.target[c.member_id]
                assert (
                    c.epoch == group.epoch if isinstance(c, Client) else group.members[c.member_id].epoch == group.epoch
                )

    run(scenario)


@pytest.mark.parametrize("restart", [False, True])
def test_a_stale_or_unknown_member_is_fenced_and_a_lost_answer_is_forgiven(restart: bool) -> None:
    """``restart``: the server kept the epoch it moved a member to, and was killed before answering."""

    async def scenario() -> None:
        w = World(topic("t", 2))
        a, b = Client(w, "a"), Client(w, "b")
        await joined(a, b)
        assert (await a.beat(epoch=a.epoch + 5)).error == ErrorCode.fenced_member_epoch
        assert (await Client(w, "x").beat(epoch=3)).error == ErrorCode.unknown_member_id
        c = Client(w, "c")
        await c.beat()
        await settle([a, b, c])  # each moved on from an epoch it knew before
        if restart:
            w.restart()
        member = w.coordinator.groups["g"].members["a"]
        answer = await a.beat(epoch=member.previous_epoch)  # as if the answer that moved it on was lost
        assert answer.error == ErrorCode.none and answer.member_epoch == member.epoch

    run(scenario)


def test_a_leaving_member_gives_its_partitions_to_the_rest() -> None:
    async def scenario() -> None:
        w = World(topic("t", 4))
        a, b = Client(w, "a"), Client(w, "b")
        await joined(a, b)
        assert (await b.beat(epoch=-1)).member_epoch == -1
        await settle([a])
        assert len(a.owned) == 4
        await a.beat(epoch=-1)
        assert "g" not in w.coordinator.groups  # an empty group is forgotten; its offsets stay

    run(scenario)


@pytest.mark.parametrize("restart", [False, True])
def test_a_static_member_steps_away_and_comes_back_to_its_partitions_without_a_rebalance(restart: bool) -> None:
    """``restart``: the server restarted while the member was away."""

    async def scenario() -> None:
        w = World(topic("t", 4))
        a, b = Client(w, "a", instance_id="ia"), Client(w, "b", instance_id="ib")
        await joined(a, b)
        epoch, had = w.coordinator.groups["g"].epoch, b.owned
        assert (await b.beat(epoch=-2)).member_epoch == -2
        if restart:
            w.restart()
        group = w.coordinator.groups["g"]
        await settle([a])
        assert len(a.owned) == 2  # b's partitions wait for it
        taken = Client(w, "b-again", instance_id="ia")
        assert (await taken.beat()).error == ErrorCode.unreleased_instance_id  # a is still there
        back = Client(w, "b-restarted", instance_id="ib")
        answer = await back.beat()
        assert answer.error == ErrorCode.none and back.owned == had and group.epoch == epoch
        assert "b" not in group.members

    run(scenario)


def test_a_member_gone_while_the_server_was_down_is_out_after_its_session_timeout() -> None:
    async def scenario() -> None:
        w = World(topic("t", 2), **{"group.consumer.session.timeout.ms": 200})
        a, b = Client(w, "a"), Client(w, "b")
        await joined(a, b)
        w.restart()
        deadline = asyncio.get_running_loop().time() + 30
        while "b" in w.coordinator.groups["g"].members:  # b never comes back; a beats on
            assert asyncio.get_running_loop().time() < deadline, "b's session never ended"
            await a.beat()
            await asyncio.sleep(0.01)
        await settle([a])
        assert len(a.owned) == 2

    run(scenario)


@pytest.mark.parametrize("restart", [False, True])
def test_a_member_that_keeps_partitions_past_its_rebalance_timeout_is_fenced(restart: bool) -> None:
    """``restart``: the server restarted while the member was asked to revoke; its own timeout still holds."""

    async def scenario() -> None:
        w = World(topic("t", 2))
        a = Client(w, "a", rebalance_timeout_ms=50)
        await a.beat()
        b = Client(w, "b")
        await b.beat()
        await a.beat(owned=None)  # asked to revoke; it never says it has
        if restart:
            w.restart()
        assert w.coordinator.groups["g"].members["a"].revoking
        while "a" in w.coordinator.groups["g"].members:  # the rebalance timeout fences it
            await asyncio.sleep(0.01)
        await settle([b])
        assert len(b.owned) == 2
        assert (await a.beat()).error == ErrorCode.unknown_member_id

    run(scenario)


def test_refusals_name_what_is_wrong() -> None:
    async def scenario() -> None:
        w = World(topic("t", 1))
        answer = await Client(w, "a").beat(assignor="sticky")
        assert answer.error == ErrorCode.unsupported_assignor and "sticky" in (answer.message or "")
        answer = await Client(w, "a", topics=()).beat(topic_regex="(")
        assert answer.error == ErrorCode.invalid_regular_expression
        answer = await Client(w, "").beat()
        assert answer.error == ErrorCode.invalid_request  # v1: the member gives its own id
        assert "g" not in w.coordinator.groups
        a, b = Client(w, "a"), Client(w, "b")
        await joined(a, b)
        epoch = w.coordinator.groups["g"].epoch
        assert (await a.beat(epoch=0, topic_names=None)).error == ErrorCode.invalid_request  # no subscription
        assert set(w.coordinator.groups["g"].members) == {"a", "b"} and w.coordinator.groups["g"].epoch == epoch

    run(scenario)


@pytest.mark.parametrize("restart", [False, True])
def test_a_regex_subscription_follows_the_topics_that_match(restart: bool) -> None:
    async def scenario() -> None:
        w = World(topic("ev-1", 1), topic("other", 1))
        a = Client(w, "a", topics=())
        await a.beat(topic_regex="ev-.*")
        assert a.owned == {("ev-1", 0)}
        if restart:
            w.restart()
        w.topics.append(topic("ev-2", 2))
        await settle([a])
        assert a.owned == {("ev-1", 0), ("ev-2", 0), ("ev-2", 1)}

    run(scenario)


@pytest.mark.parametrize(
    ("member", "epoch", "version", "expected"),
    [
        ("a", "current", 9, ErrorCode.none),
        ("a", "previous", 9, ErrorCode.stale_member_epoch),
        ("a", "current", 8, ErrorCode.unsupported_version),
        ("nobody", "current", 9, ErrorCode.unknown_member_id),
    ],
)
def test_a_commit_must_come_from_a_member_at_its_epoch(member, epoch, version, expected) -> None:
    async def scenario() -> None:
        w = World(topic("t", 2))
        a, b = Client(w, "a"), Client(w, "b")
        await joined(a, b)
        m = w.coordinator.groups["g"].members["a"]
        at = m.epoch if epoch == "current" else m.previous_epoch
        assert w.coordinator.validate_commit("g", member, at, plain_v8=version < 9) == expected
        if version == 9:  # OffsetFetch v9 checks the member the same way
            assert w.coordinator.validate_fetch("g", member, at) == expected

    run(scenario)


def test_uniform_gives_a_share_left_over_to_the_member_that_holds_more() -> None:
    subs = {"a": frozenset({"t"}), "b": frozenset({"t"})}
    current = {"a": frozenset({("t", 0)}), "b": frozenset(("t", p) for p in range(1, 5))}
    out = UniformAssignor().assign(subs, {"t": 5}, current)
    assert len(out["b"]) == 3 and out["b"] < current["b"]  # one partition moves, not two


@pytest.mark.parametrize("restart", [False, True])
def test_the_assignor_most_members_ask_for_is_used_and_changes_when_they_leave(restart: bool) -> None:
    async def scenario() -> None:
        w = World(topic("t", 4))
        a, b = Client(w, "a", assignor="range"), Client(w, "b")
        await joined(a, b)
        if restart:
            w.restart()
        c = Client(w, "c")
        await joined(c)  # the group's assignor is chosen again
        assert w.coordinator.groups["g"].assignor == "range"  # the only one asked for
        await a.beat(epoch=-1)
        await settle([b, c])
        assert w.coordinator.groups["g"].assignor == "uniform"  # none asked for: the default

    run(scenario)
