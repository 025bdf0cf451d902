"""Offsets and consumer lag under kafka_exporter's names, read from the store at each scrape, so
the dashboards and alerts users built for kafka_exporter work against ``kop serve`` unchanged:

- ``kafka_topic_partition_current_offset``, ``kafka_topic_partition_oldest_offset`` (``topic``,
  ``partition``): each partition's log end and log start offsets;
- ``kafka_consumergroup_current_offset``, ``kafka_consumergroup_lag`` (``consumergroup``,
  ``topic``, ``partition``): what a group committed, and the records from there to the log end,
  of Kafka consumers and Spark queries (their ``group.id`` commits) alike;
- ``kafka_consumergroup_lag_sum`` (``consumergroup``, ``topic``): the lag over a topic's partitions;
- ``kafka_consumergroup_members`` (``consumergroup``): the members a group has now.

What a scrape reads (the partitions' metadata, probed in one request where the store can and read
at once where it serves many reads at once; the groups' offsets from the coordinator's cache) runs
on a worker thread; the members are counted on the event loop, where groups live."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from ..broker import Broker, TopicInfo
from ..broker.partition_views import PartitionViews
from ..errors import KopError

FAMILIES = {
    "kafka_topic_partition_current_offset": "Log end offset of a partition",
    "kafka_topic_partition_oldest_offset": "Log start offset of a partition",
    "kafka_consumergroup_current_offset": "Offset a consumer group committed in a partition",
    "kafka_consumergroup_lag": "Records from a group's committed offset to the partition's log end",
    "kafka_consumergroup_lag_sum": "A group's lag summed over a topic's partitions",
    "kafka_consumergroup_members": "Members a consumer group has now",
}

Samples = dict[str, list[tuple[dict[str, str], int]]]  # family -> (labels, value) each


def store_samples(broker: Broker, topics: Sequence[TopicInfo], members: Mapping[str, int]) -> Samples:
    """Every family's samples as the store stands: of ``topics`` (the caller's listing, which it
    may use for more; internal ones are left out) and ``members``: each active group's count."""
    out: Samples = defaultdict(list)
    partitions = [(t.name, p) for t in topics if not t.internal for p in range(t.partitions)]
    ends: dict[tuple[str, int], int] = {}
    for (topic, p), view in zip(partitions, PartitionViews(broker.admin, broker.store).each(partitions), strict=True):
        if isinstance(view, KopError):
            continue  # deleted while the scrape went round
        if isinstance(view, Exception):
            raise view
        ends[(topic, p)] = view.log_end_offset
        labels = {"topic": topic, "partition": str(p)}
        out["kafka_topic_partition_current_offset"].append((labels, view.log_end_offset))
        out["kafka_topic_partition_oldest_offset"].append((labels, view.log_start_offset))
    for group in sorted(set(broker.list_groups()) | set(members)):
        lag_sum: dict[str, int] = defaultdict(int)
        for (topic, p), committed in sorted(broker.fetch_offsets(group).items()):
            end = ends.get((topic, p))
            if end is None or committed.offset < 0:
                continue
            labels = {"consumergroup": group, "topic": topic, "partition": str(p)}
            lag = max(end - committed.offset, 0)
            out["kafka_consumergroup_current_offset"].append((labels, committed.offset))
            out["kafka_consumergroup_lag"].append((labels, lag))
            lag_sum[topic] += lag
        for topic, total in sorted(lag_sum.items()):
            out["kafka_consumergroup_lag_sum"].append(({"consumergroup": group, "topic": topic}, total))
        out["kafka_consumergroup_members"].append(({"consumergroup": group}, members.get(group, 0)))
    return out
