"""LIST_OFFSETS: -2 earliest (the log start), -1 latest (the log end), -3 the first record with
the largest timestamp (v7+), or the first offset whose timestamp is at or after a time, with that
record's timestamp (-1 when there is none)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

SPECS = {EARLIEST_TIMESTAMP: "earliest", LATEST_TIMESTAMP: "latest", MAX_TIMESTAMP: "max-timestamp"}


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    topics = []
    for t in request.topics:
        partitions = [await _partition(ctx, header, m, t.name, p.partition_index, p.timestamp) for p in t.partitions]
        topics.append(make(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(partitions)))
    return make(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))


async def _partition(
    ctx: ServerContext, header: RequestHeader, m: Any, topic: str, partition: int, timestamp: int
) -> Any:
    spec = SPECS.get(timestamp, timestamp)
    if isinstance(spec, int) and spec < 0:  # earliest-local (-4) and tiered lookups are not served
        return make(m.ListOffsetsPartitionResponse, partition_index=partition, error_code=ErrorCode.invalid_request)
    try:
        ctx.authorize(header, "Describe", "Topic", topic)
        offset, found_at = await ctx.call(ctx.broker.offset_and_timestamp, topic, partition, spec)
    except Exception as e:
        code = error_code(e, f"list offsets of {topic}-{partition}")
        return make(m.ListOffsetsPartitionResponse, partition_index=partition, error_code=code)
    return make(
        m.ListOffsetsPartitionResponse,
        partition_index=partition,
        error_code=ErrorCode.none,
        timestamp=found_at,
        offset=offset,
        old_style_offsets=(offset,),
    )
