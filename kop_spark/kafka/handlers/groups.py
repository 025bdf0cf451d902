"""The group APIs: JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP (membership: ``GroupMembership``,
or ``ClassicMembers`` in a consumer-protocol group), and DESCRIBE_GROUPS, LIST_GROUPS,
DELETE_GROUPS, OFFSET_DELETE, which also see the groups that exist only as committed offsets
(Spark queries, CLI resets, consumers that use assign())."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..context import ServerContext
from ..error_codes import error_code
from ..group import GroupState, JoinRequest
from ..messages import RequestHeader, make, response_module

NO_TIME = datetime.timedelta(0)


async def join_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    session_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
    low, high = ctx.broker.config["group.min.session.timeout.ms"], ctx.broker.config["group.max.session.timeout.ms"]
    if not ctx.allowed(header, "Read", "Group", request.group_id):
        result_error, result = ErrorCode.group_authorization_failed, None
    elif not request.group_id or ctx.unkeepable_group_id(request.group_id):  # Kafka refuses an empty one
        result_error, result = ErrorCode.invalid_group_id, None
    elif not low <= session_ms <= high:
        result_error, result = ErrorCode.invalid_session_timeout, None
    elif ctx.share_groups.is_active(request.group_id):  # as Kafka: a share group takes share consumers only
        result_error, result = ErrorCode.inconsistent_group_protocol, None
    elif await ctx.group_servers.refusal(request.group_id):
        result_error, result = ErrorCode.not_coordinator, None
    else:
        joining = JoinRequest(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            (header.client_id or "", header.client_host),
            (session_ms, rebalance_ms if rebalance_ms > 0 else session_ms),
            request.protocol_type,
            [(p.name, p.metadata) for p in request.protocols],
            header.api_version >= 4,
        )
        if ctx.consumer_groups.is_active(request.group_id):  # a member of a consumer-protocol group
            result = await ctx.classic_members.join(joining, _describable(ctx, header))
        else:
            result = await ctx.membership.join(joining)
        result_error = result.error
    members = () if result is None else result.members
    return make(
        m.JoinGroupResponse,
        throttle_time=NO_TIME,
        error_code=result_error,
        generation_id=-1 if result is None else result.generation,
        protocol_type=None if result is None else result.protocol_type,
        protocol_name=None if result is None else result.protocol,
        leader="" if result is None else result.leader,
        skip_assignment=False if result is None else result.skip_assignment,
        member_id=request.member_id if result is None else result.member_id,
        members=tuple(
            make(m.JoinGroupResponseMember, member_id=j.member_id, group_instance_id=j.instance_id, metadata=j.metadata)
            for j in members
        ),
    )


async def sync_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if not ctx.allowed(header, "Read", "Group", request.group_id):
        return make(
            m.SyncGroupResponse, throttle_time=NO_TIME, error_code=ErrorCode.group_authorization_failed, assignment=b""
        )
    member = (request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None))
    if ctx.consumer_groups.is_active(request.group_id):
        result = ctx.classic_members.sync(*member)
    else:
        result = await ctx.membership.sync(*member, {a.member_id: a.assignment for a in request.assignments})
    if result.error == ErrorCode.none:
        await ctx.publisher.save(request.group_id)  # before the member is told: a restart keeps what it was told
    return make(
        m.SyncGroupResponse,
        throttle_time=NO_TIME,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol,
        assignment=result.assignment,
    )


async def heartbeat(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if not ctx.allowed(header, "Read", "Group", request.group_id):
        return make(m.HeartbeatResponse, throttle_time=NO_TIME, error_code=ErrorCode.group_authorization_failed)
    member = (request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None))
    if ctx.consumer_groups.is_active(request.group_id):
        code = await ctx.classic_members.heartbeat(*member, _describable(ctx, header))
    else:
        code = ctx.membership.heartbeat(*member)
    return make(m.HeartbeatResponse, throttle_time=NO_TIME, error_code=code)


async def leave_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if not ctx.allowed(header, "Read", "Group", request.group_id):
        refused = ErrorCode.group_authorization_failed
        return make(m.LeaveGroupResponse, throttle_time=NO_TIME, error_code=refused, members=())
    leave = ctx.classic_members.leave if ctx.consumer_groups.is_active(request.group_id) else ctx.membership.leave
    if header.api_version < 3:
        code = leave(request.group_id, request.member_id, None)
        return make(m.LeaveGroupResponse, throttle_time=NO_TIME, error_code=code)
    answers = tuple(
        make(
            m.MemberResponse,
            member_id=who.member_id,
            group_instance_id=who.group_instance_id,
            error_code=leave(request.group_id, who.member_id, who.group_instance_id),
        )
        for who in request.members
    )
    return make(m.LeaveGroupResponse, throttle_time=NO_TIME, error_code=ErrorCode.none, members=answers)


def _describable(ctx: ServerContext, header: RequestHeader) -> Callable[[str], bool]:
    return lambda topic: ctx.allowed(header, "Describe", "Topic", topic)


async def describe_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    out = []
    for group_id in request.groups:
        g = ctx.membership.groups.get(group_id)
        code, message = ErrorCode.none, None
        if not ctx.allowed(header, "Describe", "Group", group_id):
            code = ErrorCode.group_authorization_failed
        elif ctx.consumer_groups.is_active(group_id):  # as Kafka: ConsumerGroupDescribe describes those
            code, message = ErrorCode.group_id_not_found, f"group {group_id!r} is not a classic group"
        if code != ErrorCode.none:
            members, state, protocol_type, protocol = (), "", "", ""
        elif g is not None and g.members:
            members = tuple(
                make(
                    m.DescribedGroupMember,
                    member_id=mb.member_id,
                    group_instance_id=mb.instance_id,
                    client_id=mb.client_id,
                    client_host=mb.client_host,
                    member_metadata=mb.metadata(g.protocol),
                    member_assignment=mb.assignment,
                )
                for mb in g.members.values()
            )
            state, protocol_type, protocol = g.state.value, g.protocol_type or "", g.protocol or ""
        else:
            members = ()
            committed = await ctx.call(ctx.broker.list_groups)
            state = GroupState.EMPTY.value if group_id in committed else GroupState.DEAD.value
            protocol_type = protocol = ""
        out.append(
            make(
                m.DescribedGroup,
                error_code=code,
                error_message=message,
                group_id=group_id,
                group_state=state,
                protocol_type=protocol_type,
                protocol_data=protocol,
                members=members,
            )
        )
    return make(m.DescribeGroupsResponse, throttle_time=NO_TIME, groups=tuple(out))


async def list_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    # (protocol type, state, group type): a group known by its offsets alone is an empty classic one
    groups: dict[str, tuple[str, str, str]] = dict.fromkeys(
        await ctx.call(ctx.broker.list_groups), ("consumer", GroupState.EMPTY.value, "classic")
    )
    for g in ctx.membership.groups.values():
        if g.members:
            groups[g.group_id] = (g.protocol_type or "", g.state.value, "classic")
    for cg in ctx.consumer_groups.groups.values():
        if cg.members:
            groups[cg.group_id] = ("consumer", cg.state.value, "consumer")
    for group_id in await ctx.call(ctx.share_states.groups):
        groups[group_id] = ("share", "Empty", "share")
    for group_id in ctx.share_groups.groups:
        if ctx.share_groups.is_active(group_id):
            groups[group_id] = ("share", "Stable", "share")
    states = set(getattr(request, "states_filter", ()))
    types = {t.lower() for t in getattr(request, "types_filter", ())}  # v5 (KIP-848), any case as Kafka
    everything = ctx.allowed(header, "Describe", "Cluster")  # else the groups it may describe, as Kafka
    listed = tuple(
        make(m.ListedGroup, group_id=name, protocol_type=kind, group_state=state, group_type=group_type)
        for name, (kind, state, group_type) in sorted(groups.items())
        if (not states or state in states)
        and (not types or group_type in types)
        and (everything or ctx.allowed(header, "Describe", "Group", name))
    )
    return make(m.ListGroupsResponse, throttle_time=NO_TIME, error_code=ErrorCode.none, groups=listed)


async def delete_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    results = []
    for group_id in request.groups_names:
        if not ctx.allowed(header, "Delete", "Group", group_id):
            code = ErrorCode.group_authorization_failed
        elif ctx.group_active(group_id):
            code = ErrorCode.non_empty_group
        else:
            try:
                if not await ctx.call(ctx.share_states.forget, group_id):  # a share group has states, no offsets
                    await ctx.call(ctx.broker.delete_group, group_id)
                ctx.membership.forget(group_id)
                code = ErrorCode.none
            except Exception as e:
                code = error_code(e, f"delete group {group_id!r}")
        results.append(make(m.DeletableGroupResult, group_id=group_id, error_code=code))
    return make(m.DeleteGroupsResponse, throttle_time=NO_TIME, results=tuple(results))


async def offset_delete(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    subscribed = ctx.subscribed_topics(request.group_id)
    codes = {tp: ErrorCode.group_subscribed_to_topic for tp in wanted if tp[0] in subscribed}
    codes.update(
        {tp: ErrorCode.topic_authorization_failed for tp in wanted if not ctx.allowed(header, "Read", "Topic", tp[0])}
    )
    top = ErrorCode.none
    try:
        ctx.authorize(header, "Delete", "Group", request.group_id)
        await ctx.call(ctx.broker.delete_offsets, request.group_id, [tp for tp in wanted if tp not in codes])
    except Exception as e:
        top = error_code(e, f"delete offsets of group {request.group_id!r}")
    topics = tuple(
        make(
            m.OffsetDeleteResponseTopic,
            name=t.name,
            partitions=tuple(
                make(
                    m.OffsetDeleteResponsePartition,
                    partition_index=p.partition_index,
                    error_code=codes.get((t.name, p.partition_index), ErrorCode.none),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return make(m.OffsetDeleteResponse, error_code=top, throttle_time=NO_TIME, topics=topics)
