"""Views of many partitions at once, as a fetch and a Spark stream's offsets take them: the
partitions' metadata is probed in one request where the store can (``MetadataStore.probe_many``),
and read again only where it changed. A look at a hundred partitions on etcd, or on an S3 root,
was a hundred reads in turn."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

from ..errors import KopError, StorageError, UnknownTopicOrPartitionError
from ..storage.metadata_store import UNPROBED, MetadataStore
from ..storage.read_plan import PartitionView
from ..topic_name import TopicPartition
from .admin import TopicAdmin


class PartitionViews:
    def __init__(self, admin: TopicAdmin, store: MetadataStore):
        self._admin = admin
        self._store = store

    def each(self, partitions: Sequence[TopicPartition]) -> Iterator[PartitionView | Exception]:
        """Each partition's view, or why there is none, in turn."""
        probes = self._probes(partitions)
        for topic, partition in partitions:
            try:
                yield self._admin.view(topic, partition, probes.get((topic, partition), UNPROBED))[1]
            except Exception as e:  # that partition's answer; the others go on
                yield e

    def existing(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionView]:
        """The views of the partitions that exist; the others (deleted topics) are left out."""
        out = {}
        for tp, view in zip(partitions, self.each(partitions), strict=True):
            if isinstance(view, PartitionView):
                out[tp] = view
            elif not isinstance(view, UnknownTopicOrPartitionError):
                raise view
        return out

    def _probes(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Hashable | None]:
        """None for a partition that cannot be read, or where the store does not answer: its view
        then says why."""
        keys: dict[TopicPartition, str] = {}
        for topic, partition in partitions:
            try:
                keys[(topic, partition)] = self._admin.log(topic, partition).key
            except KopError:
                continue
        try:
            probes = self._store.probe_many(list(keys.values()))
        except StorageError:
            return {}
        return {tp: probes[key] for tp, key in keys.items()}
