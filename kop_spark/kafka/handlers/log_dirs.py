"""DESCRIBE_LOG_DIRS, which tools and UIs ask for the size of topics on disk (``kafka-log-dirs``):
the store's root is the one log dir, a partition's size the bytes of its ledgers. A root on a local
filesystem also tells that filesystem's total and usable bytes (KIP-827); an object store's are
unknown (-1). It needs Describe on the cluster, as in Kafka."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker import Broker
from ...errors import UnknownTopicOrPartitionError
from ..context import ServerContext
from ..messages import RequestHeader, make, response_module

NO_TIME = datetime.timedelta(0)
UNKNOWN = -1


async def describe_log_dirs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    if not ctx.allowed(header, "Describe", "Cluster"):
        refused = ErrorCode.cluster_authorization_failed
        return make(m.DescribeLogDirsResponse, throttle_time=NO_TIME, error_code=refused, results=())
    wanted = None if request.topics is None else {t.topic: set(t.partitions) for t in request.topics}
    sizes = await ctx.call(_sizes, ctx.broker, wanted)
    usage = await ctx.call(ctx.broker.fileio.disk_usage)
    total, usable = usage if usage is not None else (UNKNOWN, UNKNOWN)
    topics = tuple(
        make(
            m.DescribeLogDirsTopic,
            name=topic,
            partitions=tuple(
                make(
                    m.DescribeLogDirsPartition,
                    partition_index=p,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
                for p, size in partitions
            ),
        )
        for topic, partitions in sizes
    )
    result = make(
        m.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=ctx.broker.root,
        topics=topics,
        total_bytes=total,
        usable_bytes=usable,
    )
    return make(m.DescribeLogDirsResponse, throttle_time=NO_TIME, error_code=ErrorCode.none, results=(result,))


def _sizes(broker: Broker, wanted: dict[str, set[int]] | None) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each topic's partitions asked for (all of every topic when None) with their sizes; those
    that do not exist are left out, as Kafka leaves out what a broker does not hold."""
    out = []
    for topic in broker.list_topics() if wanted is None else sorted(wanted):
        try:
            described = broker.describe_topic(topic)
        except UnknownTopicOrPartitionError:
            continue
        partitions = [
            (p.partition, p.size_bytes) for p in described.partitions if wanted is None or p.partition in wanted[topic]
        ]
        if partitions:
            out.append((topic, partitions))
    return out
