"""The producer APIs outside transactions: INIT_PRODUCER_ID for idempotent producers, a new
producer id with epoch 0 on every call, as a Kafka broker answers one without a transactional id
(the sequence checks themselves happen where the batches are appended, in the CAS that appends
them, ``storage.producer_state``, so they hold for every path into a partition and across
restarts; a transactional producer's is answered in ``transactions``); and DESCRIBE_PRODUCERS."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker.transactions import ONGOING, TransactionState
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module
from . import transactions


async def init_producer_id(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)

    def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return make(
            m.InitProducerIdResponse,
            throttle_time=datetime.timedelta(0),
            error_code=code,
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    if request.transactional_id is not None:
        return await transactions.init_producer_id(ctx, header, request)
    # Kafka lets an idempotent producer in with IdempotentWrite on the cluster or Write on any topic.
    if not ctx.allowed(header, "IdempotentWrite", "Cluster") and not await _writes_somewhere(ctx, header):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        return answer(ErrorCode.none, await ctx.call(ctx.broker.init_producer_id), 0)
    except Exception as e:
        return answer(error_code(e, "init producer id"))


async def _writes_somewhere(ctx: ServerContext, header: RequestHeader) -> bool:
    if not ctx.authorization.enabled:
        return True
    return any(ctx.allowed(header, "Write", "Topic", t) for t in await ctx.call(ctx.broker.list_topics))


async def describe_producers(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """DescribeProducers (kafka-transactions describe-producers): each partition's idempotent
    producers as the partition knows them, and the transactional producers with a transaction under
    way that added it. A transaction's records reach the partition only at its commit, so none has a
    transaction open in the log: the current transaction's start offset is always -1, and no
    transaction can hang a partition."""
    m = response_module(header.api_key, header.api_version)
    ongoing = [s for s in await ctx.call(ctx.transactions.describe) if s.state == ONGOING]
    topics = []
    for t in request.topics:
        partitions = [await _producers(ctx, header, m, t.name, p, ongoing) for p in t.partition_indexes]
        topics.append(make(m.TopicResponse, name=t.name, partitions=tuple(partitions)))
    return make(m.DescribeProducersResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))


async def _producers(
    ctx: ServerContext, header: RequestHeader, m: Any, topic: str, partition: int, ongoing: list[TransactionState]
) -> Any:
    try:
        ctx.authorize(header, "Read", "Topic", topic)  # as Kafka asks
        idempotent = await ctx.call(ctx.broker.admin.producers, topic, partition)
    except Exception as e:
        code = error_code(e, f"describe producers of {topic}-{partition}")
        return make(m.PartitionResponse, partition_index=partition, error_code=code, active_producers=())

    def state(producer_id: int, epoch: int, last_sequence: int = -1, last_timestamp: int = -1) -> Any:
        return make(
            m.ProducerState,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_sequence=last_sequence,
            last_timestamp=last_timestamp,
            coordinator_epoch=-1,
            current_txn_start_offset=-1,
        )

    active = [state(p, e.epoch, e.batches[-1].last_seq, e.ts) for p, e in sorted(idempotent.items())]
    active += [state(s.producer_id, s.epoch) for s in ongoing if (topic, partition) in s.partitions]
    return make(
        m.PartitionResponse, partition_index=partition, error_code=ErrorCode.none, active_producers=tuple(active)
    )
