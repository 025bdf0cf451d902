"""METADATA: one broker (node 0) that leads every partition; topics as the Broker has them, with
their topic ids, asked for by name or (v10 and later) by id. A topic that does not exist is
created when the client allows it and ``allowAutoTopicCreation`` is on, as a Kafka broker with
``auto.create.topics.enable`` does."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import TopicInfo
from ...errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from ..context import NODE_ID, ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's "no id": a topic named, or not found


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if request.topics is None:
        # every topic, the offsets topic too (marked internal, as Kafka lists it: kafka-topics
        # --exclude-internal and the Java client's exclude.internal.topics leave it out by that
        # mark; librdkafka's regex subscriptions do not, as against Kafka); those the client may
        # not describe are not mentioned
        infos = await ctx.call(ctx.broker.topic_infos, include_internal=True)
        topics = [_found(m, t) for t in infos if ctx.allowed(header, "Describe", "Topic", t.name)]
    else:
        auto_create = (
            getattr(request, "allow_auto_topic_creation", True) and ctx.broker.config["allowAutoTopicCreation"]
        )
        by_id = {}
        if any(t.name is None for t in request.topics):  # asked by id: one read of the topics for all
            by_id = {t.topic_id: t for t in await ctx.call(ctx.broker.topic_infos, include_internal=True)}
        topics = [await _asked(ctx, header, m, t, auto_create, by_id) for t in request.topics]
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


async def _asked(
    ctx: ServerContext, header: RequestHeader, m: Any, asked: Any, auto_create: bool, by_id: dict[uuid.UUID, TopicInfo]
) -> Any:
    """A topic the request names, or gives the id of (Kafka answers an id not found with
    UNKNOWN_TOPIC_ID, and one the client may not describe likewise, so ids reveal no names)."""
    name, topic_id = asked.name, getattr(asked, "topic_id", None) or NO_TOPIC_ID

    def failed(code: ErrorCode) -> Any:
        return make(m.MetadataResponseTopic, error_code=code, name=name, topic_id=topic_id, partitions=())

    if name is None and topic_id != NO_TOPIC_ID:
        found = by_id.get(topic_id)
        if found is None or not ctx.allowed(header, "Describe", "Topic", found.name):
            return failed(ErrorCode.unknown_topic_id)
        return _found(m, found)
    if not name:
        return failed(ErrorCode.invalid_topic_exception)
    if not ctx.allowed(header, "Describe", "Topic", name):
        return failed(ErrorCode.topic_authorization_failed)
    creatable = ctx.allowed(header, "Create", "Cluster") or ctx.allowed(header, "Create", "Topic", name)
    try:
        # under the name asked: a client that named a topic in full (tenant/ns/t, persistent://...)
        # waits for that name, not the short one the topic is listed under
        return _found(m, await _info(ctx, name, auto_create and creatable), name)
    except Exception as e:
        return failed(error_code(e, f"metadata of topic {name!r}"))


def _found(m: Any, topic: TopicInfo, name: str | None = None) -> Any:
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
        for p in range(topic.partitions)
    )
    return make(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name if name is None else name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
    )


async def _info(ctx: ServerContext, name: str, auto_create: bool) -> TopicInfo:
    b = ctx.broker
    try:
        return await ctx.call(b.topic_info, name)
    except UnknownTopicOrPartitionError:
        if not auto_create:
            raise
    try:
        await ctx.call(b.create_topic, name)
    except TopicAlreadyExistsError:
        pass  # another client asked at the same time
    return await ctx.call(b.topic_info, name)


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
