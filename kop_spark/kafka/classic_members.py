"""Classic-protocol members of consumer-protocol groups: Kafka's online migration (KIP-848), by
which a group's consumers move between ``group.protocol=classic`` and ``consumer`` one at a time,
as a rolling restart moves them, and keep consuming.

The first consumer-protocol member to reach a classic group with members converts it (``adopt``):
each classic member becomes a member of the consumer group at the generation it was in, owning
what its last SyncGroup gave it. From then on the server assigns every member, whatever its
protocol. A classic member still sends JoinGroup, SyncGroup and Heartbeat: its JoinGroup is the
consumer protocol's heartbeat with its subscription and the partitions it owns; its SyncGroup
answers what it may own now; its Heartbeat tells it to join again (REBALANCE_IN_PROGRESS)
whenever that differs from what it was last given, or while it holds partitions it must give up.
So, as with consumer-protocol members, no partition ever has two owners. The generation a classic
member is told is its member epoch when it joined; its commits carry it.

A classic member may also join a consumer-protocol group (rolling back): it becomes one of its
members the same way. Once the last consumer-protocol member has left, the group goes back to the
classic protocol (``downgrade``): its members join again, and their leader assigns."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember
from .consumer_group_coordinator import JOIN, ConsumerGroupCoordinator, Heartbeat, Refused
from .consumer_protocol import assigned_partitions, encode_assignment, subscription
from .group import Group, GroupState, JoinRequest, JoinResult, Member, SyncResult
from .group_membership import GroupMembership

PROTOCOL_TYPE = "consumer"  # only consumers' groups move between the protocols


class ClassicMembers:
    def __init__(
        self, coordinator: ConsumerGroupCoordinator, membership: GroupMembership, policy: str = "bidirectional"
    ):
        """``policy``: ``group.consumer.migration.policy``, which way groups may move."""
        self._coordinator = coordinator
        self._membership = membership
        self.upgrades = policy in ("upgrade", "bidirectional")
        self._downgrades = policy in ("downgrade", "bidirectional")
        self._disabled = policy == "disabled"

    def adopt(self, classic: Group) -> None:
        """Converts a classic group with members, handed over by ``GroupMembership``."""
        epoch = max(classic.generation, 1)  # 0 is a joining member's epoch
        g = ConsumerGroup(classic.group_id, epoch=epoch, target_epoch=epoch)
        for m in classic.members.values():
            subscribed = subscription(m.metadata(classic.protocol))
            owned = frozenset(assigned_partitions(m.assignment))
            protocol = ClassicProtocol(
                m.session_timeout_ms, tuple(m.protocols), subscribed.version, classic.generation, owned
            )
            g.members[m.member_id] = ConsumerMember(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                topic_names=frozenset(subscribed.topics),
                epoch=epoch,
                assigned=owned,
                classic=protocol,
            )
            g.target[m.member_id] = owned
            if m.instance_id is not None:
                g.instances[m.instance_id] = m.member_id
        self._coordinator.install(g)

    def downgrade(self, g: ConsumerGroup) -> bool:
        """Gives a group whose members are all classic back to the classic protocol, at the
        generation most of them were told, if they have a protocol in common (Kafka's online
        downgrade); whether it did."""
        if not self._downgrades:
            return False
        classic = Group(g.group_id, GroupState.STABLE, protocol_type=PROTOCOL_TYPE)
        told: Counter[int] = Counter()
        for m in g.members.values():
            assert m.classic is not None
            told[m.classic.generation] += 1
            assignment = encode_assignment(m.assigned | m.revoking, m.classic.version)
            timeouts = (m.classic.session_timeout_ms, m.rebalance_timeout_ms)
            protocols = list(m.classic.protocols)
            member = Member(m.member_id, m.instance_id, m.client_id, m.client_host, *timeouts, protocols, assignment)
            if not classic.supports(PROTOCOL_TYPE, protocols):
                return False
            classic.members[m.member_id] = member
            if m.instance_id is not None:
                classic.instances[m.instance_id] = m.member_id
        classic.generation = told.most_common(1)[0][0]
        classic.protocol = classic.select_protocol()
        self._membership.adopt(classic)
        return True

    async def join(self, request: JoinRequest, may_describe: Callable[[str], bool]) -> JoinResult:
        """A classic JoinGroup to a consumer-protocol group with members: no leader, no member
        list; the member's assignment comes with its SyncGroup."""
        group_id, member_id, instance_id, client, timeouts_ms, protocol_type, protocols, _ = request
        if protocol_type != PROTOCOL_TYPE or not protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        g = self._coordinator.groups[group_id]
        if instance_id is not None and instance_id in g.instances:
            member_id = g.instances[instance_id]  # a static member back under a new id keeps its place
        if not member_id and instance_id is None and request.require_known_member_id:
            return JoinResult(ErrorCode.member_id_required, f"{client[0]}-{uuid.uuid4()}")
        known = g.members.get(member_id)
        if known is None and self._disabled:  # a new one would keep the group mixed for ever (KAFKA-20640)
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        subscribed = subscription(protocols[0][1])
        session_ms, rebalance_ms = timeouts_ms
        hb = Heartbeat(
            group_id,
            member_id,
            JOIN if known is None else known.epoch,
            client,
            instance_id,
            rebalance_ms,
            topic_names=subscribed.topics,
            generated_ids=True,
        )
        sent = known.classic.sent if known is not None and known.classic is not None else frozenset()
        protocol = ClassicProtocol(session_ms, tuple(protocols), subscribed.version, sent=sent)
        try:
            member, _ = await self._coordinator.beat(hb, subscribed.owned, may_describe, protocol)
        except Refused as r:
            return JoinResult(r.code, member_id)
        protocol.generation = member.epoch
        return JoinResult(ErrorCode.none, member.member_id, member.epoch, PROTOCOL_TYPE, protocol.protocol)

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> SyncResult:
        found = self._member(group_id, generation, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return SyncResult(found)
        g, member, protocol = found
        protocol.sent = member.assigned
        self._coordinator.keep_alive(g, member)
        assignment = encode_assignment(member.assigned, protocol.version)
        return SyncResult(ErrorCode.none, assignment, PROTOCOL_TYPE, protocol.protocol)

    async def heartbeat(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        may_describe: Callable[[str], bool],
    ) -> ErrorCode:
        found = self._member(group_id, generation, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return found
        _, member, protocol = found
        hb = Heartbeat(group_id, member.member_id, member.epoch, (member.client_id, member.client_host))
        try:
            await self._coordinator.beat(hb, None, may_describe)
        except Refused as r:
            return r.code
        rejoin = member.revoking or member.assigned != protocol.sent
        return ErrorCode.rebalance_in_progress if rejoin else ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        g = self._coordinator.groups.get(group_id)
        if g is not None and instance_id is not None and not member_id:
            member_id = g.instances.get(instance_id, "")
        member = None if g is None else g.members.get(member_id)
        if g is None or member is None:
            return ErrorCode.unknown_member_id
        self._coordinator.leave(g, member)
        return ErrorCode.none

    def _member(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerGroup, ConsumerMember, ClassicProtocol] | ErrorCode:
        """The classic member, if it is at the generation it was told; else why not."""
        g = self._coordinator.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None and g.instances.get(instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        member = g.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.unknown_member_id
        if generation != member.classic.generation:
            return ErrorCode.illegal_generation
        return g, member, member.classic
