"""Views of many partitions at once, as a fetch and a Spark stream's offsets take them: the
partitions' metadata is probed in one request where the store can (``MetadataStore.probe_many``),
and read again only where it changed. A look at a hundred partitions on etcd, or on an S3 root,
was a hundred reads in turn."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable, Sequence

from ..errors import KopError, StorageError, UnknownTopicOrPartitionError
from ..storage.at_once import each_at_once
from ..storage.managed_ledger import ManagedLedger
from ..storage.metadata_store import UNPROBED, MetadataStore, Unprobed
from ..storage.read_plan import PartitionView
from ..topic_name import TopicPartition
from .admin import TopicAdmin, TopicMeta

# Each partition's last probe is kept until a sweep finds it not looked at since the one before: a
# server's consumers move on, and topics are deleted, where their probes stayed as long as it ran.
SWEEP_S = 60.0


class PartitionViews:
    def __init__(self, admin: TopicAdmin, store: MetadataStore, monotonic: Callable[[], float] = time.monotonic):
        self._admin = admin
        self._store = store
        self._last: dict[TopicPartition, Hashable | None] = {}  # each partition's probe at the last look
        self._looked: set[TopicPartition] = set()  # the partitions looked at since the last sweep
        self._monotonic = monotonic
        self._swept_at = monotonic()

    def each(
        self, partitions: Sequence[TopicPartition], probes_within_s: float = 0.0
    ) -> list[PartitionView | Exception]:
        """Each partition's view, or why there is none. Those whose probe changed since the last
        look are read at once, where the store serves many reads at once; the others' views are
        kept ones, which a thread would only slow down. ``probes_within_s``: as the store's
        ``probe_many`` takes it."""
        probes = self._probes(partitions, probes_within_s)
        changed: list[TopicPartition] = []
        kept: list[TopicPartition] = []
        for tp in partitions:
            (changed if probes.get(tp) is None or self._last.get(tp) != probes[tp] else kept).append(tp)
        self._last.update(probes)
        self._sweep(partitions)
        got = dict(zip(changed, each_at_once(self._views(changed, probes), self._store.read_parallelism), strict=True))
        got.update(zip(kept, each_at_once(self._views(kept, probes), 1), strict=True))
        return [got[tp] for tp in partitions]

    def _sweep(self, looked: Sequence[TopicPartition]) -> None:
        self._looked.update(looked)
        now = self._monotonic()
        if now - self._swept_at < SWEEP_S:
            return
        # Other threads may look meanwhile: a probe they keep in the old dict is lost, and their
        # partitions are read as if changed, at once, which is all a lost probe costs.
        kept, looked_since = list(self._last.items()), self._looked
        self._last, self._looked, self._swept_at = {tp: p for tp, p in kept if tp in looked_since}, set(), now

    def __len__(self) -> int:
        return len(self._last)

    def _views(
        self, partitions: list[TopicPartition], probes: dict[TopicPartition, Hashable | None]
    ) -> list[Callable[[], PartitionView]]:
        return [functools.partial(self._view, tp, probes.get(tp, UNPROBED)) for tp in partitions]

    def _view(self, tp: TopicPartition, probe: Hashable | Unprobed | None) -> PartitionView:
        return self._admin.view(*tp, probe)[1]

    def existing(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionView]:
        """The views of the partitions that exist; the others (deleted topics) are left out."""
        out = {}
        for tp, view in zip(partitions, self.each(partitions), strict=True):
            if isinstance(view, PartitionView):
                out[tp] = view
            elif not isinstance(view, UnknownTopicOrPartitionError):
                raise view
        return out

    def _probes(self, partitions: Sequence[TopicPartition], within_s: float) -> dict[TopicPartition, Hashable | None]:
        """None for a partition that cannot be read, or where the store does not answer: its view
        then says why."""
        keys: dict[TopicPartition, str] = {}
        metas: dict[str, TopicMeta | KopError] = {}
        for topic, partition in partitions:
            try:
                keys[(topic, partition)] = self._log(topic, partition, metas).key
            except KopError:
                continue
        try:
            probes = self._store.probe_many([*keys.values(), *self._siblings(keys)], within_s)
        except StorageError:
            return {}
        return {tp: probes[key] for tp, key in keys.items()}

    def _siblings(self, asked: dict[TopicPartition, str]) -> set[str]:
        """Where a probe is a billed listing (an object store's, from the first key asked to the
        last), the keys of the topics' other open partitions too: the members of a group each
        fetch their own partitions, and a listing of one member's covered no other's, so each
        listed apart (4 members of a 4-partition topic: 35 LISTs a second on moto)."""
        if not self._store.requests_billed:
            return set()
        topics = {topic for topic, _ in asked}
        open_keys = {ml.key for topic in topics for ml in self._admin.logs.cached_of(self._admin.name(topic))}
        return open_keys - set(asked.values())

    def _log(self, topic: str, partition: int, metas: dict[str, TopicMeta | KopError]) -> ManagedLedger:
        """A partition's open log. One not yet open needs its topic's metadata, read once a look:
        on an object store each read is a round trip, which a server's first look at a hundred
        partitions made a hundred times, in turn."""
        ml = self._admin.logs.cached(self._admin.name(topic), partition)
        if ml is not None:
            return ml
        if topic not in metas:
            try:
                metas[topic] = self._admin.metadata(topic)[1]
            except KopError as e:  # every partition of the topic is left out with it
                metas[topic] = e
        meta = metas[topic]
        if isinstance(meta, KopError):
            raise meta
        return self._admin.log(topic, partition, meta)
