"""Kafka's classic rebalance protocol (Kafka's ``GroupCoordinator``, membership part): JoinGroup,
SyncGroup, Heartbeat and LeaveGroup move a group through Empty -> PreparingRebalance ->
CompletingRebalance -> Stable, with session timeouts, the rebalance timeout, the initial
rebalance delay, MEMBER_ID_REQUIRED and static membership (``group.instance.id``).

Membership lives in this server's memory, as the front-end's own state (DESIGN.md §1), and each
settled generation is kept in the store (``broker.group_snapshots``), from which a restarted server
takes the group up (``restore``); committed offsets stay the Broker's, so ``validate_commit`` is
all a commit asks of this class. Everything
runs on the server's event loop: no lock, and timers are the loop's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from .consumer_protocol import subscription
from .group import Group, GroupState, JoinRequest, JoinResult, Member, SyncResult

_NO_GENERATION = -1


class GroupMembership:
    def __init__(self, initial_rebalance_delay_ms: int, on_change: Callable[[str], None] = lambda group: None):
        self._initial_delay_s = initial_rebalance_delay_ms / 1000
        self._on_change = on_change  # told of every new generation, assignment and departure
        self.groups: dict[str, Group] = {}

    # -- JoinGroup -------------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        group_id, member_id, instance_id, client, timeouts_ms, protocol_type, protocols, _ = request
        g = self.groups.setdefault(group_id, Group(group_id))
        if g.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not g.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if instance_id is not None:
            known = g.instances.get(instance_id)
            if member_id and known is not None and known != member_id:
                return JoinResult(ErrorCode.fenced_instance_id, member_id)
            if not member_id and known is not None:
                return await self._rejoin_static(g, known, client, protocols)
        if not member_id or member_id in g.pending:
            if not member_id and instance_id is None and request.require_known_member_id:
                new_id = f"{client[0]}-{uuid.uuid4()}"
                g.pending.add(new_id)
                return JoinResult(ErrorCode.member_id_required, new_id)
            g.pending.discard(member_id)
            new_id = member_id or f"{instance_id or client[0]}-{uuid.uuid4()}"
            return await self._add(g, Member(new_id, instance_id, *client, *timeouts_ms, protocols), protocol_type)
        existing = g.members.get(member_id)
        if existing is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        return await self._rejoin(g, existing, protocols)

    async def _add(self, g: Group, member: Member, protocol_type: str) -> JoinResult:
        if not g.members:
            g.protocol_type = protocol_type
        g.members[member.member_id] = member
        if member.instance_id is not None:
            g.instances[member.instance_id] = member.member_id
        return await self._await_join(g, member)

    async def _rejoin(self, g: Group, member: Member, protocols: list[tuple[str, bytes]]) -> JoinResult:
        changed = protocols != member.protocols
        member.protocols = protocols
        if g.state == GroupState.COMPLETING_REBALANCE and not changed:
            return g.join_result(member)  # it lost the answer: the same generation again
        if g.state == GroupState.STABLE and not changed and member.member_id != g.leader:
            return g.join_result(member)
        return await self._await_join(g, member)

    async def _rejoin_static(
        self, g: Group, old_id: str, client: tuple[str, str], protocols: list[tuple[str, bytes]]
    ) -> JoinResult:
        """A static member back under a new member id: it takes the old one's place, and a stable
        group with unchanged protocols keeps its generation and assignment (no rebalance)."""
        old = g.members.pop(old_id)
        old.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_id))
        old.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        if old.expiry is not None:
            old.expiry.cancel()
        member = Member(
            f"{old.instance_id}-{uuid.uuid4()}",
            old.instance_id,
            *client,
            old.session_timeout_ms,
            old.rebalance_timeout_ms,
            protocols,
            old.assignment,
        )
        g.members[member.member_id] = member
        assert member.instance_id is not None
        g.instances[member.instance_id] = member.member_id
        if g.leader == old_id:
            g.leader = member.member_id
        if g.state == GroupState.STABLE and protocols == old.protocols:
            self._heartbeat(g, member)
            self._on_change(g.group_id)
            return g.join_result(member)._replace(skip_assignment=member.member_id == g.leader)
        return await self._await_join(g, member)

    async def _await_join(self, g: Group, member: Member) -> JoinResult:
        joined = member.join = asyncio.get_running_loop().create_future()
        if member.expiry is not None:
            member.expiry.cancel()  # a member waiting for the rebalance is alive
            member.expiry = None
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g)
        else:
            self._try_complete_join(g)
        return await joined

    # -- rebalancing -----------------------------------------------------------------------

    def _prepare_rebalance(self, g: Group) -> None:
        for m in g.members.values():  # a generation being synced is abandoned
            m.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
        initial = g.state == GroupState.EMPTY
        g.state = GroupState.PREPARING_REBALANCE
        loop = asyncio.get_running_loop()
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        timeout_s = g.rebalance_timeout_ms() / 1000
        # An empty group waits for its first members to arrive together (group.initial.rebalance.delay.ms).
        g.initial_delay = initial and self._initial_delay_s > 0
        delay = min(self._initial_delay_s, timeout_s) if g.initial_delay else timeout_s
        g.rebalance_timer = loop.call_later(delay, self._complete_join, g)
        self._try_complete_join(g)

    def _try_complete_join(self, g: Group) -> None:
        if g.state == GroupState.PREPARING_REBALANCE and g.all_joined() and not g.initial_delay:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        """Form the next generation from the members that rejoined; the others are out."""
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        g.rebalance_timer, g.initial_delay = None, False
        for m in [m for m in g.members.values() if m.join is None]:
            self._remove(g, m, rebalance=False)
        g.generation += 1
        self._on_change(g.group_id)
        if not g.members:
            g.state, g.protocol, g.leader = GroupState.EMPTY, None, None
            # Forgotten, as Kafka forgets an empty group (its offsets are the store's, and the
            # next member starts a generation afresh, as after a restart): a server that saw
            # short-lived group ids (``app-<uuid>``) kept each one as long as it ran. Not while
            # a client told MEMBER_ID_REQUIRED is to join with the id it was given.
            if not g.pending and self.groups.get(g.group_id) is g:
                del self.groups[g.group_id]
            return
        g.protocol = g.select_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = GroupState.COMPLETING_REBALANCE
        for m in g.members.values():
            m.answer_join(g.join_result(m))
            self._heartbeat(g, m)

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def _member(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[Group, Member] | ErrorCode:
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return ErrorCode.unknown_member_id
        if instance_id is not None and g.instances.get(instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        member = g.members.get(member_id)
        return ErrorCode.unknown_member_id if member is None else (g, member)

    def _in_generation(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[Group, Member] | ErrorCode:
        """The member, if it is one of the group's current generation; else why not."""
        found = self._member(group_id, member_id, instance_id)
        if isinstance(found, ErrorCode) or generation == found[0].generation:
            return found
        return ErrorCode.illegal_generation

    async def sync(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None, assignments: dict[str, bytes]
    ) -> SyncResult:
        found = self._in_generation(group_id, generation, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return SyncResult(found)
        g, member = found
        if g.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._heartbeat(g, member)
        if g.state == GroupState.STABLE:
            return SyncResult(ErrorCode.none, member.assignment, g.protocol_type, g.protocol)
        synced = member.sync = asyncio.get_running_loop().create_future()
        if member_id == g.leader:
            for m in g.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            g.state = GroupState.STABLE
            self._on_change(g.group_id)
            for m in g.members.values():
                m.answer_sync(SyncResult(ErrorCode.none, m.assignment, g.protocol_type, g.protocol))
            return SyncResult(ErrorCode.none, member.assignment, g.protocol_type, g.protocol)
        return await synced

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        found = self._in_generation(group_id, generation, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return found
        g, member = found
        self._heartbeat(g, member)
        return ErrorCode.rebalance_in_progress if g.state == GroupState.PREPARING_REBALANCE else ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None and not member_id:
            g = self.groups.get(group_id)
            member_id = (g.instances.get(instance_id, "") if g else "") or member_id
        found = self._member(group_id, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return found
        self._remove(*found, rebalance=True)
        return ErrorCode.none

    def give_up(self, group_id: str) -> None:
        """Every member out, as if it left (another server serves the group)."""
        for member_id in list(getattr(self.groups.get(group_id), "members", ())):
            self.leave(group_id, member_id, None)

    # -- members' lives --------------------------------------------------------------------

    def _heartbeat(self, g: Group, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        loop = asyncio.get_running_loop()
        member.expiry = loop.call_later(member.session_timeout_ms / 1000, self._expire, g, member)

    def _expire(self, g: Group, member: Member) -> None:
        if g.members.get(member.member_id) is member and member.join is None:
            self._remove(g, member, rebalance=True)

    def _remove(self, g: Group, member: Member, rebalance: bool) -> None:
        del g.members[member.member_id]
        self._on_change(g.group_id)
        if member.instance_id is not None and g.instances.get(member.instance_id) == member.member_id:
            del g.instances[member.instance_id]
        if member.expiry is not None:
            member.expiry.cancel()
        member.answer_join(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        member.answer_sync(SyncResult(ErrorCode.unknown_member_id))
        if not rebalance:
            return
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        elif g.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join(g)

    # -- what the rest of the server asks ----------------------------------------------------

    def validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's fencing of an OFFSET_COMMIT: a commit outside any generation is taken only
        while the group has no members; one from a member must carry its current generation."""
        g = self.groups.get(group_id)
        if g is None or not g.members:
            return ErrorCode.none if generation == _NO_GENERATION else ErrorCode.illegal_generation
        if generation == _NO_GENERATION and not member_id:
            return ErrorCode.unknown_member_id
        found = self._in_generation(group_id, generation, member_id, instance_id)
        if isinstance(found, ErrorCode):
            return found
        g, member = found
        if g.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self._heartbeat(g, member)
        return ErrorCode.none

    def subscribed_topics(self, group_id: str) -> set[str]:
        """Topics the members of a consumer group subscribe to, from their subscriptions."""
        g = self.groups.get(group_id)
        if g is None or g.protocol_type != "consumer":
            return set()
        return {t for m in g.members.values() for t in subscription(m.metadata(g.protocol)).topics}

    def is_active(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def restore(self, g: Group) -> None:
        """Takes up a group as it settled on a server before this one: its members go on in their
        generation, each with a new session."""
        self.groups[g.group_id] = g
        for m in g.members.values():
            self._heartbeat(g, m)

    def adopt(self, g: Group) -> None:
        """Takes a group back from the consumer protocol (its online downgrade): its members, all
        classic, are told to join again, and their leader assigns, as in any classic group."""
        self.groups[g.group_id] = g
        for m in g.members.values():
            self._heartbeat(g, m)
        self._prepare_rebalance(g)
        self._on_change(g.group_id)

    def hand_over(self, group_id: str) -> Group:
        """Gives up a group with members to the consumer protocol (its online migration): its
        timers stop, and a JoinGroup or SyncGroup under way is told to join again, which the
        consumer-protocol group then answers."""
        g = self.groups.pop(group_id)
        g.release(ErrorCode.rebalance_in_progress)
        return g

    def forget(self, group_id: str) -> None:
        """A deleted group (it had no members)."""
        self.groups.pop(group_id, None)

    def close(self) -> None:
        for g in self.groups.values():
            g.release(ErrorCode.coordinator_not_available)
