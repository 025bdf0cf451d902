"""One consumer group's membership, as Kafka's ``GroupMetadata`` holds it: its state, generation,
chosen protocol, leader and members (each with its protocols, assignment, and the join or sync
request it is waiting on). ``GroupMembership`` moves it from state to state. A settled generation
is kept in the store as a snapshot (``broker.group_snapshots``), from which a restarted server
takes the group up."""

from __future__ import annotations

import asyncio
import base64
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from ..broker import Snapshot


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class JoinRequest(NamedTuple):
    """A JoinGroup, as the coordinator of either protocol takes it."""

    group_id: str
    member_id: str
    instance_id: str | None
    client: tuple[str, str]  # client id, host
    timeouts_ms: tuple[int, int]  # session, rebalance
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # v4+: a new dynamic member gets MEMBER_ID_REQUIRED first


class JoinedMember(NamedTuple):
    member_id: str
    instance_id: str | None
    metadata: bytes


class JoinResult(NamedTuple):
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()  # for the leader only
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None  # a JoinGroup waiting for the rebalance
    sync: asyncio.Future[SyncResult] | None = None  # a SyncGroup waiting for the leader's assignment
    expiry: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def to_json(self) -> dict[str, Any]:
        fields = ("member_id", "instance_id", "client_id", "client_host", "session_timeout_ms", "rebalance_timeout_ms")
        out: dict[str, Any] = {f: getattr(self, f) for f in fields}
        out["protocols"] = [[name, _b64(metadata)] for name, metadata in self.protocols]
        return {**out, "assignment": _b64(self.assignment)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Member:
        protocols = [(name, base64.b64decode(metadata)) for name, metadata in value["protocols"]]
        fields = {k: v for k, v in value.items() if k not in ("protocols", "assignment")}
        return cls(**fields, protocols=protocols, assignment=base64.b64decode(value["assignment"]))

    def answer_join(self, result: JoinResult) -> None:
        if self.join is not None and not self.join.done():
            self.join.set_result(result)
        self.join = None

    def answer_sync(self, result: SyncResult) -> None:
        if self.sync is not None and not self.sync.done():
            self.sync.set_result(result)
        self.sync = None


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # member ids handed out with MEMBER_ID_REQUIRED
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_timer: asyncio.TimerHandle | None = None
    initial_delay: bool = False  # the first members of an empty group are still arriving

    def to_snapshot(self) -> Snapshot:
        """The generation as it settled (Stable), for a server to take the group up after a restart."""
        members = [m.to_json() for m in self.members.values()]
        fields = ("group_id", "generation", "protocol_type", "protocol", "leader")
        return {"type": "classic", **{f: getattr(self, f) for f in fields}, "members": members}

    @classmethod
    def from_snapshot(cls, value: Snapshot) -> Group:
        """The group as ``to_snapshot`` left it, Stable, its members not yet given their sessions."""
        members = {m.member_id: m for m in map(Member.from_json, value["members"])}
        instances = {m.instance_id: m.member_id for m in members.values() if m.instance_id is not None}
        fields = {k: v for k, v in value.items() if k not in ("type", "members")}
        return cls(**fields, state=GroupState.STABLE, members=members, instances=instances)

    def release(self, code: ErrorCode) -> None:
        """Stops the group's timers and answers the joins and syncs under way with ``code``: the
        server stops, or the group goes to the consumer protocol."""
        if self.rebalance_timer is not None:
            self.rebalance_timer.cancel()
        for m in self.members.values():
            if m.expiry is not None:
                m.expiry.cancel()
            m.answer_join(JoinResult(code, m.member_id))
            m.answer_sync(SyncResult(code))

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols can join: same type, and a protocol in common."""
        if not self.members:
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self._common({name for name, _ in protocols}))

    def _common(self, extra: set[str] | None = None) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        if extra is not None:
            sets.append(extra)
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        """Kafka's choice: each member votes for the first of its protocols that all support."""
        common = self._common()
        votes = Counter(next(name for name, _ in m.protocols if name in common) for m in self.members.values())
        return votes.most_common(1)[0][0] if votes else None

    def all_joined(self) -> bool:
        return all(m.join is not None for m in self.members.values())

    def joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol)) for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def join_result(self, member: Member) -> JoinResult:
        """What a member's JoinGroup is answered once the generation is formed."""
        leader = member.member_id == self.leader
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol,
            self.leader or "",
            self.joined_members() if leader else (),
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
