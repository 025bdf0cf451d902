"""Share groups' APIs (KIP-932): SHARE_GROUP_HEARTBEAT, SHARE_FETCH and SHARE_ACKNOWLEDGE, which
``ShareGroupCoordinator`` and each partition's ``SharePartition`` answer. Partitions are named by
topic id. ACLs as Kafka's: Read on the group; Describe on the topics subscribed to, Read on those
fetched from."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import OffsetOutOfRangeError
from ...record import RecordBatch, split_batches
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module
from ..share_groups import CLOSE_SESSION, JOIN, LEAVE, ShareGroup, ShareGroupError, TopicPartition
from ..share_partition import SharePartition
from ..topic_snapshot import TopicSnapshot
from .fetch import next_look_in

NO_TIME = datetime.timedelta(0)
READ_BYTES = 1 << 20  # read for a partition at a time: a fetch acquires max_records, not all that was read


async def share_group_heartbeat(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)

    def answer(code: ErrorCode, message: str | None = None, epoch: int = -1, assignment: Any = None) -> Any:
        return make(
            m.ShareGroupHeartbeatResponse,
            throttle_time=NO_TIME,
            error_code=code,
            error_message=message,
            member_id=request.member_id or None,
            member_epoch=epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=ctx.share_groups.interval_ms),
            assignment=assignment,
        )

    if not ctx.allowed(header, "Read", "Group", request.group_id):
        return answer(ErrorCode.group_authorization_failed, f"may not read group {request.group_id!r}")
    if not request.group_id:
        return answer(ErrorCode.invalid_request, "the group id is empty")
    if unkeepable := ctx.unkeepable_group_id(request.group_id):
        return answer(ErrorCode.invalid_group_id, unkeepable)
    if ctx.membership.is_active(request.group_id) or ctx.consumer_groups.is_active(request.group_id):
        return answer(ErrorCode.inconsistent_group_protocol, f"group {request.group_id!r} is a consumer group")
    denied = [t for t in request.subscribed_topic_names or () if not ctx.allowed(header, "Describe", "Topic", t)]
    if denied:
        return answer(ErrorCode.topic_authorization_failed, f"may not describe topics {', '.join(denied)}")
    if request.member_epoch == JOIN and (elsewhere := await ctx.group_servers.refusal(request.group_id)):
        return answer(ErrorCode.not_coordinator, elsewhere)
    client = (header.client_id or "", header.client_host)
    names = request.subscribed_topic_names
    listed = None if names is None else tuple(map(ctx.listed_topic, names))  # as consumer groups match them
    try:
        member = ctx.share_groups.heartbeat(request.group_id, request.member_id, request.member_epoch, listed, client)
    except ShareGroupError as e:
        return answer(e.code, str(e))
    if request.member_epoch == LEAVE:
        return answer(ErrorCode.none, epoch=LEAVE)
    topics = await ctx.consumer_groups.topics()

    def partitions(topic: str) -> int:
        info = topics.by_name.get(topic)
        return 0 if info is None else info.partitions

    assigned = ctx.share_groups.assignment(request.group_id, member, partitions)
    repeated = assigned == member.sent and request.member_epoch != JOIN  # one joining (again) is always told
    if not repeated or member.epoch != request.member_epoch:
        ctx.share_groups.told(request.group_id, member, assigned)
        await ctx.publisher.save(request.group_id)  # before the member is told: a restart keeps what it was told
    if repeated:
        return answer(ErrorCode.none, epoch=member.epoch)
    parts = tuple(make(m.TopicPartitions, topic_id=i, partitions=ps) for i, ps in topics.ids(assigned))
    return answer(ErrorCode.none, epoch=member.epoch, assignment=make(m.Assignment, topic_partitions=parts))


async def share_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    lock = datetime.timedelta(milliseconds=ctx.share_groups.lock_ms)

    def refused(code: ErrorCode, message: str) -> Any:
        return make(
            m.ShareFetchResponse,
            throttle_time=NO_TIME,
            error_code=code,
            error_message=message,
            acquisition_lock_timeout=lock,
            responses=(),
            node_endpoints=(),
        )

    topics = await ctx.consumer_groups.topics()
    acks = _acks(topics, request.topics)
    try:
        g, session = _session(ctx, header, request, topics, acks)
    except ShareGroupError as e:
        return refused(e.code, str(e))
    answers = await _acknowledge(ctx, g, request.member_id, acks)
    records: dict[TopicPartition, tuple[bytes, list[tuple[int, int, int]]]] = {}
    if request.share_session_epoch == CLOSE_SESSION:
        ctx.share_groups.close_session(g, request.member_id, session.partitions)
        await ctx.share_groups.keep(g, session.partitions)
    else:
        deadline = time.monotonic() + request.max_wait.total_seconds()
        while True:
            started = time.monotonic()
            records = await _acquire(ctx, header, g, request.member_id, sorted(session.partitions), request, answers)
            left = deadline - time.monotonic()
            if records or acks or left <= 0:
                break
            await ctx.appends.wait(min(left, next_look_in(time.monotonic() - started)))
    parts = []
    for tp in sorted(set(answers) | set(records)):
        data, acquired = records.get(tp, (b"", []))
        code, ack_code = answers.get(tp, (ErrorCode.none, ErrorCode.none))
        part = make(
            m.PartitionData,
            partition_index=tp[1],
            error_code=code,
            acknowledge_error_code=ack_code,
            current_leader=_no_leader(m),
            records=data,
            acquired_records=tuple(
                make(m.AcquiredRecords, first_offset=f, last_offset=la, delivery_count=n) for f, la, n in acquired
            ),
        )
        parts.append((tp, part))
    return make(
        m.ShareFetchResponse,
        throttle_time=NO_TIME,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=lock,
        responses=_by_topic_id(topics, parts, m.ShareFetchableTopicResponse),
        node_endpoints=(),
    )


async def share_acknowledge(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    topics = await ctx.consumer_groups.topics()
    acks = _acks(topics, request.topics)

    def response(
        code: ErrorCode, message: str | None, answers: dict[TopicPartition, tuple[ErrorCode, ErrorCode]]
    ) -> Any:
        parts = [
            (tp, make(m.PartitionData, partition_index=tp[1], error_code=ack_code, current_leader=_no_leader(m)))
            for tp, (_, ack_code) in sorted(answers.items())
        ]
        return make(
            m.ShareAcknowledgeResponse,
            throttle_time=NO_TIME,
            error_code=code,
            error_message=message,
            responses=_by_topic_id(topics, parts, m.ShareAcknowledgeTopicResponse),
            node_endpoints=(),
        )

    try:
        g, session = _session(ctx, header, request, topics, acks)
    except ShareGroupError as e:
        return response(e.code, str(e), {})
    answers = await _acknowledge(ctx, g, request.member_id, acks)
    if request.share_session_epoch == CLOSE_SESSION:
        ctx.share_groups.close_session(g, request.member_id, session.partitions)
        await ctx.share_groups.keep(g, session.partitions)
    return response(ErrorCode.none, None, answers)


Acks = dict[TopicPartition, list[tuple[int, int, tuple[int, ...]]]]


def _no_leader(m: Any) -> Any:
    """The current leader a partition's answer names only with NOT_LEADER_OR_FOLLOWER: none."""
    return make(m.LeaderIdAndEpoch, leader_id=-1, leader_epoch=-1)


def _by_topic_id(topics: TopicSnapshot, parts: list[tuple[TopicPartition, Any]], kind: Any) -> tuple[Any, ...]:
    """Partitions' answers grouped by topic id (those of topics deleted meanwhile left out)."""
    by_id: dict[uuid.UUID, list[Any]] = {}
    for (topic, _), part in parts:
        info = topics.by_name.get(topic)
        if info is not None:
            by_id.setdefault(info.topic_id, []).append(part)
    return tuple(make(kind, topic_id=i, partitions=tuple(ps)) for i, ps in by_id.items())


def _acks(topics: TopicSnapshot, requested: Any) -> Acks:
    """The acknowledgements a request carries, by partition (those of topics unknown left out)."""
    acks: Acks = {}
    for t in requested:
        info = topics.by_id.get(t.topic_id)
        if info is None:
            continue
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches]
            if batches:
                acks[(info.name, p.partition_index)] = batches
    return acks


def _session(ctx: ServerContext, header: RequestHeader, request: Any, topics: TopicSnapshot, acks: Acks) -> Any:
    if not ctx.allowed(header, "Read", "Group", request.group_id or ""):
        raise ShareGroupError(ErrorCode.group_authorization_failed, f"may not read group {request.group_id!r}")
    if request.share_session_epoch == 0 and acks:
        raise ShareGroupError(ErrorCode.invalid_request, "acknowledgements in a request opening a share session")
    named = topics.names((t.topic_id, _indexes(t)) for t in getattr(request, "topics", ()))
    forgotten = topics.names((t.topic_id, t.partitions) for t in getattr(request, "forgotten_topics_data", ()))
    return ctx.share_groups.session(
        request.group_id or "", request.member_id or "", request.share_session_epoch, named, forgotten
    )


def _indexes(t: Any) -> tuple[int, ...]:
    return tuple(getattr(p, "partition_index", p) for p in t.partitions)


async def _acknowledge(
    ctx: ServerContext, g: ShareGroup, member_id: str, acks: Acks
) -> dict[TopicPartition, tuple[ErrorCode, ErrorCode]]:
    """Apply the acknowledgements and keep the partitions they changed, before the answer."""
    answers: dict[TopicPartition, tuple[ErrorCode, ErrorCode]] = {}
    for tp, batches in acks.items():
        sp = await ctx.share_groups.partition(g, tp)
        code = ErrorCode.none
        for first, last, types in batches:
            done = sp.acknowledge(member_id, first, last, types, ctx.share_groups.limit)
            code = code if code != ErrorCode.none else done
        answers[tp] = (ErrorCode.none, code)
    await ctx.share_groups.keep(g, acks)
    return answers


async def _acquire(
    ctx: ServerContext,
    header: RequestHeader,
    g: ShareGroup,
    member_id: str,
    partitions: list[TopicPartition],
    request: Any,
    answers: dict[TopicPartition, tuple[ErrorCode, ErrorCode]],
) -> dict[TopicPartition, tuple[bytes, list[tuple[int, int, int]]]]:
    """Acquire records for the member in its session's partitions, up to the request's limits."""
    out: dict[TopicPartition, tuple[bytes, list[tuple[int, int, int]]]] = {}
    records_left, bytes_left = request.max_records, request.max_bytes
    for tp in partitions:
        if records_left <= 0 or bytes_left <= 0:
            break
        try:
            ctx.authorize(header, "Read", "Topic", tp[0])
            sp = await ctx.share_groups.partition(g, tp)
            batches = await _read(ctx, sp, tp, min(bytes_left, READ_BYTES))
        except Exception as e:
            code = error_code(e, f"share fetch from {tp[0]}-{tp[1]}")
            answers[tp] = (code, answers.get(tp, (ErrorCode.none, ErrorCode.none))[1])
            continue
        share = ctx.share_groups
        upto = batches[-1].last_offset + 1 if batches else 0
        acquired = sp.acquire(member_id, upto, records_left, share.now_ms(), share.lock_ms, share.max_in_flight)
        if acquired:
            first, last = acquired[0][0], max(la for _, la, _ in acquired)
            data = b"".join(b.buffer for b in batches if b.last_offset >= first and b.base_offset <= last)
            out[tp] = (data, acquired)
            count = sum(la - f + 1 for f, la, _ in acquired)
            records_left -= count
            bytes_left -= len(data)
            ctx.metrics.fetched(tp[0], tp[1], len(data), count)
    return out


async def _read(ctx: ServerContext, sp: SharePartition, tp: TopicPartition, max_bytes: int) -> list[RecordBatch]:
    """The batches from the share partition's fetch position on, at least one if there is one."""
    limit = ctx.share_groups.limit
    position = sp.fetch_position(sp.start_offset, ctx.share_groups.now_ms(), limit)
    try:
        fetched = await ctx.call(ctx.broker.fetch_batches, tp[0], tp[1], position, max_bytes)
    except OffsetOutOfRangeError:  # retention removed records in flight
        start = await ctx.call(ctx.broker.list_offsets, tp[0], tp[1], "earliest")
        position = sp.fetch_position(start, ctx.share_groups.now_ms(), limit)
        fetched = await ctx.call(ctx.broker.fetch_batches, tp[0], tp[1], position, max_bytes)
    return [RecordBatch(b) for data in fetched for b in split_batches(data)]
