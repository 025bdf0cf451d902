"""PRODUCE: each partition's batches are stored as they came (KoP's ``entryFormat=kafka``), after
the Broker's checks (CRC, size, keys on compacted topics); the answer is the base offset the
confirming CAS gave them. Partitions of one request are appended concurrently, so they share
writes with other requests' appends to the same partitions (group commit)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if request.transactional_id is not None:
        # Transactions are not supported; Kafka answers a transactional produce it cannot take so.
        return _answer(m, request, lambda t, p: _partition(m, p.index, ErrorCode.transactional_id_authorization_failed))
    jobs = {
        (t.name, p.index): asyncio.ensure_future(_append(ctx, m, t.name, p.index, p.records))
        for t in request.topic_data
        for p in t.partition_data
    }
    if jobs:
        await asyncio.wait(jobs.values())
        ctx.appends.notify()
    if request.acks == 0:
        return None
    return _answer(m, request, lambda t, p: jobs[(t.name, p.index)].result())


def _answer(m: Any, request: Any, partition: Any) -> Any:
    topics = tuple(
        make(m.TopicProduceResponse, name=t.name, partition_responses=tuple(partition(t, p) for p in t.partition_data))
        for t in request.topic_data
    )
    return make(m.ProduceResponse, responses=topics, throttle_time=datetime.timedelta(0))


def _partition(m: Any, index: int, code: ErrorCode, base_offset: int = -1, log_start: int = -1) -> Any:
    return make(
        m.PartitionProduceResponse,
        index=index,
        error_code=code,
        base_offset=base_offset,
        log_append_time=None,
        log_start_offset=log_start,
        record_errors=(),
        error_message=None,
    )


async def _append(ctx: ServerContext, m: Any, topic: str, partition: int, records: bytes | None) -> Any:
    b = ctx.broker
    try:
        if not records:
            return _partition(m, partition, ErrorCode.invalid_record)
        base = await ctx.call(b.produce_batches, topic, partition, [records])
        start = await ctx.call(b.list_offsets, topic, partition, "earliest")
    except Exception as e:
        return _partition(m, partition, error_code(e, f"produce to {topic}-{partition}"))
    return _partition(m, partition, ErrorCode.none, base, start)
