"""FIND_COORDINATOR (this node, for every transactional id, and every group not served by another
server over the store: ``group_servers``), OFFSET_COMMIT and OFFSET_FETCH: offsets go to the
same offsets topic through the Broker's coordinator, so wire consumers, Spark queries and CLI
resets share one view (``kop groups``)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import OffsetAndMetadata
from ..context import NODE_ID, ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

NO_GENERATION = -1  # a commit from outside any group generation (assign(), tools)
TRANSACTION = 1  # FindCoordinator's key type of a transactional id (0: a group)


async def find_coordinator(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    here = {"node_id": NODE_ID, "host": ctx.advertised(header).host, "port": ctx.advertised(header).port}

    async def answer(key: str) -> tuple[ErrorCode, str | None]:
        if getattr(request, "key_type", 0) == TRANSACTION:
            allowed = ctx.allowed(header, "Describe", "TransactionalId", key)
            return (ErrorCode.none if allowed else ErrorCode.transactional_id_authorization_failed), None
        if not ctx.allowed(header, "Describe", "Group", key):
            return ErrorCode.group_authorization_failed, None
        refusal = await ctx.group_servers.refusal(key)
        return (ErrorCode.none, None) if refusal is None else (ErrorCode.coordinator_not_available, refusal)

    if header.api_version >= 4:
        found = []
        for k in request.coordinator_keys:
            code, message = await answer(k)
            found.append(make(m.Coordinator, key=k, error_code=code, error_message=message, **here))
        return make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0), coordinators=tuple(found))
    code, message = await answer(request.key)
    return make(
        m.FindCoordinatorResponse,
        throttle_time=datetime.timedelta(0),
        error_code=code,
        error_message=message if header.api_version >= 1 else None,
        **here,
    )


async def offset_commit(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", NO_GENERATION))
    fenced = ctx.validate_commit(
        request.group_id,
        generation,
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        plain_v8=header.api_version < 9,
    )
    where = f"commit of group {request.group_id!r}"
    offsets, codes = await requested_offsets(ctx, header, request.group_id, request.topics, fenced, where)
    if offsets:
        try:
            await ctx.call(ctx.broker.commit_offsets, request.group_id, offsets)
            codes.update(dict.fromkeys(offsets, ErrorCode.none))
        except Exception as e:
            codes.update(dict.fromkeys(offsets, error_code(e, where)))
    topics = commit_answers(m.OffsetCommitResponseTopic, m.OffsetCommitResponsePartition, request.topics, codes)
    return make(m.OffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=topics)


async def requested_offsets(
    ctx: ServerContext, header: RequestHeader, group: str, topics: Any, refused: ErrorCode, where: str
) -> tuple[dict[tuple[str, int], OffsetAndMetadata], dict[tuple[str, int], ErrorCode]]:
    """An offset commit's offsets by partition (OffsetCommit's, TxnOffsetCommit's), and the codes
    of the partitions refused: every one with ``refused`` unless it is NONE (a fenced member),
    else a topic without Read on it and the group, or a partition that does not exist."""
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in topics:
        code = ErrorCode.unknown_topic_or_partition
        try:
            ctx.authorize(header, "Read", "Group", group)
            ctx.authorize(header, "Read", "Topic", t.name)
            partitions = await ctx.call(ctx.broker.partitions_for, t.name)
        except Exception as e:
            partitions, code = 0, error_code(e, f"{where} to {t.name}")
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if refused != ErrorCode.none:
                codes[tp] = refused
            elif not 0 <= p.partition_index < partitions:
                codes[tp] = code
            else:
                offsets[tp] = OffsetAndMetadata(p.committed_offset, p.committed_metadata or "")
    return offsets, codes


def commit_answers(topic_class: Any, partition_class: Any, topics: Any, codes: dict[tuple[str, int], ErrorCode]) -> Any:
    """An offset commit's answer, topic by topic, as the request named them."""
    return tuple(
        make(
            topic_class,
            name=t.name,
            partitions=tuple(
                make(partition_class, partition_index=p.partition_index, error_code=codes[(t.name, p.partition_index)])
                for p in t.partitions
            ),
        )
        for t in topics
    )


async def offset_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if header.api_version < 8:
        topics, code = await _fetch_group(ctx, header, m, request.group_id, request.topics)
        return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0), topics=topics, error_code=code)
    groups = []
    for g in request.groups:  # v8 asks for several groups; v9 says which member asks
        code = ErrorCode.none
        if getattr(g, "member_id", None) and ctx.consumer_groups.is_active(g.group_id):
            code = ctx.consumer_groups.validate_fetch(g.group_id, g.member_id, g.member_epoch)
        topics, code = await _fetch_group(ctx, header, m, g.group_id, g.topics) if not code else ((), code)
        groups.append(make(m.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=code))
    return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0), groups=tuple(groups))


async def _fetch_group(
    ctx: ServerContext, header: RequestHeader, m: Any, group: str, topics: Any
) -> tuple[tuple[Any, ...], ErrorCode]:
    """One group's committed offsets (of ``topics``; None: all), by topic, and the group's error."""
    v8 = header.api_version >= 8  # whose parts are named in the plural
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    try:
        ctx.authorize(header, "Describe", "Group", group)
        found = await ctx.call(ctx.broker.fetch_offsets, group, wanted)
        found = {tp: o for tp, o in found.items() if ctx.allowed(header, "Describe", "Topic", tp[0])}
    except Exception as e:
        return (), error_code(e, f"offsets of group {group!r}")
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), o in sorted(found.items()):
        by_topic.setdefault(topic, []).append(
            make(
                m.OffsetFetchResponsePartitions if v8 else m.OffsetFetchResponsePartition,
                partition_index=p,
                committed_offset=o.offset,
                committed_leader_epoch=-1,
                metadata=o.metadata,
                error_code=ErrorCode.none,
            )
        )
    topic_class = m.OffsetFetchResponseTopics if v8 else m.OffsetFetchResponseTopic
    return tuple(make(topic_class, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()), ErrorCode.none
