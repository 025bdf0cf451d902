"""One consumer-protocol group (KIP-848), as Kafka's ``ConsumerGroup`` holds it: the group epoch,
which every change of membership, subscription or subscribed topics' partitions bumps; the
target assignment computed for an epoch; and each member's epoch and the partitions it owns.

The group is kept in the store as a snapshot (``broker.group_snapshots``) whenever it changes,
from which a restarted server takes it up, each member at the epoch it was told.

Members move to the target one at a time (Kafka's ``CurrentAssignmentBuilder``): a member that
owns partitions its target no longer holds is first asked to revoke them and keeps its epoch;
once it has, it moves to the target epoch and gets its new partitions, less any another member
has not given up yet, which it gets at a later heartbeat. So no partition ever has two owners."""

from __future__ import annotations

import asyncio
import base64
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from ..broker import Snapshot
from .assignors import Assignor, TopicPartition, tps_from_json, tps_to_json

NONE: frozenset[TopicPartition] = frozenset()


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass
class ClassicProtocol:
    """What a classic-protocol member of a consumer-protocol group (KIP-848's online migration)
    joined with, the generation it was told (its member epoch then) and the partitions its last
    SyncGroup gave it: it learns of a change only by joining again."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    version: int  # of its subscription, in which its assignment is written
    generation: int = -1
    sent: frozenset[TopicPartition] = NONE

    @property
    def protocol(self) -> str:
        return self.protocols[0][0]

    def to_json(self) -> dict[str, Any]:
        protocols = [[name, base64.b64encode(metadata).decode()] for name, metadata in self.protocols]
        fields = ("session_timeout_ms", "version", "generation")
        return {**{f: getattr(self, f) for f in fields}, "protocols": protocols, "sent": tps_to_json(self.sent)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ClassicProtocol:
        protocols = tuple((name, base64.b64decode(metadata)) for name, metadata in value["protocols"])
        sent = tps_from_json(value["sent"])
        return cls(value["session_timeout_ms"], protocols, value["version"], value["generation"], sent)


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int = 300_000
    topic_names: frozenset[str] = frozenset()
    topic_regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    assigned: frozenset[TopicPartition] = NONE  # what it owns, or may own, in its epoch
    revoking: frozenset[TopicPartition] = NONE  # what it was asked to give up and still owns
    left: bool = False  # a static member gone for now (epoch -2): it keeps its partitions
    classic: ClassicProtocol | None = None  # a member that speaks the classic protocol
    expiry: asyncio.TimerHandle | None = None
    revocation: asyncio.TimerHandle | None = None

    def subscribes(self, topic: str) -> bool:
        if topic in self.topic_names:
            return True
        return self.topic_regex is not None and re.fullmatch(self.topic_regex, topic) is not None

    def cancel_timers(self) -> None:
        for timer in (self.expiry, self.revocation):
            if timer is not None:
                timer.cancel()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: getattr(self, f) for f in _MEMBER_FIELDS}
        out["topic_names"] = sorted(self.topic_names)
        out["assigned"], out["revoking"] = tps_to_json(self.assigned), tps_to_json(self.revoking)
        return {**out, "classic": None if self.classic is None else self.classic.to_json()}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ConsumerMember:
        """The member as ``to_json`` left it, its timers not yet started."""
        return cls(
            **{f: value[f] for f in _MEMBER_FIELDS},
            topic_names=frozenset(value["topic_names"]),
            assigned=tps_from_json(value["assigned"]),
            revoking=tps_from_json(value["revoking"]),
            classic=None if value["classic"] is None else ClassicProtocol.from_json(value["classic"]),
        )


_MEMBER_FIELDS = (
    "member_id",
    "instance_id",
    "client_id",
    "client_host",
    "rebalance_timeout_ms",
    "topic_regex",
    "assignor",
    "epoch",
    "previous_epoch",
    "left",
)


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    partitions: dict[str, int] = field(default_factory=dict)  # the subscribed topics' counts
    assignor: str = ""  # the server-side assignor of the target
    topics_version: int = -1  # of the topics ``partitions`` was worked out from

    def to_snapshot(self) -> Snapshot:
        """The group as it is, for a server to take it up after a restart."""
        target = {member_id: tps_to_json(tps) for member_id, tps in self.target.items()}
        members = [m.to_json() for m in self.members.values()]
        fields = ("group_id", "epoch", "target_epoch", "partitions", "assignor")
        return {"type": "consumer", **{f: getattr(self, f) for f in fields}, "target": target, "members": members}

    @classmethod
    def from_snapshot(cls, value: Snapshot) -> ConsumerGroup:
        """The group as ``to_snapshot`` left it; its subscribed topics are worked out again at the
        next heartbeat, and its members' timers are not yet started."""
        members = {m.member_id: m for m in map(ConsumerMember.from_json, value["members"])}
        return cls(
            value["group_id"],
            value["epoch"],
            value["target_epoch"],
            {member_id: tps_from_json(tps) for member_id, tps in value["target"].items()},
            members,
            {m.instance_id: m.member_id for m in members.values() if m.instance_id is not None},
            dict(value["partitions"]),
            value["assignor"],
        )

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        settled = all(m.epoch == self.target_epoch and not m.revoking for m in self.members.values())
        return ConsumerGroupState.STABLE if settled else ConsumerGroupState.RECONCILING

    def subscribed(self, topics: dict[str, int]) -> dict[str, int]:
        """The partition counts of the topics some member subscribes to, of ``topics``."""
        return {t: n for t, n in topics.items() if any(m.subscribes(t) for m in self.members.values())}

    def update_target(self, assignor: Assignor) -> None:
        if self.target_epoch == self.epoch:
            return
        subscriptions = {
            m.member_id: frozenset(t for t in self.partitions if m.subscribes(t)) for m in self.members.values()
        }
        current = {m.member_id: m.assigned | m.revoking for m in self.members.values()}
        self.target = assignor.assign(subscriptions, self.partitions, current)
        self.target_epoch = self.epoch

    def reconcile(self, member: ConsumerMember, owned: frozenset[TopicPartition] | None) -> bool:
        """Moves the member towards its target; ``owned`` is what it says it owns (None: not
        said). Returns whether what it may own changed, so it must be told."""
        before = member.assigned
        if member.revoking and owned is not None and not owned & member.revoking:
            member.revoking = NONE
        if member.revoking:
            return False
        target = self.target.get(member.member_id, NONE)
        if member.epoch != self.target_epoch:
            revoke = member.assigned - target
            if revoke:
                member.assigned -= revoke
                member.revoking = revoke
                return True
            member.previous_epoch, member.epoch = member.epoch, self.target_epoch
        member.assigned = (member.assigned & target) | frozenset(
            tp for tp in target - member.assigned if not self._owned_by_another(tp, member)
        )
        return member.assigned != before

    def _owned_by_another(self, tp: TopicPartition, member: ConsumerMember) -> bool:
        return any(tp in m.assigned or tp in m.revoking for m in self.members.values() if m is not member)
