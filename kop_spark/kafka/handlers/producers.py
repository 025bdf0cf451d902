"""INIT_PRODUCER_ID for idempotent producers: a new producer id with epoch 0 on every call, as a
Kafka broker answers one without a transactional id. The sequence checks themselves happen where
the batches are appended, in the CAS that appends them (``storage.producer_state``), so they hold
for every path into a partition and across restarts. A transactional producer's is answered in
``transactions``."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

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
