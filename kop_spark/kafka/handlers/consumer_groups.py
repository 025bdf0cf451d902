"""The consumer rebalance protocol's APIs (KIP-848): CONSUMER_GROUP_HEARTBEAT, which
``ConsumerGroupCoordinator`` answers, and CONSUMER_GROUP_DESCRIBE. A heartbeat to a classic
group of consumers with members converts it (``ClassicMembers``); one to any other classic group
with members is refused with GROUP_ID_NOT_FOUND, as Kafka refuses it."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import TopicInfo
from ..consumer_group import ConsumerGroup, ConsumerMember
from ..consumer_group_coordinator import Heartbeat
from ..context import ServerContext
from ..messages import RequestHeader, make, response_module

NO_TIME = datetime.timedelta(0)


async def consumer_group_heartbeat(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)

    def refused(code: ErrorCode, message: str) -> Any:
        return make(
            m.ConsumerGroupHeartbeatResponse,
            throttle_time=NO_TIME,
            error_code=code,
            error_message=message,
            member_id=request.member_id or None,
            member_epoch=-1,
            heartbeat_interval=NO_TIME,
        )

    if not ctx.allowed(header, "Read", "Group", request.group_id):
        return refused(ErrorCode.group_authorization_failed, f"may not read group {request.group_id!r}")
    if not request.group_id:
        return refused(ErrorCode.invalid_request, "the group id is empty")
    if unkeepable := ctx.unkeepable_group_id(request.group_id):
        return refused(ErrorCode.invalid_group_id, unkeepable)
    if ctx.share_groups.is_active(request.group_id):
        return refused(ErrorCode.group_id_not_found, f"group {request.group_id!r} is a share group")
    if ctx.membership.is_active(request.group_id) and not ctx.upgrade(request.group_id):
        return refused(ErrorCode.group_id_not_found, f"group {request.group_id!r} is a classic group, not of consumers")
    denied = [t for t in request.subscribed_topic_names or () if not ctx.allowed(header, "Describe", "Topic", t)]
    if denied:
        return refused(ErrorCode.topic_authorization_failed, f"may not describe topics {', '.join(denied)}")
    if request.member_epoch == 0 and (elsewhere := await ctx.group_servers.refusal(request.group_id)):
        return refused(ErrorCode.not_coordinator, elsewhere)
    answer = await ctx.consumer_groups.heartbeat(
        Heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            client=(header.client_id or "", header.client_host),
            instance_id=request.instance_id,
            rebalance_timeout_ms=int(request.rebalance_timeout.total_seconds() * 1000),
            # matched against the topics as listed, whichever spelling the member subscribed with
            topic_names=None
            if request.subscribed_topic_names is None
            else tuple(map(ctx.listed_topic, request.subscribed_topic_names)),
            topic_regex=getattr(request, "subscribed_topic_regex", None),
            assignor=request.server_assignor,
            owned=None
            if request.topic_partitions is None
            else tuple((t.topic_id, tuple(t.partitions)) for t in request.topic_partitions),
            generated_ids=header.api_version == 0,
        ),
        lambda topic: ctx.allowed(header, "Describe", "Topic", topic),
    )
    if answer.error == ErrorCode.none and (
        answer.assignment is not None or answer.member_epoch != request.member_epoch
    ):
        await ctx.publisher.save(request.group_id)  # before the member is told: a restart keeps what it was told
    assignment = None
    if answer.assignment is not None:
        assignment = make(
            m.Assignment,
            topic_partitions=tuple(make(m.TopicPartitions, topic_id=i, partitions=ps) for i, ps in answer.assignment),
        )
    return make(
        m.ConsumerGroupHeartbeatResponse,
        throttle_time=NO_TIME,
        error_code=answer.error,
        error_message=answer.message,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.interval_ms),
        assignment=assignment,
    )


async def consumer_group_describe(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    topics = (await ctx.consumer_groups.topics()).by_name
    committed: list[str] | None = None
    out = []
    for group_id in request.group_ids:
        g = ctx.consumer_groups.groups.get(group_id)
        code, message = ErrorCode.none, None
        if not ctx.allowed(header, "Describe", "Group", group_id):
            code, message = ErrorCode.group_authorization_failed, f"may not describe group {group_id!r}"
        elif g is None and ctx.membership.is_active(group_id):
            code, message = ErrorCode.group_id_not_found, f"group {group_id!r} is not a consumer group"
        elif g is None:
            committed = committed if committed is not None else await ctx.call(ctx.broker.list_groups)
            if group_id not in committed:
                code, message = ErrorCode.group_id_not_found, f"group {group_id!r} does not exist"
        out.append(_described(m, group_id, code, message, g if code == ErrorCode.none else None, topics))
    return make(m.ConsumerGroupDescribeResponse, throttle_time=NO_TIME, groups=tuple(out))


def _described(
    m: Any, group_id: str, code: ErrorCode, message: str | None, g: ConsumerGroup | None, by_name: dict[str, TopicInfo]
) -> Any:
    def assignment(partitions: frozenset[tuple[str, int]]) -> Any:
        topics = sorted({t for t, _ in partitions if t in by_name})
        return make(
            m.Assignment,
            topic_partitions=tuple(
                make(
                    m.TopicPartitions,
                    topic_id=by_name[t].topic_id,
                    topic_name=t,
                    partitions=tuple(sorted(p for name, p in partitions if name == t)),
                )
                for t in topics
            ),
        )

    def member(mb: ConsumerMember) -> Any:
        return make(
            m.Member,
            member_id=mb.member_id,
            instance_id=mb.instance_id,
            member_epoch=mb.epoch,
            client_id=mb.client_id,
            client_host=mb.client_host,
            subscribed_topic_names=tuple(sorted(mb.topic_names)),
            subscribed_topic_regex=mb.topic_regex,
            assignment=assignment(mb.assigned | mb.revoking),
            target_assignment=assignment(g.target.get(mb.member_id, frozenset()) if g is not None else frozenset()),
            member_type=1 if mb.classic is None else 0,  # 0: a classic member of the consumer group
        )

    return make(
        m.DescribedGroup,
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="Empty" if g is None else g.state.value,
        group_epoch=0 if g is None else g.epoch,
        assignment_epoch=0 if g is None else g.target_epoch,
        assignor_name="" if g is None else g.assignor,
        members=() if g is None else tuple(member(mb) for mb in g.members.values()),
    )
