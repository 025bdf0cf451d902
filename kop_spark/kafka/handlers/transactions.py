"""A transactional producer's requests: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn, over the server's ``TransactionCoordinator``. Each
needs Write on the transactional id, as in Kafka, and what it adds needs Write on its topics or
Read on its group. A fenced producer is told PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH in the
versions before that code (KIP-588); one whose transaction a stopped server lost, UNKNOWN_PRODUCER_ID."""

from __future__ import annotations

import datetime
import re
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker.transactions import STATES, TransactionState
from ...errors import ProducerFencedError
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module
from .offsets import commit_answers, requested_offsets

# The first version of each API whose client knows PRODUCER_FENCED.
_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
_NONE = datetime.timedelta(0)


def _code(header: RequestHeader, e: Exception, where: str) -> ErrorCode:
    if isinstance(e, ProducerFencedError) and header.api_version < _FENCED_FROM[header.api_key]:
        return ErrorCode.invalid_producer_epoch
    return error_code(e, where)


async def init_producer_id(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    tid = request.transactional_id
    current = (request.producer_id, request.producer_epoch) if getattr(request, "producer_id", -1) != -1 else None
    try:
        ctx.authorize(header, "Write", "TransactionalId", tid)
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        producer_id, epoch = await ctx.call(ctx.transactions.init_producer_id, tid, timeout_ms, current)
        code = ErrorCode.none
    except Exception as e:
        producer_id, epoch, code = -1, -1, _code(header, e, f"InitProducerId of transactional id {tid!r}")
    return make(
        m.InitProducerIdResponse, throttle_time=_NONE, error_code=code, producer_id=producer_id, producer_epoch=epoch
    )


async def add_partitions_to_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    tid = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    try:
        ctx.authorize(header, "Write", "TransactionalId", tid)
        refused = {tp for tp in wanted if not ctx.allowed(header, "Write", "Topic", tp[0])}
        if refused:  # Kafka's answer: the refused ones say why, the others that they were not tried
            codes = {
                tp: ErrorCode.topic_authorization_failed if tp in refused else ErrorCode.operation_not_attempted
                for tp in wanted
            }
        else:
            await ctx.call(
                ctx.transactions.add_partitions,
                tid,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                wanted,
            )
            codes = dict.fromkeys(wanted, ErrorCode.none)
    except Exception as e:
        codes = dict.fromkeys(wanted, _code(header, e, f"AddPartitionsToTxn of transactional id {tid!r}"))
    topics = tuple(
        make(
            m.AddPartitionsToTxnTopicResult,
            name=t.name,
            results_by_partition=tuple(
                make(m.AddPartitionsToTxnPartitionResult, partition_index=p, partition_error_code=codes[(t.name, p)])
                for p in t.partitions
            ),
        )
        for t in request.v3_and_below_topics
    )
    return make(m.AddPartitionsToTxnResponse, throttle_time=_NONE, results_by_topic_v3_and_below=topics)


async def add_offsets_to_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    tid = request.transactional_id
    try:
        ctx.authorize(header, "Write", "TransactionalId", tid)
        ctx.authorize(header, "Read", "Group", request.group_id)
        await ctx.call(ctx.transactions.add_offsets, tid, request.producer_id, request.producer_epoch, request.group_id)
        code = ErrorCode.none
    except Exception as e:
        code = _code(header, e, f"AddOffsetsToTxn of transactional id {tid!r}")
    return make(m.AddOffsetsToTxnResponse, throttle_time=_NONE, error_code=code)


async def txn_offset_commit(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    tid, group = request.transactional_id, request.group_id
    refused = ctx.validate_commit(
        group,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
    )
    if refused == ErrorCode.none and not ctx.allowed(header, "Write", "TransactionalId", tid):
        refused = ErrorCode.transactional_id_authorization_failed
    where = f"TxnOffsetCommit of transactional id {tid!r}"
    offsets, codes = await requested_offsets(ctx, header, group, request.topics, refused, where)
    if offsets:
        try:
            await ctx.call(
                ctx.transactions.commit_offsets, tid, request.producer_id, request.producer_epoch, group, offsets
            )
            codes.update(dict.fromkeys(offsets, ErrorCode.none))
        except Exception as e:
            codes.update(dict.fromkeys(offsets, _code(header, e, where)))
    topics = commit_answers(m.TxnOffsetCommitResponseTopic, m.TxnOffsetCommitResponsePartition, request.topics, codes)
    return make(m.TxnOffsetCommitResponse, throttle_time=_NONE, topics=topics)


async def end_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    tid = request.transactional_id
    try:
        ctx.authorize(header, "Write", "TransactionalId", tid)
        await ctx.call(ctx.transactions.end, tid, request.producer_id, request.producer_epoch, request.committed)
        code = ErrorCode.none
    except Exception as e:
        code = _code(header, e, f"EndTxn of transactional id {tid!r}")
    return make(m.EndTxnResponse, throttle_time=_NONE, error_code=code)


async def describe_transactions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    allowed = [t for t in request.transactional_ids if ctx.allowed(header, "Describe", "TransactionalId", t)]
    found = {v.transactional_id: v for v in await ctx.call(ctx.transactions.describe, allowed)}

    def state(tid: str) -> Any:
        if tid in found:
            return _described(m, found[tid])
        refused = tid not in allowed
        code = ErrorCode.transactional_id_authorization_failed if refused else ErrorCode.transactional_id_not_found
        return make(
            m.TransactionState,
            error_code=code,
            transactional_id=tid,
            transaction_state="",
            transaction_timeout=_NONE,
            transaction_start_time=_time(-1),
            producer_id=-1,
            producer_epoch=-1,
            topics=(),
        )

    states = tuple(state(tid) for tid in request.transactional_ids)
    return make(m.DescribeTransactionsResponse, throttle_time=_NONE, transaction_states=states)


def _described(m: Any, state: TransactionState) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(state.partitions):
        by_topic.setdefault(topic, []).append(p)
    return make(
        m.TransactionState,
        error_code=ErrorCode.none,
        transactional_id=state.transactional_id,
        transaction_state=state.state,
        transaction_timeout=datetime.timedelta(milliseconds=state.timeout_ms),
        transaction_start_time=_time(state.began_ms),
        producer_id=state.producer_id,
        producer_epoch=state.epoch,
        topics=tuple(make(m.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


async def list_transactions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """ListTransactions, with Kafka's filters: states, producer ids, running longer than a duration
    (v1), ids matching a pattern (v2); only the ids the principal may Describe."""
    m = response_module(header.api_key, header.api_version)
    states = set(request.state_filters)
    unknown = tuple(sorted(states - STATES))
    pids = set(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    try:  # Java's Pattern.matches: the whole id; none (or v0-1): every id
        given = getattr(request, "transactional_id_pattern", None)
        pattern = re.compile(given) if given else None
    except re.error:
        return make(
            m.ListTransactionsResponse,
            throttle_time=_NONE,
            error_code=ErrorCode.invalid_regular_expression,
            unknown_state_filters=unknown,
            transaction_states=(),
        )
    now = ctx.broker.clock.now_ms()
    listed = tuple(
        make(
            m.TransactionState,
            transactional_id=v.transactional_id,
            producer_id=v.producer_id,
            transaction_state=v.state,
        )
        for v in await ctx.call(ctx.transactions.describe)
        if (not states or v.state in states)
        and (not pids or v.producer_id in pids)
        and (duration < 0 or (v.began_ms >= 0 and now - v.began_ms > duration))
        and (pattern is None or pattern.fullmatch(v.transactional_id) is not None)
        and ctx.allowed(header, "Describe", "TransactionalId", v.transactional_id)
    )
    return make(
        m.ListTransactionsResponse,
        throttle_time=_NONE,
        error_code=ErrorCode.none,
        unknown_state_filters=unknown,
        transaction_states=listed,
    )


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
