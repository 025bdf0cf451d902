"""CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS and DELETE_RECORDS: the same topics as
``Broker.create_topic``'s (name mapping, configs, partitions). One node holds every replica, so a
replication factor other than 1 or -1 (the broker's default) is refused as Kafka refuses one
larger than its broker count."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidPartitionsError
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module
from .metadata import NO_TOPIC_ID


async def create_topics(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    results = []
    for t in request.topics:
        code, message, topic_id = ErrorCode.none, None, NO_TOPIC_ID
        partitions = t.num_partitions if t.num_partitions != -1 else ctx.broker.config["defaultNumPartitions"]
        if not (ctx.allowed(header, "Create", "Cluster") or ctx.allowed(header, "Create", "Topic", t.name)):
            code, message = ErrorCode.topic_authorization_failed, f"may not create topic {t.name!r}"
        elif t.replication_factor not in (-1, 1) or t.assignments:
            code = ErrorCode.invalid_replication_factor
            message = f"topic {t.name!r}: one node holds every partition, so the replication factor is 1"
        elif not request.validate_only:
            config = {c.name: c.value for c in t.configs}
            try:
                await ctx.call(ctx.broker.create_topic, t.name, partitions, config)
                topic_id = (await ctx.call(ctx.broker.topic_info, t.name)).topic_id
            except Exception as e:
                code, message = error_code(e, f"create topic {t.name!r}"), str(e)
        results.append(
            make(
                m.CreatableTopicResult,
                name=t.name,
                topic_id=topic_id,
                error_code=code,
                error_message=message,
                num_partitions=partitions if code == ErrorCode.none else -1,
                replication_factor=1 if code == ErrorCode.none else -1,
                configs=None,
            )
        )
    return make(m.CreateTopicsResponse, throttle_time=datetime.timedelta(0), topics=tuple(results))


async def delete_topics(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    names = list(request.topic_names) if hasattr(request, "topic_names") else [t.name for t in request.topics]
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
            ctx.authorize(header, "Delete", "Topic", name)
            await ctx.call(ctx.broker.delete_topic, name)
        except Exception as e:
            code, message = error_code(e, f"delete topic {name!r}"), str(e)
        results.append(make(m.DeletableTopicResult, name=name, error_code=code, error_message=message))
    return make(m.DeleteTopicsResponse, throttle_time=datetime.timedelta(0), responses=tuple(results))


async def delete_records(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """kafka-delete-records: each partition's log start moves up to the offset given (-1: the
    high watermark), as ``Broker.delete_records``; the answer is the log start then."""
    m = response_module(header.api_key, header.api_version)
    topics = []
    for t in request.topics:
        results = []
        for p in t.partitions:
            code, start = ErrorCode.none, -1
            try:
                ctx.authorize(header, "Delete", "Topic", t.name)
                start = await ctx.call(ctx.broker.delete_records, t.name, p.partition_index, p.offset)
            except Exception as e:
                code = error_code(e, f"delete records of {t.name}-{p.partition_index} before {p.offset}")
            results.append(
                make(
                    m.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=start,
                    error_code=code,
                )
            )
        topics.append(make(m.DeleteRecordsTopicResult, name=t.name, partitions=tuple(results)))
    return make(m.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))


async def create_partitions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    results = []
    for t in request.topics:
        code, message = ErrorCode.none, None
        if t.assignments:
            code = ErrorCode.invalid_replica_assignment
            message = f"topic {t.name!r}: one node holds every partition, so there is nothing to assign"
        else:
            try:
                ctx.authorize(header, "Alter", "Topic", t.name)
                await _grow(ctx, t.name, t.count, request.validate_only)
            except Exception as e:
                code, message = error_code(e, f"create partitions of {t.name!r}"), str(e)
        results.append(make(m.CreatePartitionsTopicResult, name=t.name, error_code=code, error_message=message))
    return make(m.CreatePartitionsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


async def _grow(ctx: ServerContext, topic: str, count: int, validate_only: bool) -> None:
    if not validate_only:
        await ctx.call(ctx.broker.create_partitions, topic, count)
        return
    current = await ctx.call(ctx.broker.partitions_for, topic)
    if count <= current:
        raise InvalidPartitionsError(f"topic {topic!r} has {current} partitions; {count} would not grow it")
