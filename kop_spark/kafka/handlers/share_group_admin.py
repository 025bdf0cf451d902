"""What admin clients ask of share groups (KIP-932), as ``kafka-share-groups`` does:
SHARE_GROUP_DESCRIBE (members, their subscriptions and assignments), DESCRIBE_SHARE_GROUP_OFFSETS
(each partition's start offset and lag, from the states kop serve keeps; Describe on the group,
topics the client may not describe left out), and ALTER_ / DELETE_SHARE_GROUP_OFFSETS, which move
or forget an inactive group's start."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import ShareStates
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module
from ..topic_snapshot import TopicSnapshot

NO_TIME = datetime.timedelta(0)
ASSIGNOR = "simple"  # Kafka's share-group assignor (``share_assignor``)


async def share_group_describe(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    out = [await _described(ctx, header, m, group_id) for group_id in request.group_ids]
    return make(m.ShareGroupDescribeResponse, throttle_time=NO_TIME, groups=tuple(out))


async def _described(ctx: ServerContext, header: RequestHeader, m: Any, group_id: str) -> Any:
    def described(code: ErrorCode, message: str | None, state: str, epoch: int, members: tuple[Any, ...] = ()) -> Any:
        return make(
            m.DescribedGroup,
            error_code=code,
            error_message=message,
            group_id=group_id,
            group_state=state,
            group_epoch=epoch,
            assignment_epoch=epoch,
            assignor_name=ASSIGNOR,
            members=members,
        )

    if not ctx.allowed(header, "Describe", "Group", group_id):
        return described(ErrorCode.group_authorization_failed, f"may not describe group {group_id!r}", "Dead", -1)
    g = ctx.share_groups.groups.get(group_id)
    if g is None:  # a share group without members has only the states kept of it
        if await ctx.call(ctx.share_states.partitions, group_id):
            return described(ErrorCode.none, None, "Empty", 0)
        return described(ErrorCode.group_id_not_found, f"group {group_id!r} is not a share group", "Dead", -1)
    topics = await ctx.consumer_groups.topics()
    members = tuple(
        make(
            m.Member,
            member_id=member.member_id,
            member_epoch=member.epoch,
            client_id=member.client[0],
            client_host=member.client[1],
            subscribed_topic_names=tuple(sorted(member.topics)),
            assignment=make(
                m.Assignment,
                topic_partitions=tuple(
                    make(m.TopicPartitions, topic_id=i, topic_name=topics.by_id[i].name, partitions=ps)
                    for i, ps in topics.ids(member.sent or ())
                ),
            ),
        )
        for member in g.members.values()
    )
    return described(ErrorCode.none, None, "Stable" if members else "Empty", g.epoch, members)


async def describe_share_group_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    topics = await ctx.consumer_groups.topics()
    groups = []
    for asked in request.groups:
        group_id = asked.group_id
        if not ctx.allowed(header, "Describe", "Group", group_id):
            groups.append(
                make(
                    m.DescribeShareGroupOffsetsResponseGroup,
                    group_id=group_id,
                    topics=(),
                    error_code=ErrorCode.group_authorization_failed,
                    error_message=f"may not describe group {group_id!r}",
                )
            )
            continue
        kept = await ctx.call(ctx.share_states.partitions, group_id)
        wanted = (
            {(t.topic_name, p) for t in asked.topics for p in t.partitions} if asked.topics is not None else set(kept)
        )
        by_topic: dict[str, list[Any]] = {}
        for topic, p in sorted(wanted):
            if topic not in topics.by_name or not ctx.allowed(header, "Describe", "Topic", topic):
                continue
            state = kept.get((topic, p))
            start, lag, code = -1, -1, ErrorCode.none
            if state is not None:
                try:
                    end = await ctx.call(ctx.broker.list_offsets, topic, p, "latest")
                    start, lag = state["start_offset"], ShareStates.lag(state, end)
                except Exception as e:
                    code = error_code(e, f"describe share group offsets of {topic}-{p}")
            by_topic.setdefault(topic, []).append(
                make(
                    m.DescribeShareGroupOffsetsResponsePartition,
                    partition_index=p,
                    start_offset=start,
                    leader_epoch=-1,
                    lag=lag,
                    error_code=code,
                )
            )
        answered = tuple(
            make(
                m.DescribeShareGroupOffsetsResponseTopic,
                topic_name=t,
                topic_id=topics.by_name[t].topic_id,
                partitions=tuple(ps),
            )
            for t, ps in by_topic.items()
        )
        groups.append(
            make(
                m.DescribeShareGroupOffsetsResponseGroup, group_id=group_id, topics=answered, error_code=ErrorCode.none
            )
        )
    return make(m.DescribeShareGroupOffsetsResponse, throttle_time=NO_TIME, groups=tuple(groups))


async def alter_share_group_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """kafka-share-groups --reset-offsets --execute: an inactive group's start in each partition
    named, its records in flight forgotten. Read on the group and on each topic, as Kafka."""
    m = response_module(header.api_key, header.api_version)
    topics = await ctx.consumer_groups.topics()
    refused = _refused(ctx, header, "Read", request.group_id)
    answered = []
    for t in request.topics if refused is None else ():
        parts = []
        for p in t.partitions:
            code, message = await _reset(ctx, header, request.group_id, t.topic_name, p.partition_index, p.start_offset)
            parts.append(
                make(
                    m.AlterShareGroupOffsetsResponsePartition,
                    partition_index=p.partition_index,
                    error_code=code,
                    error_message=message,
                )
            )
        answered.append(_topic(m.AlterShareGroupOffsetsResponseTopic, topics, t.topic_name, partitions=tuple(parts)))
    return _answer(m.AlterShareGroupOffsetsResponse, refused, answered)


async def _reset(
    ctx: ServerContext, header: RequestHeader, group_id: str, topic: str, partition: int, offset: int
) -> tuple[ErrorCode, str | None]:
    if not ctx.allowed(header, "Read", "Topic", topic):
        return ErrorCode.topic_authorization_failed, f"may not read topic {topic!r}"
    try:
        earliest = await ctx.call(ctx.broker.list_offsets, topic, partition, "earliest")
        latest = await ctx.call(ctx.broker.list_offsets, topic, partition, "latest")
        if not earliest <= offset <= latest:
            return (
                ErrorCode.offset_out_of_range,
                f"{topic}-{partition} holds offsets {earliest} to {latest}, not {offset}",
            )
        await ctx.call(ctx.share_states.save, group_id, topic, partition, ShareStates.started_at(offset))
    except Exception as e:
        return error_code(e, f"reset share group {group_id!r} in {topic}-{partition}"), str(e)
    return ErrorCode.none, None


async def delete_share_group_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """kafka-share-groups --delete-offsets: an inactive group forgets the topics named (it starts
    again where share.auto.offset.reset says). Delete on the group, Read on each topic, as Kafka."""
    m = response_module(header.api_key, header.api_version)
    topics = await ctx.consumer_groups.topics()
    refused = _refused(ctx, header, "Delete", request.group_id)
    kept = await ctx.call(ctx.share_states.partitions, request.group_id) if refused is None else {}
    answered = []
    for t in request.topics if refused is None else ():
        code, message = ErrorCode.none, None
        if not ctx.allowed(header, "Read", "Topic", t.topic_name):
            code, message = ErrorCode.topic_authorization_failed, f"may not read topic {t.topic_name!r}"
        else:
            for topic, p in [tp for tp in kept if tp[0] == t.topic_name]:
                await ctx.call(ctx.share_states.save, request.group_id, topic, p, None)
        answered.append(
            _topic(m.DeleteShareGroupOffsetsResponseTopic, topics, t.topic_name, error_code=code, error_message=message)
        )
    return _answer(m.DeleteShareGroupOffsetsResponse, refused, answered)


def _refused(ctx: ServerContext, header: RequestHeader, operation: str, group_id: str) -> tuple[ErrorCode, str] | None:
    """Why a change to a share group's offsets is refused: the ACL, or members (as Kafka, only an
    inactive group's offsets change)."""
    if not ctx.allowed(header, operation, "Group", group_id):
        return ErrorCode.group_authorization_failed, f"may not {operation.lower()} group {group_id!r}"
    if ctx.group_active(group_id):
        return ErrorCode.non_empty_group, f"group {group_id!r} has members: stop them first"
    return None


def _topic(cls: Any, topics: TopicSnapshot, name: str, **fields: Any) -> Any:
    """A topic's answer to a change of offsets: its name, and its id where it exists."""
    info = topics.by_name.get(name)
    return make(cls, topic_name=name, topic_id=None if info is None else info.topic_id, **fields)


def _answer(cls: Any, refused: tuple[ErrorCode, str] | None, answered: list[Any]) -> Any:
    code, message = refused or (ErrorCode.none, None)
    return make(cls, throttle_time=NO_TIME, error_code=code, error_message=message, responses=tuple(answered))
