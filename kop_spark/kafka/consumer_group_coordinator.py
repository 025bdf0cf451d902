"""Kafka's consumer rebalance protocol (KIP-848, ``group.protocol=consumer``): members send
ConsumerGroupHeartbeat, and the server assigns (``assignors``) and moves each member to its
target (``ConsumerGroup.reconcile``). Members time out after ``group.consumer.session.timeout.ms``
without a heartbeat, and are fenced if they keep partitions they were asked to revoke past their
rebalance timeout; a member leaves with epoch -1, a static member steps away with -2 and comes
back, under a new member id, to the partitions it had.

Like the classic protocol's ``GroupMembership``, membership lives in this server's memory, kept
in the store as it changes for a restarted server to take up, and everything runs on its event
loop. Assignments name topics by id; the coordinator maps them with
the topics it last read (``TopicSnapshots``), at most ``TOPICS_REFRESH_S`` old.

A heartbeat that changes nothing (most of them) costs no more than a few lookups: a group's
subscribed topics are worked out again only when the topics or a subscription change, its target
only when its epoch does, and the store's view of the group is told only of changes."""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ..broker import LiveGroup, LiveMember, TopicInfo
from ..config import Config
from .assignors import ASSIGNORS, TopicPartition
from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember
from .topic_snapshot import IdPartitions, TopicSnapshot, TopicSnapshots

TOPICS_REFRESH_S = 1.0
JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
UNCHANGED = -1  # a rebalance timeout not restated


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields; None (and UNCHANGED) where the member restates nothing."""

    group_id: str
    member_id: str
    member_epoch: int
    client: tuple[str, str]  # client id, host
    instance_id: str | None = None
    rebalance_timeout_ms: int = UNCHANGED
    topic_names: tuple[str, ...] | None = None
    topic_regex: str | None = None
    assignor: str | None = None
    owned: IdPartitions | None = None
    generated_ids: bool = False  # v0: the server gives a joining member its id


@dataclass(frozen=True)
class HeartbeatAnswer:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    interval_ms: int = 0
    assignment: IdPartitions | None = None  # None: unchanged, not repeated


class Refused(Exception):
    """A heartbeat refused, with Kafka's code."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class ConsumerGroupCoordinator:
    def __init__(
        self,
        config: Config,
        read_topics: Callable[[], Awaitable[list[TopicInfo]]],
        on_change: Callable[[str], None] = lambda group: None,
        topics_refresh_s: float = TOPICS_REFRESH_S,
        downgrade: Callable[[ConsumerGroup], bool] = lambda group: False,
    ):
        """``downgrade``: hands a group whose members are all classic back to the classic
        protocol, if it can be (``ClassicMembers.downgrade``)."""
        self._session_ms = config["group.consumer.session.timeout.ms"]
        self._interval_ms = config["group.consumer.heartbeat.interval.ms"]
        self._assignors = config["group.consumer.assignors"].split(",")
        self._topics = TopicSnapshots(read_topics, topics_refresh_s)
        self._on_change = on_change  # told when what ``live`` shows changes
        self._downgrade = downgrade
        self.groups: dict[str, ConsumerGroup] = {}

    async def topics(self) -> TopicSnapshot:
        return await self._topics.current()

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------

    async def heartbeat(self, hb: Heartbeat, may_describe: Callable[[str], bool]) -> HeartbeatAnswer:
        topics = await self.topics()
        owned = None if hb.owned is None else topics.names(hb.owned)
        try:
            member, changed = await self.beat(hb, owned, may_describe)
        except Refused as r:
            return HeartbeatAnswer(r.code, str(r), hb.member_id or None)
        if hb.member_epoch in (LEAVE, STATIC_LEAVE):
            return HeartbeatAnswer(ErrorCode.none, None, member.member_id, hb.member_epoch, self._interval_ms)
        if hb.member_epoch == JOIN or (owned is not None and owned != member.assigned | member.revoking):
            changed = True
        assignment = topics.ids(member.assigned) if changed else None
        return HeartbeatAnswer(ErrorCode.none, None, member.member_id, member.epoch, self._interval_ms, assignment)

    async def beat(
        self,
        hb: Heartbeat,
        owned: frozenset[TopicPartition] | None,
        may_describe: Callable[[str], bool],
        classic: ClassicProtocol | None = None,
    ) -> tuple[ConsumerMember, bool]:
        """What a heartbeat does, for a member of either protocol (``classic``: what a classic
        member joins with): the member joins, restates, leaves, or moves towards its target.
        Returns it, and whether what it may own changed. Raises ``Refused``."""
        topics = await self.topics()
        g = self.groups.setdefault(hb.group_id, ConsumerGroup(hb.group_id))
        try:
            self._check(hb)
            member = self._member(g, hb, owned)
            if hb.member_epoch in (LEAVE, STATIC_LEAVE):
                self._leave(g, member, static=hb.member_epoch == STATIC_LEAVE)
                return member, False
            bump = self._restate(g, member, hb)
        except Refused:
            if not g.members:
                self.groups.pop(hb.group_id, None)
            raise
        if classic is not None:
            member.classic = classic
        if bump or g.topics_version != topics.version:  # the regexes and names matched again
            g.topics_version = topics.version
            partitions = g.subscribed({t.name: t.partitions for t in topics.infos if may_describe(t.name)})
            if partitions != g.partitions:
                g.partitions, bump = partitions, True
        if bump:
            g.epoch += 1
            g.assignor = self._assignor(g)
        g.update_target(ASSIGNORS[g.assignor])
        before = (member.epoch, member.revoking)
        changed = g.reconcile(member, owned)
        if changed or bump or hb.member_epoch == JOIN or (member.epoch, member.revoking) != before:
            self._on_change(g.group_id)
        self.keep_alive(g, member)
        return member, changed

    def _check(self, hb: Heartbeat) -> None:
        """Refuses, before anything changes, what no member may ask."""
        if hb.assignor is not None and hb.assignor not in self._assignors:
            raise Refused(
                ErrorCode.unsupported_assignor,
                f"assignor {hb.assignor!r} is not one of {', '.join(self._assignors)} (group.consumer.assignors)",
            )
        if hb.topic_regex:
            try:
                re.compile(hb.topic_regex)
            except re.error as e:
                raise Refused(ErrorCode.invalid_regular_expression, f"{hb.topic_regex!r}: {e}") from None

    def _member(self, g: ConsumerGroup, hb: Heartbeat, owned: frozenset[TopicPartition] | None) -> ConsumerMember:
        """The member the heartbeat is from, joined if it joins; refused as Kafka refuses."""
        if hb.member_epoch == JOIN:
            return self._join(g, hb)
        member = g.members.get(hb.member_id)
        if member is None:
            raise Refused(ErrorCode.unknown_member_id, f"member {hb.member_id!r} is not in group {g.group_id!r}")
        if hb.member_epoch in (LEAVE, STATIC_LEAVE) or hb.member_epoch == member.epoch:
            return member
        if hb.member_epoch == member.previous_epoch and owned is not None and owned <= member.assigned:
            return member  # it did not get the answer that moved it on
        raise Refused(
            ErrorCode.fenced_member_epoch,
            f"member {hb.member_id!r} of group {g.group_id!r} is at epoch {member.epoch}, not {hb.member_epoch}",
        )

    def _join(self, g: ConsumerGroup, hb: Heartbeat) -> ConsumerMember:
        if not hb.member_id and not hb.generated_ids:
            raise Refused(ErrorCode.invalid_request, "a joining member must give its member id")
        member_id = hb.member_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        new = ConsumerMember(member_id, hb.instance_id, *hb.client)
        old = g.members.get(g.instances.get(hb.instance_id, "")) if hb.instance_id is not None else None
        inherits = old is not None and old.left and old.member_id != member_id
        if hb.topic_names is None and hb.topic_regex is None and not inherits:
            raise Refused(ErrorCode.invalid_request, "a joining member must give its subscription")
        if old is not None and old.member_id != member_id:
            if not old.left:
                raise Refused(
                    ErrorCode.unreleased_instance_id, f"instance {hb.instance_id!r} is still member {old.member_id!r}"
                )
            g.target[member_id] = g.target.get(old.member_id, frozenset())
            self._remove(g, old)
            new.epoch, new.previous_epoch, new.assigned, new.revoking = old.epoch, -1, old.assigned, old.revoking
            new.topic_names, new.topic_regex, new.assignor = old.topic_names, old.topic_regex, old.assignor
        elif member_id in g.members:  # back after being fenced, owning nothing
            self._remove(g, g.members[member_id])
        g.members[member_id] = new
        if hb.instance_id is not None:
            g.instances[hb.instance_id] = member_id
        return new

    def _restate(self, g: ConsumerGroup, member: ConsumerMember, hb: Heartbeat) -> bool:
        """Takes what the heartbeat restates; returns whether the subscription or assignor
        changed (a member joining changes them from nothing), which bumps the group epoch."""
        member.left = False
        if hb.rebalance_timeout_ms != UNCHANGED:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        before = (member.topic_names, member.topic_regex, member.assignor)
        if hb.topic_names is not None:
            member.topic_names = frozenset(hb.topic_names)
        if hb.topic_regex is not None:
            member.topic_regex = hb.topic_regex or None
        if hb.assignor is not None:
            member.assignor = hb.assignor
        return (member.topic_names, member.topic_regex, member.assignor) != before

    def _assignor(self, g: ConsumerGroup) -> str:
        """The one most members ask for, else the first configured (Kafka's choice)."""
        asked = Counter(m.assignor for m in g.members.values() if m.assignor is not None)
        return asked.most_common(1)[0][0] if asked else self._assignors[0]

    # -- timers and departures ---------------------------------------------------------------

    def keep_alive(self, g: ConsumerGroup, member: ConsumerMember) -> None:
        """Restarts the member's session timeout (a classic member's own), and its rebalance
        timeout while it holds partitions it was asked to revoke."""
        loop = asyncio.get_running_loop()
        if member.expiry is not None:
            member.expiry.cancel()
        session_ms = self._session_ms if member.classic is None else member.classic.session_timeout_ms
        member.expiry = loop.call_later(session_ms / 1000, self._expire, g, member)
        if member.revoking and member.revocation is None:
            member.revocation = loop.call_later(member.rebalance_timeout_ms / 1000, self._expire, g, member)
        elif not member.revoking and member.revocation is not None:
            member.revocation.cancel()
            member.revocation = None

    def _expire(self, g: ConsumerGroup, member: ConsumerMember) -> None:
        """Session or rebalance timeout: the member is fenced and its partitions go to others."""
        if g.members.get(member.member_id) is member:
            self._leave(g, member, static=False)

    def leave(self, g: ConsumerGroup, member: ConsumerMember) -> None:
        """A member gone (a classic member's LeaveGroup): its partitions go to others."""
        self._leave(g, member, static=False)

    def give_up(self, group_id: str) -> None:
        """Every member out, fenced (another server serves the group)."""
        g = self.groups.pop(group_id, None)
        if g is not None:
            for member in list(g.members.values()):
                self._remove(g, member)
            self._on_change(group_id)

    def install(self, g: ConsumerGroup) -> None:
        """Takes over a group converted from the classic protocol, or as a server kept it before a
        restart, each member's session (and rebalance timeout) starting anew."""
        self.groups[g.group_id] = g
        for member in g.members.values():
            self.keep_alive(g, member)
        self._on_change(g.group_id)

    def _leave(self, g: ConsumerGroup, member: ConsumerMember, static: bool) -> None:
        if static and member.instance_id is not None:
            member.left = True  # its partitions wait for it for a session timeout
            self.keep_alive(g, member)
            return
        self._remove(g, member)
        g.epoch += 1
        g.topics_version = -1  # the topics it alone subscribed to go
        g.assignor = self._assignor(g)  # it may have been the one asking for it
        if not g.members:
            self.groups.pop(g.group_id, None)
        elif all(m.classic is not None for m in g.members.values()) and self._downgrade(g):
            del self.groups[g.group_id]
            for m in g.members.values():
                m.cancel_timers()
        self._on_change(g.group_id)

    def _remove(self, g: ConsumerGroup, member: ConsumerMember) -> None:
        del g.members[member.member_id]
        member.cancel_timers()
        if member.instance_id is not None and g.instances.get(member.instance_id) == member.member_id:
            del g.instances[member.instance_id]
        g.target.pop(member.member_id, None)

    # -- what the rest of the server asks ----------------------------------------------------

    def is_active(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def validate_commit(self, group_id: str, member_id: str, epoch: int, plain_v8: bool = False) -> ErrorCode:
        """Kafka's fencing of a commit to a consumer-protocol group with members: it must come
        from a member at its current epoch, and, unless transactional, in OffsetCommit v9 or
        later (``plain_v8``: an older one)."""
        member = self.groups[group_id].members.get(member_id)
        if member is not None and member.classic is not None:  # by the generation it joined at, as Kafka
            return ErrorCode.none if epoch == member.classic.generation else ErrorCode.illegal_generation
        code = self.validate_fetch(group_id, member_id, epoch)
        if code != ErrorCode.unknown_member_id and plain_v8:
            return ErrorCode.unsupported_version
        return code

    def validate_fetch(self, group_id: str, member_id: str, epoch: int) -> ErrorCode:
        """An OffsetFetch v9 naming a member of a consumer-protocol group with members: it must be
        one, at its current epoch (Kafka's, so a member does not read offsets of a past epoch)."""
        member = self.groups[group_id].members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if epoch == member.epoch else ErrorCode.stale_member_epoch

    def subscribed_topics(self, group_id: str) -> set[str]:
        g = self.groups.get(group_id)
        return set() if g is None else set(g.partitions)

    def live(self, group_id: str) -> LiveGroup | None:
        """What ``kop groups describe`` shows of the group (None: not a consumer-protocol group)."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        members = tuple(
            LiveMember(m.member_id, m.client_id, m.client_host, tuple(sorted(m.assigned | m.revoking)))
            for m in g.members.values()
        )
        return LiveGroup(g.state.value, members, strategy=g.assignor, type="consumer")

    def close(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                m.cancel_timers()
