"""FETCH: the stored batches as they are, with their absolute ``baseOffset`` (no record is
decoded), up to ``max_bytes`` per partition and in all (at least one batch, as KIP-74 asks, so a
batch larger than the limits still gets through). With less than ``min_bytes`` the fetch is
parked for up to ``max_wait``: an append through this server wakes it at once, an append by
another process (Spark, the CLI, another server) is seen at the next look at the log, every
``OTHER_WRITERS_POLL_S`` (longer where a look takes long, see ``LOOKS_APART``). Such a look may
take what another fetch's look probed within as long as this one waits between its own (on an
object store, a listing of a topic's partitions, which idle consumers of the topic then share,
where each listed apart); a FETCH's first look, what was probed within ``kafkaMinFetchPeriodMs``.
An offset outside the log is OFFSET_OUT_OF_RANGE, never a silent resume."""

from __future__ import annotations

import datetime
import time
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import FetchedBatches, PartitionFetch
from ...record import record_count
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

OTHER_WRITERS_POLL_S = 0.05
# A parked fetch looks again no sooner than this many times as long as its last look took, so that
# a fetch of a thousand partitions, polling for other processes' appends, keeps to a tenth of a core.
LOOKS_APART = 10


def next_look_in(looked_s: float) -> float:
    """Seconds a parked fetch whose last look took ``looked_s`` waits before it looks again."""
    return max(OTHER_WRITERS_POLL_S, LOOKS_APART * looked_s)


async def handle(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    wanted = [
        PartitionFetch(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
        for t in request.topics
        for p in t.partitions
    ]
    deadline = time.monotonic() + request.max_wait.total_seconds()
    # At 0, the first look sees every append made before the request.
    probes_within_s = ctx.broker.config["kafkaMinFetchPeriodMs"] / 1000
    while True:
        started = time.monotonic()
        answers = await _read(ctx, header, wanted, request.max_bytes, probes_within_s)
        looked = time.monotonic() - started
        size = sum(len(b) for a in answers if isinstance(a, FetchedBatches) for b in a.batches)
        errors = any(not isinstance(a, FetchedBatches) for a in answers)
        left = deadline - time.monotonic()
        if size >= request.min_bytes or errors or left <= 0 or not wanted:
            break
        wait_s = next_look_in(looked)
        await ctx.appends.wait(min(left, wait_s))
        # A probe another fetch took since is as fresh as this one's own look would have been.
        probes_within_s = max(probes_within_s, wait_s)
    by_topic: dict[str, list[Any]] = {}
    for w, a in zip(wanted, answers, strict=True):
        by_topic.setdefault(w.topic, []).append(_partition(m, w.partition, a))
        if isinstance(a, FetchedBatches) and a.batches:
            records = sum(record_count(b) for b in a.batches)
            ctx.metrics.fetched(w.topic, w.partition, sum(len(b) for b in a.batches), records)
    responses = tuple(make(m.FetchableTopicResponse, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    return make(
        m.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=responses,
    )


async def _read(
    ctx: ServerContext, header: RequestHeader, wanted: list[PartitionFetch], max_bytes: int, probes_within_s: float
) -> list[FetchedBatches | ErrorCode]:
    """One look at every partition wanted, all in one call on a worker thread: a parked fetch
    looks again every ``OTHER_WRITERS_POLL_S``, and a hand-off to a thread per partition cost an
    idle consumer of a hundred partitions half a core."""
    refused: dict[int, ErrorCode] = {}
    for i, w in enumerate(wanted):
        try:
            ctx.authorize(header, "Read", "Topic", w.topic)
        except Exception as e:
            refused[i] = error_code(e, f"fetch from {w.topic}-{w.partition}")
    allowed = [w for i, w in enumerate(wanted) if i not in refused]
    fetched = iter(await ctx.call(ctx.broker.fetch_partitions, allowed, max_bytes, probes_within_s))
    return [refused[i] if i in refused else _answer(w, next(fetched)) for i, w in enumerate(wanted)]


def _answer(w: PartitionFetch, fetched: FetchedBatches | Exception) -> FetchedBatches | ErrorCode:
    if isinstance(fetched, Exception):
        return error_code(fetched, f"fetch from {w.topic}-{w.partition} at {w.offset}")
    return fetched


def _partition(m: Any, index: int, answer: FetchedBatches | ErrorCode) -> Any:
    if isinstance(answer, FetchedBatches):
        code, records = ErrorCode.none, b"".join(answer.batches)
        high, start = answer.high_watermark, answer.log_start_offset
    else:
        code, records, high, start = answer, b"", -1, -1
    return make(
        m.PartitionData,
        partition_index=index,
        error_code=code,
        high_watermark=high,
        last_stable_offset=high,
        log_start_offset=start,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=records,
    )
