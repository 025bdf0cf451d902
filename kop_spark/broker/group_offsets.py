"""OFFSET_COMMIT, OFFSET_FETCH and group administration: the Broker's front to the group
coordinator, which keeps offsets under topics' Kafka names (one view for every adapter)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import GroupIdNotFoundError, TopicNotFoundError
from ..group.coordinator import GroupCoordinator, LogRange, OffsetAndMetadata
from ..topic_name import OFFSETS_TOPIC, TopicPartition
from .partition_views import PartitionViews

if TYPE_CHECKING:
    from .broker import Broker


# The metadata of offsets a Spark query commits: tools can tell that the query's checkpoint, not
# the group, decides where the query goes on.
SPARK_COMMIT = "kop-spark streaming query"


class _OffsetsTopic:
    """The Broker as the coordinator reaches its offsets topic (``OffsetsLog``): the one writer an
    internal topic takes, as Kafka's coordinator appends with ``internalTopicsAllowed``."""

    def __init__(self, broker: Broker):
        self._broker = broker
        self._views = PartitionViews(broker.admin, broker.store)

    def create_topic(self, topic: str, partitions: int | None = None, config: Mapping | None = None) -> None:
        self._broker.admin.create_topic(topic, partitions, config, internal_topics_allowed=True)

    def partitions_for(self, topic: str) -> int:
        return self._broker.partitions_for(topic)

    def produce_batches(
        self, topic: str, partition: int, batches: Sequence[bytes], *, expected_log_end_offset: int | None = None
    ) -> int:
        return self._broker.produce_batches(
            topic, partition, batches, expected_log_end_offset=expected_log_end_offset, internal_topics_allowed=True
        )

    def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> list[bytes]:
        return self._broker.fetch_batches(topic, partition, offset, max_bytes)

    def view(self, topic: str, partition: int) -> LogRange:
        return self._broker.view(topic, partition)

    def views(self, topic: str, partitions: Sequence[int]) -> Sequence[LogRange | Exception]:
        return self._views.each([(topic, p) for p in partitions])

    def compact_partition(self, topic: str, partition: int) -> int | None:
        return self._broker.compact_partition(topic, partition)


class GroupOffsets:
    def __init__(self, broker: Broker):
        self._broker = broker
        self._coordinator: GroupCoordinator | None = None
        self._lock = threading.Lock()

    @property
    def coordinator(self) -> GroupCoordinator:
        with self._lock:  # one coordinator per Broker, whichever thread asks first
            if self._coordinator is None:
                b, c = self._broker, self._broker.config
                self._coordinator = GroupCoordinator(
                    _OffsetsTopic(b),
                    f"{c['kafkaMetadataTenant']}/{c['kafkaMetadataNamespace']}/{OFFSETS_TOPIC}",
                    c["offsetsTopicNumPartitions"],
                    retention_ms=c["offsetsRetentionMinutes"] * 60_000,
                    metadata_max_size=c["offsetMetadataMaxSize"],
                    check_interval_ms=c["offsetsRetentionCheckIntervalMs"],
                    clock=b.clock,
                )
            return self._coordinator

    def _kafka_names(self, partitions: Iterable[TopicPartition], check: bool) -> dict[TopicPartition, TopicPartition]:
        """(Kafka name, partition) of each (topic, partition) as given; with ``check``, unknown ones are refused."""
        admin = self._broker.admin
        out = {}
        metas: dict[str, dict[str, Any]] = {}
        for topic, p in partitions:
            if check:
                if topic not in metas:
                    metas[topic] = admin.metadata(topic)[1]
                admin.check_partition(topic, p, metas[topic])
            out[(topic, p)] = (admin.listed_name(topic), p)
        return out

    def commit_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], expire_timestamp_ms: int | None
    ) -> None:
        names = self._kafka_names(offsets, check=True)
        committed = {names[tp]: o for tp, o in offsets.items()}
        self.coordinator.commit(group, committed, expire_timestamp_ms=expire_timestamp_ms)

    def fetch_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if partitions is None:
            return self.coordinator.fetch(group)
        names = {kafka: given for given, kafka in self._kafka_names(partitions, check=False).items()}
        return {names[tp]: o for tp, o in self.coordinator.fetch(group, names).items()}

    def forget_topic(self, kafka_topic: str) -> None:
        """Delete every group's offsets of a deleted topic, as Kafka does, so a topic created again
        under the name does not inherit them. Nothing to do when there is no offsets topic yet."""
        coordinator = self.coordinator
        try:
            self._broker.admin.metadata(coordinator.topic)
        except TopicNotFoundError:
            return
        for group in coordinator.list_groups():
            stale = [tp for tp in coordinator.fetch(group) if tp[0] == kafka_topic]
            if stale:
                coordinator.delete_offsets(group, stale)

    def delete_group(self, group: str) -> None:
        if not self.coordinator.delete_group(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        names = {kafka: given for given, kafka in self._kafka_names(partitions, check=False).items()}
        if not self.coordinator.fetch(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")
        return [names[tp] for tp in self.coordinator.delete_offsets(group, names)]
