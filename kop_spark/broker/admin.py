"""Topic administration: create, grow, delete and list topics, and find a partition's log.

A topic is one metadata key (``layout.topic_key``): ``{"partitions", "config", "created_ms"}``,
plus ``"deleting": true`` while it is being deleted. Creation makes the partition logs first and
the key last, so a topic never appears without its logs; deletion marks the key first, so it
disappears at once, and whoever comes next finishes a deletion that was interrupted.

A topic's Kafka topic id is not stored: it is derived from its full name and ``created_ms``
(``topic_id``), so every server and process on the store gives the same one, topics created
before ids were served have one too, and a topic deleted and created again gets a new one, as
Kafka's random ids do.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import layout
from ..clock import Clock
from ..config import Config, check_topic_config, parse_topic_config
from ..config_changes import AlterConfigOp, alter_topic_config
from ..errors import (
    BadVersionError,
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    ManagedLedgerDeletedError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
)
from ..storage.at_once import all_at_once
from ..storage.fileio import FileIO
from ..storage.managed_ledger import ManagedLedger, create_managed_ledger
from ..storage.metadata_store import UNPROBED, MetadataStore, ProbedCache, Unchanged, Unprobed, Versioned, update
from ..storage.producer_state import ProducerEntry
from ..storage.read_plan import PartitionView
from ..topic_name import OFFSETS_TOPIC, TopicName, TopicPartition
from . import metric_names
from .log_manager import SETTINGS_READ_MS, LogManager

TopicMeta = dict[str, Any]

# How old a topic's metadata a produce may act on where the store cannot tell cheaply that it is
# unchanged: on an object store each produce read it, a billed GET of 30-60 ms beside its two PUTs,
# and on etcd with no watch a request beside its one. Another process's change of the topic's
# settings reaches this one's produces within it, as a Kafka broker applies a config change once
# its metadata log comes round to it; this process's own changes at once.
PRODUCED_TOPIC_AGE_S = 1.0

_TOPIC_IDS = uuid.UUID("6b6f702d-7370-6172-6b2d-746f70696373")  # the namespace of the uuid5 ids


def standing(meta: TopicMeta | None) -> bool:
    """A topic's key names a topic that exists: written, and not being deleted."""
    return meta is not None and not meta.get("deleting")


def _create_log(store: MetadataStore, key: str, now_ms: int) -> None:
    try:
        create_managed_ledger(store, key, now_ms)
    except BadVersionError:
        pass  # left by an earlier create that crashed half way, or made by a racing one: reuse it


def _read_topic_meta(store: MetadataStore, clock: Clock, key: str) -> TopicMeta | None:
    read_ms = clock.now_ms()  # first: a log made after it may be of the topic made again since
    value = store.get(key).value
    return None if value is None else {**value, SETTINGS_READ_MS: read_ms}


def _delete_log(ml: ManagedLedger) -> None:
    try:
        ml.delete()
        ml.purge()  # files whose grace is zero go now
    except ManagedLedgerDeletedError:
        pass


def topic_id(name: TopicName, meta: TopicMeta) -> uuid.UUID:
    return uuid.uuid5(_TOPIC_IDS, f"{name.full_name}@{meta['created_ms']}")


ViewsOf = Callable[[Sequence[TopicPartition]], list[PartitionView | Exception]]


@dataclass(frozen=True)
class TopicInfo:
    """What Kafka's Metadata says of a topic: its name, id and partition count, and whether it is
    internal (``TopicAdmin.is_internal``)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    log_end_offset: int
    ledgers: int
    size_bytes: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    full_name: str
    partitions: tuple[PartitionInfo, ...]
    config: dict[str, Any]


class TopicAdmin:
    def __init__(self, store: MetadataStore, fileio: FileIO, config: Config, logs: LogManager, clock: Clock):
        self._store = store
        self._fileio = fileio
        self._config = config
        self.logs = logs
        self._clock = clock
        self._topics = ProbedCache(store)  # a produce and a Metadata request read their topics

    # -- names -------------------------------------------------------------------------------

    def name(self, topic: str) -> TopicName:
        c = self._config
        if topic == OFFSETS_TOPIC:  # as Kafka's tools name it; tenant/ns/__consumer_offsets is a user's
            return TopicName(c["kafkaMetadataTenant"], c["kafkaMetadataNamespace"], topic)
        return TopicName.parse(topic, c["kafkaTenant"], c["kafkaNamespace"])

    def kafka_name(self, name: TopicName) -> str:
        """The name a topic is listed under: the offsets topic by Kafka's, as Kafka's tools find it."""
        if name.local_name == OFFSETS_TOPIC and self.is_internal(name):
            return OFFSETS_TOPIC
        return name.kafka_name(self._config["kafkaTenant"], self._config["kafkaNamespace"])

    def listed_name(self, topic: str) -> str:
        """The Kafka name a topic is listed under, however ``topic`` spells it (``persistent://...``)."""
        return self.kafka_name(self.name(topic))

    def is_internal(self, name: TopicName) -> bool:
        """One of kop's own topics, named ``__...`` in the metadata namespace, as KoP keeps them."""
        c = self._config
        own = (name.tenant, name.namespace) == (c["kafkaMetadataTenant"], c["kafkaMetadataNamespace"])
        return own and name.local_name.startswith("__")

    def refuse_internal(self, topic: str, action: str) -> None:
        """Kafka's refusal of a client's write to an internal topic (INVALID_TOPIC_EXCEPTION): the
        coordinator's records are there, and one it cannot read would break its partition's groups."""
        name = self.name(topic)
        if self.is_internal(name):
            raise InvalidTopicError(
                f"cannot {action} internal topic {topic!r} ({name.full_name}): kop keeps its own records there"
            )

    def metadata(
        self, topic: str, *, within_s: float = 0.0, partition: int | None = None
    ) -> tuple[TopicName, TopicMeta]:
        """``within_s``: where the store has no cheap probe, metadata read that recently stands in,
        if the topic stood and had ``partition`` then (else it is read again: a topic made or
        grown by another process is seen at once)."""
        name = self.name(topic)

        def has_partition(meta: TopicMeta | None) -> bool:
            return meta is not None and standing(meta) and (partition or 0) < meta["partitions"]

        meta = self._topic_meta(layout.topic_key(name), within_s=within_s, usable=has_partition)
        if meta is None or not standing(meta):
            raise TopicNotFoundError(f"topic {topic!r} does not exist (as {name.full_name}) in {self._fileio.uri}")
        return name, meta

    @staticmethod
    def check_partition(topic: str, partition: int, meta: TopicMeta) -> None:
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < meta["partitions"]:
            raise PartitionNotFoundError(
                f"topic {topic!r} has no partition {partition!r}: it has partitions 0 to {meta['partitions'] - 1}"
            )

    # -- partition logs ----------------------------------------------------------------------

    def log(self, topic: str, partition: int, meta: TopicMeta | None = None) -> ManagedLedger:
        """The open log of a partition of a topic that exists."""
        name = self.name(topic)
        if meta is None:
            ml = self.logs.cached(name, partition)
            if ml is not None:
                return ml
            meta = self.metadata(topic)[1]
        self.check_partition(topic, partition, meta)
        return self.logs.get(name, partition, meta)

    def describe(self, topic: str, views: ViewsOf) -> TopicDescription:
        """``views``: the partitions' views, or why not, read together (``PartitionViews.each``)."""
        name, meta = self.metadata(topic)
        parts = []
        for p, view in enumerate(views([(topic, p) for p in range(meta["partitions"])])):
            if isinstance(view, Exception):
                raise view
            parts.append(
                PartitionInfo(p, view.log_start_offset, view.log_end_offset, len(view.ledgers), view.size_bytes)
            )
        config = self._config.topic_config(meta.get("config"))
        return TopicDescription(self.kafka_name(name), name.full_name, tuple(parts), config)

    def view(
        self, topic: str, partition: int, token: Hashable | Unprobed | None = UNPROBED
    ) -> tuple[ManagedLedger, PartitionView]:
        """A partition's log and its view; ``token``: its probe, if taken (``PartitionViews``)."""
        ml = self.log(topic, partition)
        try:
            return ml, ml.view(token)
        except ManagedLedgerDeletedError:
            self.logs.forget(self.name(topic))
            self.metadata(topic)  # raises TopicNotFoundError if the topic went away
            raise PartitionNotFoundError(f"partition {partition} of topic {topic!r} has no log") from None

    def producers(self, topic: str, partition: int) -> dict[int, ProducerEntry]:
        """The idempotent producers a partition knows and has not yet forgotten
        (``producer.id.expiration.ms``): what DescribeProducers tells."""
        producers = self.view(topic, partition)[1].producers
        since = self._clock.now_ms() - self._config["producer.id.expiration.ms"]
        return {p: e for p, e in producers.items() if e.ts >= since}

    def deletable_log(self, topic: str, partition: int, before: int) -> ManagedLedger:
        """The log whose start DeleteRecords may move to ``before``: not past its end (which only
        grows, so the check holds), and not an internal topic's, as Kafka refuses those."""
        self.refuse_internal(topic, "delete records of")
        ml, view = self.view(topic, partition)
        if before < -1 or before > view.log_end_offset:
            raise OffsetOutOfRangeError(topic, partition, before, view.log_start_offset, view.log_end_offset)
        return ml

    def partition_logs(self, topic: str | None) -> Iterator[tuple[str, TopicName, int, ManagedLedger]]:
        """(topic, name, partition, log) of every partition of ``topic`` or of the store. Topics
        deleted meanwhile are skipped; half-done deletions are finished, deleted topics' logs let go."""
        if topic is not None:
            topics = [self.metadata(topic)]
        else:  # from one listing: a housekeeping pass read each topic of an object store three times
            listed = self._listed()
            for name, meta in listed:
                if not standing(meta):
                    self.finish_deletion(name, meta)
            topics = [(name, meta) for name, meta in listed if standing(meta)]
            self.logs.release_gone([name.full_name for name, _ in topics], self._stands)
        for name, meta in topics:
            t = self.kafka_name(name)
            for p in range(meta["partitions"]):
                yield t, name, p, self.log(t, p, meta)

    # -- changes -----------------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        partitions: int | None,
        config: Mapping[str, Any] | None,
        *,
        internal_topics_allowed: bool = False,
    ) -> None:
        if not internal_topics_allowed:
            self.refuse_internal(topic, "create")
        name = self.name(topic)
        n = self._config["defaultNumPartitions"] if partitions is None else partitions
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"create_topic {topic!r}: partitions must be an int, not {type(n).__name__}")
        if n < 1:
            raise InvalidPartitionsError(
                f"topic {topic!r}: number of partitions must be at least 1, got {partitions!r}"
            )
        overrides = parse_topic_config(config)
        check_topic_config(topic, self._config.topic_config(overrides))
        self._store.check_writable()
        self._fileio.ensure_writable_root()
        key = layout.topic_key(name)
        current = self._store.get(key)
        if current.value is not None and current.value.get("deleting"):
            self.finish_deletion(name, current.value)
            current = self._store.get(key)
        if current.value is not None:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists")
        claimed = metric_names.claim(self._store, name, self._stands, self.kafka_name)
        self._create_logs(name, range(n))
        value = {"partitions": n, "config": overrides, "created_ms": self._clock.now_ms()}
        try:
            self._store.put(key, value, current.version)
        except BadVersionError:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists") from None
        taker = metric_names.confirm(self._store, name, claimed)
        if taker is not None:  # a creator of a colliding name took the claim while this one was made
            self._delete(topic, name)
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topic: {self.kafka_name(taker)}")

    def _stands(self, name: TopicName) -> bool:
        return standing(self._store.get(layout.topic_key(name)).value)

    def _create_logs(self, name: TopicName, partitions: Iterable[int]) -> None:
        """At once: on an object store or etcd each is a round trip, and a topic of a hundred
        partitions took a hundred in turn."""
        keys = [layout.managed_ledger_key(name, p) for p in partitions]
        now = self._clock.now_ms()
        all_at_once(
            [functools.partial(_create_log, self._store, key, now) for key in keys], self._store.update_parallelism
        )

    def create_partitions(self, topic: str, total: int) -> None:
        self.refuse_internal(topic, "add partitions to")  # its groups would move to other partitions
        name = self.name(topic)

        def grow(meta: TopicMeta | None) -> TopicMeta:
            if meta is None or not standing(meta):
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            old = meta["partitions"]
            if not isinstance(total, int) or isinstance(total, bool) or total <= old:
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {old} partitions; the new count must be larger, got {total!r}"
                )
            self._create_logs(name, range(old, total))
            return {**meta, "partitions": total}

        self._update_topic(name, grow)

    def alter_config(
        self, topic: str, ops: Sequence[AlterConfigOp], *, replace: bool = False, validate_only: bool = False
    ) -> dict[str, Any]:
        """Change a topic's own settings by ``ops`` in one CAS, all or none (after clearing them
        first with ``replace``, as Kafka's legacy AlterConfigs); return the topic's settings then.
        Each process's open logs of the topic take the new settings the next time they are used
        with the topic's metadata (a produce, a retention pass)."""
        name = self.name(topic)
        defaults = self._config.topic_config()
        result: dict[str, Any] = {}

        def alter(meta: TopicMeta | None) -> TopicMeta:
            if meta is None or not standing(meta):
                raise TopicNotFoundError(f"topic {topic!r} does not exist (as {name.full_name}) in {self._fileio.uri}")
            try:
                overrides = alter_topic_config({} if replace else meta.get("config") or {}, defaults, ops)
            except ConfigError as e:
                raise ConfigError(f"topic {topic!r}: {e}") from None
            result.update(self._config.topic_config(overrides))
            check_topic_config(topic, result)
            if validate_only or overrides == meta.get("config"):
                raise Unchanged
            return {**meta, "config": overrides}

        self._update_topic(name, alter)
        return result

    def delete_topic(self, topic: str) -> None:
        self.refuse_internal(topic, "delete")
        self._delete(topic, self.name(topic))

    def _delete(self, topic: str, name: TopicName) -> None:
        def mark(meta: TopicMeta | None) -> TopicMeta:
            if meta is None or not standing(meta):
                raise TopicNotFoundError(f"topic {topic!r} does not exist (as {name.full_name}) in {self._fileio.uri}")
            return {**meta, "deleting": True}

        marked = self._update_topic(name, mark)
        assert marked.value is not None
        self.finish_deletion(name, marked.value)

    def finish_deletion(self, name: TopicName, meta: TopicMeta) -> None:
        logs = [self.logs.open(name, p, meta) for p in range(meta["partitions"])]
        all_at_once([functools.partial(_delete_log, ml) for ml in logs], self._store.update_parallelism)
        self.logs.forget(name)  # once deleted: closing the open logs only lets their files go

        def remove(current: TopicMeta | None) -> None:
            if current is None or not current.get("deleting"):
                raise Unchanged
            return None

        metric_names.release(self._store, name)
        self._update_topic(name, remove)

    def _update_topic(self, name: TopicName, change: Callable[[TopicMeta | None], TopicMeta | None]) -> Versioned:
        key = layout.topic_key(name)
        try:
            return update(self._store, key, change)
        finally:
            self._topics.forget(key)  # a produce here that may take older metadata takes this change at once

    def _topic_meta(
        self,
        key: str,
        token: Hashable | Unprobed | None = UNPROBED,
        within_s: float = 0.0,
        usable: Callable[[TopicMeta | None], bool] = lambda _: True,
    ) -> TopicMeta | None:
        read = functools.partial(_read_topic_meta, self._store, self._clock, key)
        return self._topics.get(key, read, token, within_s, usable)

    def info(self, topic: str) -> TopicInfo:
        return self._info(*self.metadata(topic))

    def _info(self, name: TopicName, meta: TopicMeta) -> TopicInfo:
        return TopicInfo(self.kafka_name(name), topic_id(name, meta), meta["partitions"], self.is_internal(name))

    def infos(self, include_internal: bool = False) -> list[TopicInfo]:
        """Every topic's, by Kafka name."""
        infos = [self._info(name, meta) for name, meta in self._listed() if standing(meta)]
        return sorted((t for t in infos if include_internal or not t.internal), key=lambda t: t.name)

    def _listed(self) -> list[tuple[TopicName, TopicMeta]]:
        """Every topic key's value, being deleted or not: the keys probed in one request where the
        store can (a Metadata request of a hundred topics on an S3 root was a hundred reads)."""
        keys = self._store.list_keys(layout.TOPICS)
        metas = ((key, self._topic_meta(key, token)) for key, token in self._store.probe_many(keys).items())
        return [(layout.topic_of_key(key), meta) for key, meta in metas if meta is not None]

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Kafka names of all topics, sorted."""
        return [t.name for t in self.infos(include_internal)]
