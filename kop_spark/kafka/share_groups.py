"""Share groups (KIP-932, "queues for Kafka"): consumers that share partitions, each record going
to one of them, which acknowledges it record by record.

Members join and heartbeat (ShareGroupHeartbeat) as consumer-protocol members do, and are assigned
partitions by ``share_assignor`` (Kafka's ``simple``): members share a partition only when they
outnumber the partitions, and who gets which record of a shared one is decided as records are
fetched. A member fetches (ShareFetch) through a share session, a set of partitions it names once
and an epoch each request moves on; a fetch acquires records for it in each partition of its
session (``SharePartition``) and acknowledgements ride on fetches or come alone (ShareAcknowledge).
A member that leaves, or whose session closes or times out, gives back what it holds.

Membership lives on this server's event loop and is kept in the store as a snapshot
(``broker.group_snapshots``) before a member is told of a change, as Kafka keeps a share group's
records: a restarted server takes the group up, and its members go on at the epochs they were
told. Share sessions are this server's alone, as a Kafka broker's are: after a restart a member's
fetch finds none (SHARE_SESSION_NOT_FOUND) and opens another. Each partition's state is kept in the
store before an acknowledgement is answered (``broker.share_states``), so records accepted stay
accepted through a restart, and records held then are delivered again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..broker import LiveGroup, LiveMember, Snapshot
from ..config import Config
from .assignors import tps_from_json, tps_to_json
from .share_assignor import assign
from .share_partition import SharePartition

TopicPartition = tuple[str, int]
JOIN, LEAVE = 0, -1
CLOSE_SESSION = -1


@dataclass
class ShareMember:
    member_id: str
    client: tuple[str, str]  # client id, host
    topics: frozenset[str] = frozenset()
    epoch: int = 0
    sent: frozenset[TopicPartition] | None = None  # the assignment it was last told
    expiry: asyncio.TimerHandle | None = None

    def to_json(self) -> dict[str, Any]:
        sent = None if self.sent is None else tps_to_json(self.sent)
        return {
            "member_id": self.member_id,
            "client": list(self.client),
            "topics": sorted(self.topics),
            "epoch": self.epoch,
            "sent": sent,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ShareMember:
        """The member as ``to_json`` left it, its session timer not yet started."""
        sent = None if value["sent"] is None else tps_from_json(value["sent"])
        client_id, host = value["client"]
        return cls(value["member_id"], (client_id, host), frozenset(value["topics"]), value["epoch"], sent)


@dataclass
class ShareSession:
    epoch: int  # the epoch its next request must carry
    partitions: set[TopicPartition] = field(default_factory=set)


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    sessions: dict[str, ShareSession] = field(default_factory=dict)
    partitions: dict[TopicPartition, SharePartition] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)  # each member's partitions
    target_of: tuple[int, tuple[tuple[str, int], ...]] | None = None  # the epoch and partition counts it is of

    def to_snapshot(self) -> Snapshot:
        """Its membership, for a server to take it up after a restart: the target assignment is
        made again from the members' subscriptions and what each was told."""
        members = [m.to_json() for m in self.members.values()]
        return {"type": "share", "group_id": self.group_id, "epoch": self.epoch, "members": members}

    @classmethod
    def from_snapshot(cls, value: Snapshot) -> ShareGroup:
        members = {m.member_id: m for m in map(ShareMember.from_json, value["members"])}
        return cls(value["group_id"], value["epoch"], members)


class ShareGroupError(Exception):
    """A share-group request refused, with Kafka's code."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class ShareGroupCoordinator:
    def __init__(
        self,
        config: Config,
        load: Callable[[str, TopicPartition], Awaitable[dict[str, Any] | None]],
        save: Callable[[str, TopicPartition, dict[str, Any]], Awaitable[None]],
        start: Callable[[str, TopicPartition], Awaitable[int]],
        now_ms: Callable[[], int],
        on_change: Callable[[str], None] = lambda group: None,
    ):
        """``load``/``save``: a partition's kept state; ``start``: where a group begins in a
        partition it has not read (its ``share.auto.offset.reset``)."""
        self.session_ms = config["group.share.session.timeout.ms"]
        self.interval_ms = config["group.share.heartbeat.interval.ms"]
        self.lock_ms = config["group.share.record.lock.duration.ms"]
        self.limit = config["group.share.delivery.count.limit"]
        self.max_in_flight = config["group.share.partition.max.record.locks"]
        self._load, self._save, self._start, self._now_ms = load, save, start, now_ms
        self._on_change = on_change  # told when its members or their partitions change
        self.groups: dict[str, ShareGroup] = {}
        self._saving = asyncio.Lock()

    # -- membership ---------------------------------------------------------------------------

    def install(self, g: ShareGroup) -> None:
        """Takes up a group as a server kept it before a restart, each member's session timeout
        starting anew: one that does not come back leaves, and what it held goes to the others."""
        self.groups[g.group_id] = g
        for member in g.members.values():
            self._keep_alive(g, member)
        self._on_change(g.group_id)

    def heartbeat(
        self, group_id: str, member_id: str, epoch: int, topics: Iterable[str] | None, client: tuple[str, str]
    ) -> ShareMember:
        """A member joins (epoch 0), restates its subscription, or leaves (-1). Raises
        ShareGroupError (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, INVALID_REQUEST)."""
        if not member_id:
            raise ShareGroupError(ErrorCode.invalid_request, "a share group member must give its member id")
        g = self.groups.setdefault(group_id, ShareGroup(group_id))
        member = g.members.get(member_id)
        if epoch == LEAVE:
            if member is None:
                self._forget_if_empty(g)
                return ShareMember(member_id, client)
            self._remove(g, member)
            return member
        if epoch == JOIN:
            if member is None:
                member = g.members[member_id] = ShareMember(member_id, client)
                g.epoch += 1
        elif member is None:
            self._forget_if_empty(g)
            raise ShareGroupError(
                ErrorCode.unknown_member_id, f"member {member_id!r} is not in share group {group_id!r}"
            )
        elif epoch != member.epoch:
            raise ShareGroupError(
                ErrorCode.fenced_member_epoch,
                f"member {member_id!r} of share group {group_id!r} is at epoch {member.epoch}, not {epoch}",
            )
        if topics is not None and frozenset(topics) != member.topics:
            member.topics = frozenset(topics)
            g.epoch += 1
        if member.epoch != g.epoch:
            self._on_change(group_id)
        member.epoch = g.epoch
        self._keep_alive(g, member)
        return member

    def assignment(
        self, group_id: str, member: ShareMember, partitions: Callable[[str], int]
    ) -> frozenset[TopicPartition]:
        """The member's partitions, of the group's target assignment: made again when the group's
        members or subscriptions (its epoch) or the partition counts of its topics change
        (``partitions``: a topic's count, 0 for one that does not exist)."""
        g = self.groups.get(group_id)
        if g is None or g.members.get(member.member_id) is not member:  # gone while topics were read
            return frozenset()
        subscribed = sorted(set().union(*(m.topics for m in g.members.values())))
        of = (g.epoch, tuple((t, partitions(t)) for t in subscribed))
        if g.target_of != of:
            current = {m.member_id: m.sent or frozenset() for m in g.members.values()}
            g.target = assign({m.member_id: m.topics for m in g.members.values()}, current, dict(of[1]))
            g.target_of = of
        return g.target.get(member.member_id, frozenset())

    def told(self, group_id: str, member: ShareMember, assigned: frozenset[TopicPartition]) -> None:
        """The member is told ``assigned``: what ``kop groups`` shows of it, so published anew."""
        if member.sent != assigned:
            member.sent = assigned
            self._on_change(group_id)

    def _keep_alive(self, g: ShareGroup, member: ShareMember) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(self.session_ms / 1000, self._expire, g, member)

    def _expire(self, g: ShareGroup, member: ShareMember) -> None:
        if g.members.get(member.member_id) is member:
            self._remove(g, member)

    def give_up(self, group_id: str) -> None:
        """Every member out, what each holds going back (another server serves the group)."""
        g = self.groups.get(group_id)
        if g is not None:
            for member in list(g.members.values()):
                self._remove(g, member)

    def _remove(self, g: ShareGroup, member: ShareMember) -> None:
        """A member gone: what it holds goes back to the others."""
        del g.members[member.member_id]
        if member.expiry is not None:
            member.expiry.cancel()
        g.sessions.pop(member.member_id, None)
        for sp in g.partitions.values():
            sp.release_member(member.member_id, self.limit)
        g.epoch += 1
        self._forget_if_empty(g)
        self._on_change(g.group_id)

    def _forget_if_empty(self, g: ShareGroup) -> None:
        if not g.members and self.groups.get(g.group_id) is g:
            del self.groups[g.group_id]

    # -- sessions -----------------------------------------------------------------------------

    def session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[TopicPartition] = (),
        forgotten: Iterable[TopicPartition] = (),
    ) -> tuple[ShareGroup, ShareSession]:
        """The member's share session as a request with ``epoch`` finds it: opened (0), moved on,
        or closed (-1: the session it was, gone from the group). Raises ShareGroupError
        (UNKNOWN_MEMBER_ID, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH)."""
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            raise ShareGroupError(
                ErrorCode.unknown_member_id, f"member {member_id!r} is not in share group {group_id!r}"
            )
        current = g.sessions.get(member_id)
        if epoch == 0:
            current = g.sessions[member_id] = ShareSession(0)
        elif current is None:
            raise ShareGroupError(ErrorCode.share_session_not_found, f"member {member_id!r} has no share session")
        elif epoch != CLOSE_SESSION and epoch != current.epoch:
            raise ShareGroupError(
                ErrorCode.invalid_share_session_epoch,
                f"member {member_id!r}'s share session is at epoch {current.epoch}, not {epoch}",
            )
        if epoch == CLOSE_SESSION:
            return g, g.sessions.pop(member_id)
        current.epoch = epoch + 1
        current.partitions |= set(added)
        current.partitions -= set(forgotten)
        return g, current

    def close_session(self, g: ShareGroup, member_id: str, partitions: Iterable[TopicPartition]) -> None:
        """A session closed: what the member holds there goes back."""
        for tp in partitions:
            sp = g.partitions.get(tp)
            if sp is not None:
                sp.release_member(member_id, self.limit)

    # -- share partitions ---------------------------------------------------------------------

    async def partition(self, g: ShareGroup, tp: TopicPartition) -> SharePartition:
        """The group's state of a partition: as kept, or started where ``share.auto.offset.reset``
        says (and kept at once, so a restart starts there too)."""
        sp = g.partitions.get(tp)
        if sp is None:
            kept = await self._load(g.group_id, tp)
            made = SharePartition.from_json(kept) if kept else SharePartition(await self._start(g.group_id, tp))
            sp = g.partitions.setdefault(tp, made)  # another request may have taken it up meanwhile
            if kept is None and sp is made:
                await self.keep(g, [tp])
        return sp

    async def keep(self, g: ShareGroup, tps: Iterable[TopicPartition]) -> None:
        """Keep the partitions' states in the store, one save at a time, each of the state then."""
        async with self._saving:
            for tp in tps:
                sp = g.partitions.get(tp)
                if sp is not None:
                    await self._save(g.group_id, tp, sp.to_json())

    def live(self, group_id: str) -> LiveGroup | None:
        """What ``kop groups describe`` shows of the group (None: not a share group here)."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        members = tuple(
            LiveMember(m.member_id, m.client[0], m.client[1], tuple(sorted(m.sent or ()))) for m in g.members.values()
        )
        return LiveGroup("Stable" if members else "Empty", members, strategy="simple", type="share")

    def is_active(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def now_ms(self) -> int:
        return self._now_ms()

    def close(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                if m.expiry is not None:
                    m.expiry.cancel()
