"""METADATA: one broker (node 0) that leads every partition; topics as the Broker has them.
A topic that does not exist is created when the client allows it and ``allowAutoTopicCreation``
is on, as a Kafka broker with ``auto.create.topics.enable`` does."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from ..context import NODE_ID, ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

NO_TOPIC_ID = uuid.UUID(int=0)  # topic ids are not supported: clients then address topics by name


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if request.topics is None:  # every topic: those the client may not describe are not mentioned
        names = [t for t in await ctx.call(ctx.broker.list_topics) if ctx.allowed(header, "Describe", "Topic", t)]
    else:
        names = [t.name for t in request.topics]
    auto_create = getattr(request, "allow_auto_topic_creation", True) and ctx.broker.config["allowAutoTopicCreation"]
    topics = [await _topic(ctx, header, m, name, auto_create and request.topics is not None) for name in names]
    broker = make(
        m.MetadataResponseBroker, node_id=NODE_ID, host=ctx.advertised(header).host, port=ctx.advertised(header).port
    )
    return make(
        m.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=(broker,),
        cluster_id=ctx.cluster_id,
        controller_id=NODE_ID,
        topics=tuple(topics),
    )


async def _topic(ctx: ServerContext, header: RequestHeader, m: Any, name: str | None, auto_create: bool) -> Any:
    def failed(code: ErrorCode) -> Any:
        return make(m.MetadataResponseTopic, error_code=code, name=name, topic_id=NO_TOPIC_ID, partitions=())

    if not name:
        return failed(ErrorCode.invalid_topic_exception)
    if not ctx.allowed(header, "Describe", "Topic", name):
        return failed(ErrorCode.topic_authorization_failed)
    creatable = ctx.allowed(header, "Create", "Cluster") or ctx.allowed(header, "Create", "Topic", name)
    try:
        count = await _partitions(ctx, name, auto_create and creatable)
    except Exception as e:
        return failed(error_code(e, f"metadata of topic {name!r}"))
    partitions = tuple(
        make(
            m.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=p,
            leader_id=NODE_ID,
            leader_epoch=-1,
            replica_nodes=(NODE_ID,),
            isr_nodes=(NODE_ID,),
            offline_replicas=(),
        )
        for p in range(count)
    )
    return make(
        m.MetadataResponseTopic, error_code=ErrorCode.none, name=name, topic_id=NO_TOPIC_ID, partitions=partitions
    )


async def _partitions(ctx: ServerContext, name: str, auto_create: bool) -> int:
    b = ctx.broker
    try:
        return await ctx.call(b.partitions_for, name)
    except UnknownTopicOrPartitionError:
        if not auto_create:
            raise
    try:
        await ctx.call(b.create_topic, name)
    except TopicAlreadyExistsError:
        pass  # another client asked at the same time
    return await ctx.call(b.partitions_for, name)


async def describe_cluster(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    allowed = ctx.allowed(header, "Describe", "Cluster")
    broker = make(
        m.DescribeClusterBroker, broker_id=NODE_ID, host=ctx.advertised(header).host, port=ctx.advertised(header).port
    )
    return make(
        m.DescribeClusterResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed,
        cluster_id=ctx.cluster_id,
        controller_id=NODE_ID,
        brokers=(broker,),
    )
