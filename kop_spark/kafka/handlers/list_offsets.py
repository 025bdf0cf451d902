"""LIST_OFFSETS: -2 earliest (the log start), -1 latest (the log end), -3 the first record with
the largest timestamp (v7+), or the first offset whose timestamp is at or after a time, with that
record's timestamp (-1 when there is none)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Broker, OffsetSpec
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

SPECS = {EARLIEST_TIMESTAMP: "earliest", LATEST_TIMESTAMP: "latest", MAX_TIMESTAMP: "max-timestamp"}

_Wanted = tuple[str, int, OffsetSpec]
_Found = tuple[int, int] | ErrorCode


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """All of a request's partitions are looked up in one worker call: a hand-off to a worker
    thread a partition cost more than the lookups, so a client's offsets for a thousand partitions
    took a second."""
    m = response_module(header.api_key, header.api_version)
    wanted: list[_Wanted] = []
    refused: dict[int, ErrorCode] = {}
    for t in request.topics:
        for p in t.partitions:
            spec = SPECS.get(p.timestamp, p.timestamp)
            if isinstance(spec, int) and spec < 0:  # earliest-local (-4) and tiered lookups are not served
                refused[len(wanted)] = ErrorCode.invalid_request
            elif not ctx.allowed(header, "Describe", "Topic", t.name):
                refused[len(wanted)] = ErrorCode.topic_authorization_failed
            wanted.append((t.name, p.partition_index, spec))
    found = iter(await ctx.call(_look, ctx.broker, wanted, refused))
    topics = tuple(
        make(
            m.ListOffsetsTopicResponse,
            name=t.name,
            partitions=tuple(_partition(m, p.partition_index, next(found)) for p in t.partitions),
        )
        for t in request.topics
    )
    return make(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=topics)


def _look(broker: Broker, wanted: list[_Wanted], refused: dict[int, ErrorCode]) -> list[_Found]:
    out: list[_Found] = []
    for i, (topic, partition, spec) in enumerate(wanted):
        if i in refused:
            out.append(refused[i])
            continue
        try:
            out.append(broker.offset_and_timestamp(topic, partition, spec))
        except Exception as e:
            out.append(error_code(e, f"list offsets of {topic}-{partition}"))
    return out


def _partition(m: Any, index: int, found: _Found) -> Any:
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
