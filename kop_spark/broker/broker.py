"""The Broker: Kafka request semantics over managed ledgers, as a facade over small parts.

This is the one place that knows what PRODUCE, FETCH and LIST_OFFSETS mean (and, with the group
coordinator, OFFSET_COMMIT and OFFSET_FETCH). Spark, the CLI and any future protocol front-end are
thin adapters over it. Topic administration is ``admin``, open logs ``log_manager``, reads
``fetch``, produced-batch checks ``validation``, exactly-once sinks ``sink_commits`` and
housekeeping ``maintenance``.
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .. import layout
from ..clock import SYSTEM_CLOCK, Clock
from ..config import Config
from ..config_changes import AlterConfigOp
from ..errors import (
    ManagedLedgerDeletedError,
    StorageError,
    TopicNotFoundError,
)
from ..group.coordinator import GroupCoordinator, OffsetAndMetadata
from ..record import ConsumerRecord, Record
from ..record.compression import CompressionType
from ..storage.fileio import FileIO, open_fileio, optional_local_dir, takes_whole_files_only
from ..storage.ledger import IOStats
from ..storage.managed_ledger import AppendResult, ManagedLedger
from ..storage.metadata import NETWORK_SCHEMES, RefusedMetadataStore, open_metadata_store
from ..storage.metadata_store import MetadataStore
from ..storage.object_store import is_object_store_uri
from ..storage.read_plan import LedgerRecord, PartitionView
from ..storage.staging import StagedLedger
from ..topic_name import TopicName, TopicPartition
from .acls import Acls
from .admin import PRODUCED_TOPIC_AGE_S, TopicAdmin, TopicDescription, TopicInfo
from .credentials import Users
from .fetch import FetchedBatches, Fetcher, OffsetLookup, OffsetSpec, PartitionFetch
from .group_offsets import GroupOffsets
from .live_groups import LiveGroups
from .log_manager import LogManager
from .maintenance import Housekeeper, MaintenanceReport, RepairReport
from .partition_views import PartitionViews
from .producer_batches import ProducerBatches, next_producer_id
from .sink_commits import SinkCommits
from .transactions import Transactions
from .validation import PartitionBatches, Produced, checked_batches, queued_produces

T = TypeVar("T")


class Broker:
    """Kafka-style topics with continuous offsets, stored as ledgers under one root.

    ``Broker()`` takes its root from conf/kop.conf (``storageRoot``, default ``./kop-data``);
    ``conf`` overrides any setting of conf/kop.conf by name. One Broker may be shared by threads.
    """

    def __init__(self, root: str | None = None, conf: Mapping[str, Any] | None = None, *, clock: Clock = SYSTEM_CLOCK):
        self.config = Config(conf)
        self.root = str(root if root is not None else self.config["storageRoot"])
        self.clock = clock
        self.fileio, self.store = _open_storage(self.config, self.root)
        self.writer_id = uuid.uuid4().hex
        self.stats = IOStats()
        logs = LogManager(self.store, self.fileio, self.config, self.writer_id, self.stats, clock)
        self.admin = TopicAdmin(self.store, self.fileio, self.config, logs, clock)
        self._fetcher = Fetcher(self.admin, self.store, self.fileio, self.stats)
        self.housekeeping = Housekeeper(self)  # what kop serve runs in the background, stoppable
        self._groups = GroupOffsets(self)
        self.live_groups = LiveGroups(self.store, clock)  # consumer groups' members, as kop serve sees them
        self.users, self.acls = Users(self.store), Acls(self.store)  # whom kop serve lets in, and to what
        self.transactions = Transactions(self)  # Kafka transactions' producers and states
        self._lock = threading.Lock()
        # Keyless records stick to one partition per call, from a random one on (drawn from the OS: a
        # process's ``random`` is its user's), so one-shot processes do not all start at partition 0.
        self._round_robin = secrets.randbelow(1 << 30)

    def root_exists(self) -> bool:
        """Whether the store root is there (a remote one is taken to be)."""
        local = optional_local_dir(self.root)
        return local is None or os.path.isdir(local)

    def close(self) -> None:
        """Seal this broker's open ledgers, so readers get entry tables and no one must fence them."""
        self.admin.logs.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics ----------------------------------------------------------------------------

    def topic_name(self, topic: str) -> TopicName:
        return self.admin.name(topic)

    def create_topic(self, topic: str, partitions: int | None = None, config: Mapping[str, Any] | None = None) -> None:
        """Create a topic of ``partitions`` partitions (default ``defaultNumPartitions``), all or nothing."""
        self.admin.create_topic(topic, partitions, config)

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow a topic to ``total`` partitions (Kafka's CreatePartitions: never shrinks)."""
        self.admin.create_partitions(topic, total)

    def alter_topic_config(
        self, topic: str, ops: Sequence[AlterConfigOp], *, replace: bool = False, validate_only: bool = False
    ) -> dict[str, Any]:
        """Change a topic's settings, all or none, and return them (IncrementalAlterConfigs; with
        ``replace``, AlterConfigs: the topic's own settings become those set). See ``TopicAdmin``."""
        return self.admin.alter_config(topic, ops, replace=replace, validate_only=validate_only)

    def delete_topic(self, topic: str) -> None:
        """Delete a topic and groups' offsets of it; its files go after ``file.delete.delay.ms``."""
        kafka_topic = self.admin.listed_name(topic)
        self.admin.delete_topic(topic)
        self._groups.forget_topic(kafka_topic)

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        """Kafka's DeleteRecords: the partition starts at ``before`` (-1: its log end) from now on;
        return the log start then (an offset before it changes nothing). Closed ledgers wholly
        before it go after ``file.delete.delay.ms``; offsets past the log end are out of range."""
        ml = self.admin.deletable_log(topic, partition, before)
        return self._on_log(topic, lambda: ml.delete_before(None if before == -1 else before))

    def list_topics(self, include_internal: bool = False) -> list[str]:  # Kafka names, sorted
        return self.admin.list_topics(include_internal)

    def partitions_for(self, topic: str) -> int:
        return int(self.admin.metadata(topic)[1]["partitions"])

    def topic_info(self, topic: str) -> TopicInfo:  # Kafka's topic id and partition count
        return self.admin.info(topic)

    def topic_infos(self, include_internal: bool = False) -> list[TopicInfo]:
        return self.admin.infos(include_internal)

    def topic_config(self, topic: str, *, own: bool = False) -> dict[str, Any]:
        """The topic's settings in effect; with ``own``, only those it was given (not defaults)."""
        config = self.admin.metadata(topic)[1].get("config") or {}
        return dict(config) if own else self.config.topic_config(config)

    def describe_topic(self, topic: str) -> TopicDescription:
        return self.admin.describe(topic, PartitionViews(self.admin, self.store).each)

    def view(self, topic: str, partition: int) -> PartitionView:
        """The partition's log as it stands: log start and end offsets and the ledgers holding them.
        Reads planned from it can run anywhere the root is mounted, with no metadata store
        (``PartitionView.slices`` and ``storage.read_plan.SliceReader``)."""
        return self.admin.view(topic, partition)[1]

    # -- produce ---------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Iterable[Record],
        partition: int | None = None,
        *,
        compression: str | CompressionType = CompressionType.NONE,
        idempotence_key: tuple[str, int] | None = None,
        batch_size: int = 16384,
    ) -> list[tuple[int, int, int]]:
        """Produce records; return ``(partition, base_offset, count)`` per partition written. With
        ``partition=None`` a keyed record goes where Kafka's partitioner puts it (murmur2 of the key),
        keyless ones share one partition per call, round robin. Records are batched as a Kafka
        producer does (``batch_size``); each partition's batches are one atomic append."""
        _, meta = self.admin.metadata(topic, within_s=PRODUCED_TOPIC_AGE_S, partition=partition)
        if partition is not None:
            self.admin.check_partition(topic, partition, meta)
        with self._lock:
            sticky = self._round_robin % meta["partitions"]
            self._round_robin += partition is None
        batches = ProducerBatches(topic, meta["partitions"], partition, sticky, compression, batch_size)
        for r in records:
            batches.add(r)
        out = []
        for p, (built, count) in batches.by_partition().items():
            base = self.produce_batches(topic, p, built, idempotence_key=idempotence_key, _meta=meta)
            out.append((p, base, count))
        return out

    def produce_batches(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        *,
        idempotence_key: tuple[str, int] | None = None,
        expected_log_end_offset: int | None = None,
        internal_topics_allowed: bool = False,
        _meta: dict[str, Any] | None = None,
    ) -> int:
        """Append raw Kafka v2 batches (as in a PRODUCE request) atomically; return the base offset.

        Batches are checked as a Kafka broker checks them (``validation``) and refused whole if any
        fails. With ``idempotence_key=(writer, sequence)`` a repeated append is applied once and
        answered with the offsets of the first. With ``expected_log_end_offset`` the append
        happens only while the log still ends there (``LogEndMovedError`` otherwise)."""
        ml, checked, now, _ = checked_batches(self, topic, partition, batches, _meta, internal_topics_allowed)
        key, expected = idempotence_key, expected_log_end_offset
        append = functools.partial(
            ml.append, checked, idempotence_key=key, broker_timestamp=now, expected_next_offset=expected
        )
        return self._on_log(topic, lambda: append().base_offset)

    def queue_batches(self, wanted: Sequence[PartitionBatches]) -> list[Callable[[], Produced] | Exception]:
        """``produce_batches`` in two steps: check and queue each partition's batches now, in order;
        each call returned waits for them and says what a produce response tells (a server's
        pipelining). Or why they were refused."""
        return queued_produces(self, wanted, self._on_log)

    def init_producer_id(self) -> int:
        """A new idempotent producer's id (epoch 0), never handed out twice on this store."""
        return next_producer_id(self.store)

    def _on_log(self, topic: str, operation: Callable[[], T]) -> T:
        try:
            return operation()
        except ManagedLedgerDeletedError:
            self.admin.logs.forget(self.topic_name(topic))
            raise TopicNotFoundError(f"topic {topic!r} was deleted") from None

    # -- staged appends: exactly-once sinks ------------------------------------------------

    def append_staged(
        self, topic: str, partition: int, staged: Sequence[StagedLedger], sink_key: tuple[str, int]
    ) -> AppendResult:
        """Append staged ledgers to a partition in one atomic step that assigns their offsets.
        Idempotent per ``sink_key`` = (writer, batch): a batch already appended is not appended again."""
        ml = self.admin.log(topic, partition)
        return self._on_log(topic, lambda: ml.append_ledgers(staged, sink_key))

    @property
    def sink_commits(self) -> SinkCommits:
        """Exactly-once sink commits: batch records, all or nothing across partitions."""
        return SinkCommits(self)

    # -- fetch -----------------------------------------------------------------------------

    def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> list[bytes]:
        """Raw batches from the one holding ``offset`` on, with absolute ``baseOffset`` (a FETCH's)."""
        return self._fetcher.fetch_batches(topic, partition, offset, max_bytes)

    def fetch_partitions(
        self, wanted: Sequence[PartitionFetch], max_bytes: int, probes_within_s: float = 0.0
    ) -> list[FetchedBatches | Exception]:
        """A FETCH's partitions: each one's batches and the log's bounds then, or why not (``Fetcher``)."""
        return self._fetcher.fetch_partitions(wanted, max_bytes, probes_within_s)

    def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 50 << 20
    ) -> list[ConsumerRecord]:
        """Records from ``offset`` on (at most ``max_records``); empty at the log end.
        Control records take offsets but are never returned."""
        return self._fetcher.fetch(topic, partition, offset, max_records, max_bytes)

    def offsets_and_timestamps(self, wanted: Sequence[OffsetLookup]) -> list[tuple[int, int] | Exception]:
        """``list_offsets`` of each (topic, partition, spec), with the found record's timestamp (-1 for
        earliest and latest), ``"max-timestamp"`` too; (-1, -1): none. Or why not (``Fetcher``)."""
        return self._fetcher.offsets_and_timestamps(wanted)

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        """``"earliest"`` (-2): the log start offset; ``"latest"`` (-1): the next offset to be
        written; a timestamp in ms: the first offset whose timestamp is at or after it, or -1."""
        return self._fetcher.list_offsets(topic, partition, spec)

    # -- consumer groups (OFFSET_COMMIT, OFFSET_FETCH and group administration) -------------

    @property
    def groups(self) -> GroupCoordinator:
        return self._groups.coordinator

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        expire_timestamp_ms: int | None = None,
    ) -> None:
        """Commit a group's offsets, all in one entry: all or nothing. The topics and partitions
        must exist; metadata longer than ``offsetMetadataMaxSize`` is refused."""
        self._groups.commit_offsets(group, offsets, expire_timestamp_ms)

    def fetch_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """A group's committed offsets; offset -1 for a partition asked for that has none."""
        return self._groups.fetch_offsets(group, partitions)

    def list_groups(self) -> list[str]:
        return self.groups.list_groups()

    def delete_group(self, group: str) -> None:
        self._groups.delete_group(group)

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Delete some of a group's offsets; returns the partitions that had one."""
        return self._groups.delete_offsets(group, partitions)

    def expire_offsets(self) -> int:
        """Expire offsets past ``offsetsRetentionMinutes`` now, instead of on the next check."""
        return self.groups.expire()

    # -- housekeeping ----------------------------------------------------------------------

    def compact(self, topic: str) -> None:
        """Compact every partition of a topic whose ``cleanup.policy`` includes compact: keep the
        latest record per key, drop tombstones older than ``delete.retention.ms``; offsets stay."""
        for p in range(self.partitions_for(topic)):
            self.compact_partition(topic, p)

    def compact_partition(self, topic: str, partition: int) -> int | None:
        return self.housekeeping.compact_partition(topic, partition)

    def enforce_retention(self, topic: str | None = None) -> None:
        """Apply retention now: a damaged partition does not stop the others (its error comes after)."""
        self.housekeeping.enforce_retention(topic)

    def clean_logs(self, topic: str | None = None) -> MaintenanceReport:
        """Compact now what Kafka's log cleaner would (``cleanup.policy`` compact, dirty enough)."""
        return self.housekeeping.clean_logs(topic)

    def maintenance(
        self, topic: str | None = None, *, target_ledger_bytes: int | None = None, orphan_grace_ms: int | None = None
    ) -> MaintenanceReport:
        """Keep a store tidy: merge small ledgers (offsets stay), retention, ``clean_logs``, delete files
        nothing refers to (defaults: the ``maintenance*`` settings). A damaged partition goes in ``errors``."""
        return self.housekeeping.maintenance(topic, target_ledger_bytes, orphan_grace_ms)

    def verify(self, topic: str | None = None) -> dict[str, list[str]]:
        """Check every partition's ledgers against their metadata and every entry's checksums."""
        return self.housekeeping.verify(topic)

    def repair(self, topic: str | None = None, dry_run: bool = False) -> RepairReport:
        """Repair a damaged store: unreadable metadata versions go, damaged partitions are cut (``RepairReport``)."""
        return self.housekeeping.repair(topic, dry_run)

    def locate_ledger(self, file: str) -> tuple[str, LedgerRecord] | None:
        """The managed ledger (its key) referring to ``file``, and its record of it (``kop dump-ledger``)."""
        return self.housekeeping.locate_ledger(file)

    def managed_ledger(self, topic: str, partition: int) -> ManagedLedger:
        """The partition's log itself (for tests and tools that work below the Broker)."""
        return self.admin.log(topic, partition)


def _open_storage(config: Config, root: str) -> tuple[FileIO, MetadataStore]:
    """The root's files and the metadata store, each by its URI; nothing is contacted yet."""
    timeout_s = config["metadataStoreOperationTimeoutSeconds"]
    cloud, sync = config.cloud_options, config["journalSyncData"]
    whole = takes_whole_files_only(root, config["wholeFileWrites"])
    cache = config["managedLedgerCacheSizeMB"] << 20
    fileio = open_fileio(root, sync=sync, options=cloud, timeout_s=timeout_s, whole_files=whole, cache_bytes=cache)
    _check_root(root)
    url = _metadata_url(config, root)
    if whole and not url.startswith(NETWORK_SCHEMES):
        return fileio, RefusedMetadataStore(
            f"store root {root} takes whole files only (no appends, links or locks), so the metadata cannot "
            f"be kept as files there: set metadataStoreUrl to zk:host:port or etcd:http://host:port, or use "
            f"the volume's cloud storage URI (s3://..., abfss://..., gs://...) as the root"
        )
    store = open_metadata_store(
        url,
        sync=sync,
        timeout_s=timeout_s,
        session_timeout_s=config["metadataStoreSessionTimeoutMillis"] / 1000,
        options=cloud,
    )
    return fileio, store


def _metadata_url(config: Config, root: str) -> str:
    """``metadataStoreUrl``, or beside the data: ``<root>/_metadata``, as files or as objects."""
    if config["metadataStoreUrl"]:
        return str(config["metadataStoreUrl"])
    local = optional_local_dir(root)
    if local is not None:
        return os.path.join(local, layout.METADATA_DIR)
    if is_object_store_uri(root):
        return f"{root.rstrip('/')}/{layout.METADATA_DIR}"
    raise StorageError(
        f"store root {root!r} is neither local nor an object store: set metadataStoreUrl (a directory, "
        f"zk:host:port or etcd:http://host:port) for its metadata"
    )


def _check_root(root: str) -> None:
    local = optional_local_dir(root)
    if local is None:
        return
    if os.path.exists(local) and not os.path.isdir(local):
        raise StorageError(f"store root {local} is not a directory")
    if os.path.isdir(local) and not os.access(local, os.R_OK | os.X_OK):
        raise StorageError(f"cannot read store root {local}: permission denied")
