"""LIST_OFFSETS: -2 earliest (the log start), -1 latest (the log end), -3 the first record with
the largest timestamp (v7+), or the first offset whose timestamp is at or after a time, with that
record's timestamp (-1 when there is none)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, OffsetSpec
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

SPECS = {EARLIEST_TIMESTAMP: "earliest", LATEST_TIMESTAMP: "latest", MAX_TIMESTAMP: "max-timestamp"}


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    wanted: list[tuple[str, int, OffsetSpec] | ErrorCode] = []
    for t in request.topics:
        for p in t.partitions:
            spec = SPECS.get(p.timestamp, p.timestamp)
            if isinstance(spec, int) and spec < 0:  # earliest-local (-4) and tiered lookups are not served
                wanted.append(ErrorCode.invalid_request)
            elif not ctx.allowed(header, "Describe", "Topic", t.name):
                wanted.append(ErrorCode.topic_authorization_failed)
            else:
                wanted.append((t.name, p.partition_index, spec))
    found = iter(await ctx.call_asked(ctx.broker.offsets_and_timestamps, wanted))
    topics = tuple(
        make(
            m.ListOffsetsTopicResponse,
            name=t.name,
            partitions=tuple(_partition(m, t.name, p.partition_index, next(found)) for p in t.partitions),
        )
        for t in request.topics
    )
    return make(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=topics)


def _partition(m: Any, topic: str, index: int, found: tuple[int, int] | ErrorCode | Exception) -> Any:
    if isinstance(found, Exception):
        found = error_code(found, f"list offsets of {topic}-{index}")
    if isinstance(found, ErrorCode):
        return make(m.ListOffsetsPartitionResponse, partition_index=index, error_code=found)
    offset, found_at = found
    return make(
        m.ListOffsetsPartitionResponse,
        partition_index=index,
        error_code=ErrorCode.none,
        timestamp=found_at,
        offset=offset,
        old_style_offsets=(offset,),
    )
