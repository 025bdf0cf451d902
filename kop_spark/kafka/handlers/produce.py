"""PRODUCE: each partition's batches are stored as they came (KoP's ``entryFormat=kafka``), after
the Broker's checks (CRC, size, keys on compacted topics); the answer is the base offset the
confirming CAS gave them. The batches are queued for their partitions' next writes before the
connection's next request is taken, and written while it is: requests a client pipelines, and
other connections' appends to the same partitions, share writes and CASes (group commit). A
transaction's batches are staged instead, until it commits."""

from __future__ import annotations

import asyncio
import datetime
import functools
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import Produced
from ...errors import InvalidRecordError
from ...record import record_count
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

_NOTHING = Produced(-1, -1, -1)  # what a refused partition's answer says


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if request.transactional_id is not None:
        return await _staged(ctx, header, m, request)
    # Queued in request order (this connection's next request waits for it), written later.
    wanted = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    calls = [_refusal(ctx, header, t, p, records) or (t, p, [records]) for t, p, records in wanted]
    queued = dict(
        zip([(t, p) for t, p, _ in wanted], await ctx.call_asked(ctx.broker.queue_batches, calls), strict=True)
    )

    async def written() -> Any:
        answers = await asyncio.gather(*(_written(ctx, m, tp, wait) for tp, wait in queued.items()))
        done = dict(zip(queued, answers, strict=True))
        ctx.appends.notify()
        for t in request.topic_data:
            for p in t.partition_data:
                if done[(t.name, p.index)].error_code == ErrorCode.none:
                    _count(ctx, t.name, p.index, p.records)
        return None if request.acks == 0 else _answer(m, request, lambda t, p: done[(t.name, p.index)])

    return asyncio.ensure_future(written())


async def _staged(ctx: ServerContext, header: RequestHeader, m: Any, request: Any) -> Any:
    """A transactional produce: staged until the transaction commits, when the batches get their
    offsets (``TransactionCoordinator``); so it answers offset -1."""
    tid = request.transactional_id
    wanted = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    calls = [_txn_refusal(ctx, header, tid, t) or (t, p, records or b"") for t, p, records in wanted]
    staged = await ctx.call_asked(functools.partial(ctx.transactions.produce_each, tid), calls)
    done = {}
    for (t, p, records), refused in zip(wanted, staged, strict=True):
        if refused is None:
            done[(t, p)] = _partition(m, p, ErrorCode.none)
            _count(ctx, t, p, records)
        else:
            done[(t, p)] = _refused(m, p, refused, f"transactional produce to {t}-{p}")
    return None if request.acks == 0 else _answer(m, request, lambda t, p: done[(t.name, p.index)])


def _txn_refusal(ctx: ServerContext, header: RequestHeader, transactional_id: str, topic: str) -> Exception | None:
    try:
        ctx.authorize(header, "Write", "TransactionalId", transactional_id)
        ctx.authorize(header, "Write", "Topic", topic)
    except Exception as e:
        return e
    return None


def _count(ctx: ServerContext, topic: str, partition: int, records: bytes | None) -> None:
    if records:
        ctx.metrics.produced(topic, partition, len(records), record_count(records))


def _answer(m: Any, request: Any, partition: Any) -> Any:
    topics = tuple(
        make(m.TopicProduceResponse, name=t.name, partition_responses=tuple(partition(t, p) for p in t.partition_data))
        for t in request.topic_data
    )
    return make(m.ProduceResponse, responses=topics, throttle_time=datetime.timedelta(0))


def _refused(m: Any, index: int, e: Exception, where: str) -> Any:
    # As Kafka's LogValidator, the answer says why the records were refused, and which (v8 and later).
    if not isinstance(e, InvalidRecordError):
        return _partition(m, index, error_code(e, where))
    records = tuple(
        make(m.BatchIndexAndErrorMessage, batch_index=r.batch_index, batch_index_error_message=r.message)
        for r in (e.record_errors if hasattr(m, "BatchIndexAndErrorMessage") else ())
    )
    return _partition(m, index, error_code(e, where), message=str(e), records=records)


def _partition(
    m: Any, index: int, code: ErrorCode, produced: Produced = _NOTHING, message: str | None = None, records: tuple = ()
) -> Any:
    return make(
        m.PartitionProduceResponse,
        index=index,
        error_code=code,
        base_offset=produced.base_offset,
        log_append_time=None if produced.log_append_time < 0 else _time(produced.log_append_time),
        log_start_offset=produced.log_start_offset,
        record_errors=records,
        error_message=message,
    )


def _refusal(
    ctx: ServerContext, header: RequestHeader, topic: str, partition: int, records: bytes | None
) -> Exception | None:
    try:
        ctx.authorize(header, "Write", "Topic", topic)
    except Exception as e:
        return e
    return None if records else InvalidRecordError(f"produce to {topic}-{partition}: no record batches given")


async def _written(ctx: ServerContext, m: Any, tp: tuple[str, int], wait: Callable[[], Produced] | Exception) -> Any:
    topic, partition = tp
    try:
        if isinstance(wait, Exception):
            raise wait
        produced = await ctx.call(wait)
    except Exception as e:
        return _refused(m, partition, e, f"produce to {topic}-{partition}")
    return _partition(m, partition, ErrorCode.none, produced)


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
