"""The Broker: Kafka request semantics over managed ledgers.

This is the one place that knows what PRODUCE, FETCH and LIST_OFFSETS mean (and, with the group
coordinator, OFFSET_COMMIT and OFFSET_FETCH). Spark, the CLI and any future protocol front-end are
thin adapters over it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import Config, parse_topic_config
from .errors import (
    BadVersionError,
    ConfigError,
    CorruptRecordError,
    FileMissingError,
    GroupIdNotFoundError,
    InvalidPartitionsError,
    InvalidRecordError,
    KopError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    RecordTooLargeError,
    StorageError,
    TopicAlreadyExistsError,
    TopicNotFoundError,
)
from .group.coordinator import GroupCoordinator, OffsetAndMetadata
from .partitioner import partition_for_key
from .record import BatchRecord, ConsumerRecord, Record, RecordBatch, TimestampType, build_record_batch, split_batches
from .record.compression import CompressionType
from .record.default_record_batch import with_log_append_time, with_timestamps
from .sink_commit import COMMITTING, SinkCommits
from .storage.fileio import FileIO, optional_local_dir
from .storage.ledger import IOStats
from .storage.managed_ledger import (
    AppendResult,
    LedgerStager,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerDeletedError,
    ReadEntry,
    Snapshot,
    StagedLedger,
    now_ms,
)
from .storage.metadata_store import FileMetadataStore
from .topic_name import TopicName

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2  # ListOffsets' special timestamps
LATEST_TIMESTAMP = -1
OffsetSpec = str | int


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


class Broker:
    """Kafka-style topics with continuous offsets, stored as ledgers under one root.

    ``Broker()`` takes its root from conf/kop.conf (``storageRoot``, default ``./kop-data``);
    ``conf`` overrides any setting of conf/kop.conf by name. One Broker may be shared by threads.
    """

    def __init__(self, root: str | None = None, conf: Mapping[str, Any] | None = None):
        self.config = Config(conf)
        self.root = str(root if root is not None else self.config["storageRoot"])
        self.fileio = FileIO(self.root, sync=self.config["journalSyncData"])
        metadata_dir = self.config["metadataStoreUrl"] or None
        if metadata_dir is None:
            local = optional_local_dir(self.root)
            if local is None:
                raise StorageError(
                    f"store root {self.root!r} is not on a local filesystem: set metadataStoreUrl to a "
                    f"local or mounted directory for the metadata store"
                )
            metadata_dir = os.path.join(local, "_metadata")
        self._check_root()
        self.store = FileMetadataStore(metadata_dir, sync=self.config["journalSyncData"])
        self.writer_id = uuid.uuid4().hex
        self.stats = IOStats()
        self._ledgers: dict[tuple[str, int], ManagedLedger] = {}
        self._lock = threading.RLock()
        self._round_robin = 0
        self._groups: GroupCoordinator | None = None

    def _check_root(self) -> None:
        local = optional_local_dir(self.root)
        if local is None:
            return
        if os.path.exists(local) and not os.path.isdir(local):
            raise StorageError(f"store root {local} is not a directory")
        if os.path.isdir(local) and not os.access(local, os.R_OK | os.X_OK):
            raise StorageError(f"cannot read store root {local}: permission denied")

    def close(self) -> None:
        """Seal this broker's open ledgers, so readers get entry tables and no one must fence them."""
        with self._lock:
            ledgers, self._ledgers = list(self._ledgers.values()), {}
        for ml in ledgers:
            ml.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- names and metadata ----------------------------------------------------------------

    def topic_name(self, topic: str) -> TopicName:
        return TopicName.parse(topic, self.config["kafkaTenant"], self.config["kafkaNamespace"])

    def _kafka_name(self, name: TopicName) -> str:
        return name.kafka_name(self.config["kafkaTenant"], self.config["kafkaNamespace"])

    def _topic_metadata(self, topic: str) -> tuple[TopicName, dict]:
        name = self.topic_name(topic)
        meta = self.store.get(name.metadata_key).value
        if not _standing(meta):
            raise TopicNotFoundError(f"topic {topic!r} does not exist (as {name.full_name})")
        return name, meta

    def _managed_ledger(self, topic: str, partition: int, meta: dict | None = None) -> ManagedLedger:
        name = self.topic_name(topic)
        key = (name.full_name, partition)
        ml = self._ledgers.get(key)
        if ml is not None:
            return ml
        if meta is None:
            name, meta = self._topic_metadata(topic)
        self._check_partition(topic, partition, meta)
        ml = self._open_log(name, partition, meta)
        with self._lock:
            return self._ledgers.setdefault(key, ml)

    def _open_log(self, name: TopicName, partition: int, meta: dict) -> ManagedLedger:
        cfg = self.config.topic_config(meta.get("config"))
        return ManagedLedger(
            name=f"{self._kafka_name(name)}-{partition}",
            key=name.managed_ledger_key(partition),
            data_dir=name.data_dir(partition),
            store=self.store,
            fileio=self.fileio,
            config=ManagedLedgerConfig(
                max_entries_per_ledger=self.config["managedLedgerMaxEntriesPerLedger"],
                max_bytes_per_ledger=self.config["managedLedgerMaxSizePerLedgerMbytes"] << 20,
                max_ledger_age_ms=self.config["managedLedgerMaxLedgerRolloverTimeMinutes"] * 60_000,
                producer_expiration_ms=self.config["producer.id.expiration.ms"],
                retention_ms=cfg["retention.ms"],
                retention_bytes=cfg["retention.bytes"],
                file_delete_delay_ms=cfg["file.delete.delay.ms"],
                delete_policy="delete" in cfg["cleanup.policy"],
                delete_retention_ms=cfg["delete.retention.ms"],
                merge_in_passing=self.config["managedLedgerMergeInPassing"],
                sink_expiration_ms=self.config["transactional.id.expiration.ms"],
            ),
            writer_id=self.writer_id,
            stats=self.stats,
        )

    @staticmethod
    def _check_partition(topic: str, partition: int, meta: dict) -> None:
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < meta["partitions"]:
            raise PartitionNotFoundError(
                f"topic {topic!r} has no partition {partition!r}: it has partitions 0 to {meta['partitions'] - 1}"
            )

    def _snapshot(self, topic: str, partition: int) -> tuple[ManagedLedger, Snapshot]:
        ml = self._managed_ledger(topic, partition)
        try:
            return ml, ml.snapshot()
        except ManagedLedgerDeletedError:
            self._forget(topic)
            self._topic_metadata(topic)  # raises TopicNotFoundError if the topic went away
            raise PartitionNotFoundError(f"partition {partition} of topic {topic!r} has no log") from None

    def snapshot(self, topic: str, partition: int) -> Snapshot:
        """The partition's log as it stands: log start and end offsets and the ledgers holding them.
        Reads planned from it can run anywhere the root is mounted, with no metadata store
        (``Snapshot.slices`` and ``storage.managed_ledger.read_slice``)."""
        return self._snapshot(topic, partition)[1]

    def _forget(self, topic: str) -> None:
        self._forget_name(self.topic_name(topic))

    def _forget_name(self, name: TopicName) -> None:
        full = name.full_name
        with self._lock:
            for key in [k for k in self._ledgers if k[0] == full]:
                del self._ledgers[key]

    # -- topic administration --------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int | None = None, config: Mapping[str, Any] | None = None) -> None:
        """Create a topic of ``partitions`` partitions (default ``defaultNumPartitions``).

        All or nothing: the partition logs are made first and the topic appears, whole, with the
        CAS that creates its key, so a concurrent first use never finds a partition without a log."""
        name = self.topic_name(topic)
        n = self.config["defaultNumPartitions"] if partitions is None else partitions
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidPartitionsError(
                f"topic {topic!r}: number of partitions must be at least 1, got {partitions!r}"
            )
        overrides = parse_topic_config(config)
        self.fileio.ensure_writable_root()
        current = self.store.get(name.metadata_key)
        if current.value is not None and current.value.get("deleting"):
            self._finish_deletion(name, current.value)
            current = self.store.get(name.metadata_key)
        if current.value is not None:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists")
        self._create_logs(name, range(n))
        try:
            self.store.put(
                name.metadata_key, {"partitions": n, "config": overrides, "created_ms": now_ms()}, current.version
            )
        except BadVersionError:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists") from None

    def _create_logs(self, name: TopicName, partitions: Iterable[int]) -> None:
        for p in partitions:
            try:
                ManagedLedger.create(self.store, name.managed_ledger_key(p))
            except BadVersionError:
                pass  # left by an earlier create that crashed half way, or made by a racing one: reuse it

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow a topic to ``total`` partitions (Kafka's CreatePartitions: never shrinks)."""
        name = self.topic_name(topic)
        while True:
            current = self.store.get(name.metadata_key)
            if not _standing(current.value):
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            old = current.value["partitions"]
            if not isinstance(total, int) or total <= old:
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {old} partitions; the new count must be larger, got {total!r}"
                )
            self._create_logs(name, range(old, total))
            try:
                self.store.put(name.metadata_key, {**current.value, "partitions": total}, current.version)
                return
            except BadVersionError:
                continue

    def delete_topic(self, topic: str) -> None:
        """Delete a topic. Its files are removed after ``file.delete.delay.ms``.

        The topic disappears at once (marked as being deleted); then its logs are deleted and
        its key removed. Should that be interrupted, the next creation of the name, ``kop
        maintenance`` or ``enforce_retention`` finishes it."""
        name = self.topic_name(topic)
        while True:
            current = self.store.get(name.metadata_key)
            if not _standing(current.value):
                raise TopicNotFoundError(f"topic {topic!r} does not exist (as {name.full_name})")
            try:
                self.store.put(name.metadata_key, {**current.value, "deleting": True}, current.version)
                break
            except BadVersionError:
                continue
        self._finish_deletion(name, current.value)

    def _finish_deletion(self, name: TopicName, meta: dict) -> None:
        self._forget_name(name)
        for p in range(meta["partitions"]):
            ml = self._open_log(name, p, meta)
            try:
                ml.delete()
                ml.purge()  # files whose grace is zero go now
            except ManagedLedgerDeletedError:
                pass
        while True:
            current = self.store.get(name.metadata_key)
            if current.value is None or not current.value.get("deleting"):
                return
            try:
                self.store.put(name.metadata_key, None, current.version)
                return
            except BadVersionError:
                continue

    def _pending_deletions(self) -> list[tuple[TopicName, dict]]:
        out = []
        for key in self.store.list_keys("topics"):
            value = self.store.get(key).value
            if value is not None and value.get("deleting"):
                _, tenant, namespace, local = key.split("/")
                out.append((TopicName(tenant, namespace, local), value))
        return out

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Kafka names of all topics, sorted."""
        out = []
        for key in self.store.list_keys("topics"):
            _, tenant, namespace, local = key.split("/")
            if not _standing(self.store.get(key).value):
                continue
            name = TopicName(tenant, namespace, local)
            if not include_internal and local.startswith("__"):
                continue
            out.append(self._kafka_name(name))
        return sorted(out)

    def partitions_for(self, topic: str) -> int:
        return self._topic_metadata(topic)[1]["partitions"]

    def describe_topic(self, topic: str) -> TopicDescription:
        name, meta = self._topic_metadata(topic)
        parts = []
        for p in range(meta["partitions"]):
            _, snap = self._snapshot(topic, p)
            parts.append(PartitionInfo(p, snap.log_start_offset, snap.next_offset, len(snap.ledgers), snap.size_bytes))
        return TopicDescription(
            self._kafka_name(name), name.full_name, tuple(parts), self.config.topic_config(meta.get("config"))
        )

    def topic_config(self, topic: str) -> dict[str, Any]:
        return self.config.topic_config(self._topic_metadata(topic)[1].get("config"))

    # -- produce ---------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        records: Iterable[Record],
        partition: int | None = None,
        *,
        compression: str | CompressionType = CompressionType.NONE,
        idempotence_key: tuple[str, int] | None = None,
    ) -> list[tuple[int, int, int]]:
        """Produce records; return ``(partition, base_offset, count)`` per partition written.

        With ``partition=None`` a keyed record goes where Kafka's default partitioner puts it
        (murmur2 of the key) and records without a key share one partition, round robin across calls.
        """
        _name, meta = self._topic_metadata(topic)
        n = meta["partitions"]
        codec = CompressionType.from_name(compression) if isinstance(compression, str) else compression
        by_partition: dict[int, list[Record]] = {}
        if partition is not None:
            self._check_partition(topic, partition, meta)
            by_partition[partition] = list(records)
        else:
            with self._lock:
                sticky = self._round_robin % n
                self._round_robin += 1
            for r in records:
                p = partition_for_key(r.key, n) if r.key is not None else sticky
                by_partition.setdefault(p, []).append(r)
        out = []
        for p, recs in sorted(by_partition.items()):
            if not recs:
                continue
            batch = build_record_batch(recs, compression=codec)
            base = self.produce_batches(topic, p, [batch], idempotence_key=idempotence_key, _meta=meta)
            out.append((p, base, len(recs)))
        return out

    def produce_batches(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        *,
        idempotence_key: tuple[str, int] | None = None,
        expected_log_end_offset: int | None = None,
        _meta: dict | None = None,
    ) -> int:
        """Append raw Kafka v2 batches (as in a PRODUCE request) atomically; return the base offset.

        Batches are checked as a Kafka broker checks them (magic, CRC, offset deltas, size, keys
        on compacted topics) and refused whole if any fails; their timestamp type and max
        timestamp are set from the topic's settings and the records, as Kafka's LogValidator
        does. With ``idempotence_key=(writer, sequence)`` a repeated append is applied once and
        answered with the offsets of the first. With ``expected_log_end_offset`` the append
        happens only while the log still ends there (``LogEndMovedError`` otherwise).
        """
        if _meta is None:
            _, _meta = self._topic_metadata(topic)
        self._check_partition(topic, partition, _meta)
        cfg = self.config.topic_config(_meta.get("config"))
        flat = [b for item in batches for b in split_batches(item)]
        if not flat:
            raise InvalidRecordError(f"produce to {topic}-{partition}: no record batches given")
        now = now_ms()
        checked = [
            _validate_produced(f"produce to {topic}-{partition}, batch {i}", b, cfg, now) for i, b in enumerate(flat)
        ]
        ml = self._managed_ledger(topic, partition, _meta)
        try:
            return ml.append(
                checked,
                idempotence_key=idempotence_key,
                broker_timestamp=now,
                expected_next_offset=expected_log_end_offset,
            ).base_offset
        except ManagedLedgerDeletedError:
            self._forget(topic)
            raise TopicNotFoundError(f"topic {topic!r} was deleted") from None

    # -- staged appends: exactly-once sinks ------------------------------------------------

    def stage(self, topic: str, partition: int, path: str) -> StagedPartition:
        """Start a ledger for one partition at ``path`` (under the root) that no reader sees until
        ``append_staged`` appends it. A Spark task stages its output this way."""
        _, meta = self._topic_metadata(topic)
        self._check_partition(topic, partition, meta)
        cfg = self.config.topic_config(meta.get("config"))
        return StagedPartition(topic, partition, LedgerStager(self.fileio, path), cfg)

    def append_staged(
        self, topic: str, partition: int, staged: Sequence[StagedLedger], sink_key: tuple[str, int]
    ) -> AppendResult:
        """Append staged ledgers to a partition in one atomic step that assigns their offsets.
        Idempotent per ``sink_key`` = (writer, batch): a batch already appended is not appended again."""
        ml = self._managed_ledger(topic, partition)
        try:
            return ml.append_ledgers(staged, sink_key)
        except ManagedLedgerDeletedError:
            self._forget(topic)
            raise TopicNotFoundError(f"topic {topic!r} was deleted") from None

    def forget_sink(self, topic: str, partition: int, writer: str) -> None:
        """Drop ``writer``'s record of its last batch in a partition (see ``SinkCommits``)."""
        try:
            self._managed_ledger(topic, partition).forget_sink(writer)
        except (ManagedLedgerDeletedError, TopicNotFoundError):
            pass

    @property
    def sink_commits(self) -> SinkCommits:
        """Exactly-once sink commits: batch records, all or nothing across partitions."""
        return SinkCommits(self)

    def remove_staged(self, writer: str, batch: int) -> None:
        """Delete what a writer staged for a batch, except what its batch record still needs."""
        record = self.sink_commits.record(writer)
        keep = (
            set(record.staged_files)
            if record is not None and record.batch == batch and record.state == COMMITTING
            else set()
        )
        directory = f"{STAGING_DIR}/{writer}/{batch}"
        if not keep:
            self.fileio.delete_tree(directory)
        else:
            for path, _ in self.fileio.walk_files(directory):
                if path not in keep:
                    self.fileio.delete(path)
        self.fileio.delete_dir_if_empty(f"{STAGING_DIR}/{writer}")

    # -- fetch -----------------------------------------------------------------------------

    def _check_offset(self, topic: str, partition: int, snap: Snapshot, offset: int) -> None:
        if not isinstance(offset, int) or not snap.log_start_offset <= offset <= snap.next_offset:
            raise OffsetOutOfRangeError(topic, partition, offset, snap.log_start_offset, snap.next_offset)

    def _read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_records: int | None = None,
        snap: Snapshot | None = None,
    ) -> tuple[Snapshot, list[ReadEntry]]:
        """Entries from ``offset`` on, planned from ``snap`` (else the metadata now). A file can go
        between reading the metadata and reading the file (merged, compacted, or dropped by
        retention once its grace has passed): then the metadata is read again, and the offset is
        either found in its new ledger or out of range."""
        for attempt in range(_READ_ATTEMPTS):
            if snap is None:
                ml, snap = self._snapshot(topic, partition)
            else:
                ml = self._managed_ledger(topic, partition)
            self._check_offset(topic, partition, snap, offset)
            if offset == snap.next_offset:
                return snap, []
            try:
                return snap, ml.read(snap, offset, max_bytes, max_records)
            except FileMissingError:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
                snap = None
        raise AssertionError("unreachable")

    def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> list[bytes]:
        """Raw batches from the one holding ``offset`` on, with absolute ``baseOffset``, as in a
        FETCH response: at least one batch, then more while they fit in ``max_bytes``."""
        return [r.batch_bytes() for r in self._read(topic, partition, offset, max_bytes)[1]]

    def fetch(
        self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int = 50 << 20
    ) -> list[ConsumerRecord]:
        """Records from ``offset`` on (at most ``max_records``); empty at the log end.
        Control records take offsets but are never returned."""
        kafka_topic = self._kafka_name(self.topic_name(topic))
        out: list[ConsumerRecord] = []
        position = offset
        budget = max_bytes
        snap: Snapshot | None = None
        end = None
        while len(out) < max_records and (end is None or position < end) and budget > 0:
            snap, reads = self._read(topic, partition, position, min(budget, 1 << 20), max_records - len(out), snap)
            end = snap.next_offset if end is None else end
            if not reads:
                break
            for read in reads:
                budget -= read.entry.size
                batch = read.record_batch()
                position = batch.last_offset + 1
                if batch.is_control:
                    continue
                ts_type = batch.timestamp_type
                for r in batch.records():
                    if r.offset >= offset and len(out) < max_records:
                        out.append(
                            ConsumerRecord(
                                kafka_topic, partition, r.offset, r.timestamp_ms, ts_type, r.key, r.value, r.headers
                            )
                        )
                if len(out) >= max_records:
                    break
        return out

    def list_offsets(self, topic: str, partition: int, spec: OffsetSpec) -> int:
        """``"earliest"`` (-2): the log start offset; ``"latest"`` (-1): the next offset to be
        written; a timestamp in ms: the first offset whose timestamp is at or after it, or -1."""
        ml, snap = self._snapshot(topic, partition)
        if spec in ("earliest", EARLIEST_TIMESTAMP):
            return snap.log_start_offset
        if spec in ("latest", LATEST_TIMESTAMP):
            return snap.next_offset
        if not isinstance(spec, int) or isinstance(spec, bool) or spec < 0:
            raise ValueError(
                f"list_offsets for {topic}-{partition}: expected 'earliest', 'latest' or a timestamp in ms, got {spec!r}"
            )
        found = ml.entry_for_timestamp(snap, spec)
        if found is None:
            return -1
        # Batches stored by earlier versions may claim a max timestamp no record has: then the
        # answer lies further on. Batches stored now carry their records' true maximum.
        entries = [found]
        while entries:
            for entry in entries:
                batch = entry.record_batch()
                for r in [] if batch.is_control else batch.records():
                    if r.timestamp_ms >= spec:
                        return r.offset
                position = batch.last_offset + 1
            if position >= snap.next_offset:
                break
            snap, entries = self._read(topic, partition, position, 1 << 20, snap=snap)
        return -1

    # -- housekeeping ----------------------------------------------------------------------

    def compact(self, topic: str) -> None:
        """Compact every partition of a topic whose ``cleanup.policy`` includes compact: keep the
        latest record per key, drop tombstones older than ``delete.retention.ms``; offsets stay."""
        for p in range(self.partitions_for(topic)):
            self.compact_partition(topic, p)

    def compact_partition(self, topic: str, partition: int) -> int | None:
        policy = self.topic_config(topic)["cleanup.policy"]
        if "compact" not in policy:
            raise ConfigError(f"topic {topic!r} has cleanup.policy={policy}; compaction needs compact")
        return self._managed_ledger(topic, partition).compact()

    # -- consumer groups (OFFSET_COMMIT, OFFSET_FETCH and group administration) -------------

    @property
    def groups(self) -> GroupCoordinator:
        with self._lock:  # one coordinator per Broker, whichever thread asks first
            return self._coordinator()

    def _coordinator(self) -> GroupCoordinator:
        if self._groups is None:
            c = self.config
            offsets_topic = f"{c['kafkaMetadataTenant']}/{c['kafkaMetadataNamespace']}/__consumer_offsets"
            self._groups = GroupCoordinator(
                self,
                offsets_topic,
                c["offsetsTopicNumPartitions"],
                retention_ms=c["offsetsRetentionMinutes"] * 60_000,
                metadata_max_size=c["offsetMetadataMaxSize"],
                check_interval_ms=c["offsetsRetentionCheckIntervalMs"],
            )
        return self._groups

    def _check_topic_partitions(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
        """Map (topic, partition) as given to (Kafka name, partition), refusing unknown ones."""
        out = {}
        metas: dict[str, dict] = {}
        for topic, p in partitions:
            if topic not in metas:
                metas[topic] = self._topic_metadata(topic)[1]
            self._check_partition(topic, p, metas[topic])
            out[(topic, p)] = (self._kafka_name(self.topic_name(topic)), p)
        return out

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
        *,
        expire_timestamp_ms: int | None = None,
    ) -> None:
        """Commit a group's offsets, all in one entry: all or nothing. The topics and partitions
        must exist; metadata longer than ``offsetMetadataMaxSize`` is refused."""
        names = self._check_topic_partitions(offsets)
        self.groups.commit(group, {names[tp]: o for tp, o in offsets.items()}, expire_timestamp_ms=expire_timestamp_ms)

    def fetch_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """A group's committed offsets; offset -1 for a partition asked for that has none."""
        if partitions is None:
            return self.groups.fetch(group)
        names = {(self._kafka_name(self.topic_name(t)), p): (t, p) for t, p in partitions}
        return {names[tp]: o for tp, o in self.groups.fetch(group, names).items()}

    def list_groups(self) -> list[str]:
        return self.groups.list_groups()

    def delete_group(self, group: str) -> None:
        if not self.groups.delete_group(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Delete some of a group's offsets; returns the partitions that had one."""
        names = {(self._kafka_name(self.topic_name(t)), p): (t, p) for t, p in partitions}
        if not self.groups.fetch(group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")
        return [names[tp] for tp in self.groups.delete_offsets(group, names)]

    def expire_offsets(self) -> int:
        """Expire offsets past ``offsetsRetentionMinutes`` now, instead of on the next check."""
        return self.groups.expire()

    def _partition_logs(self, topic: str | None) -> Iterator[tuple[str, TopicName, int, ManagedLedger]]:
        """(topic, name, partition, log) of every partition of ``topic`` or of the store. Topics
        deleted meanwhile are skipped; deletions left half done are finished first."""
        if topic is None:
            for name, meta in self._pending_deletions():
                self._finish_deletion(name, meta)
        for t in [topic] if topic is not None else self.list_topics(include_internal=True):
            try:
                name, meta = self._topic_metadata(t)
            except TopicNotFoundError:
                if topic is not None:
                    raise
                continue
            for p in range(meta["partitions"]):
                yield t, name, p, self._managed_ledger(t, p, meta)

    def enforce_retention(self, topic: str | None = None) -> None:
        """Apply retention.ms / retention.bytes now and delete files past their grace period.
        Every partition is tried; a damaged one does not stop the others (the first error is
        raised at the end)."""
        report = MaintenanceReport()
        for t, _, p, ml in self._partition_logs(topic):
            with report.item(f"{t}-{p}"):
                ml.enforce_retention()
        report.raise_first()

    def maintenance(
        self, topic: str | None = None, *, target_ledger_bytes: int = 64 << 20, orphan_grace_ms: int = 3_600_000
    ) -> MaintenanceReport:
        """Keep a long-running store tidy: merge runs of small ledgers (no offset changes), apply
        retention, and delete files nothing refers to once older than ``orphan_grace_ms`` (staged
        output of crashed Spark tasks, ledgers of appends whose commit never happened). A damaged
        partition is reported in ``errors`` and the others are still done."""
        if orphan_grace_ms < 0:
            raise ConfigError(f"orphan grace must be 0 or more, got {orphan_grace_ms} ms")
        if target_ledger_bytes < 1:
            raise ConfigError(f"target ledger size must be at least 1 byte, got {target_ledger_bytes}")
        report = MaintenanceReport()
        sinks = self.sink_commits
        now = now_ms()
        for record in sinks.pending():  # batches whose commit was interrupted: roll them forward
            if now - record.updated_ms > SINK_LEASE_MS:
                with report.item(f"sink batch {record.batch} of {record.writer}"):
                    sinks.complete(record)
        pending = sinks.pending()
        for t, name, p, ml in self._partition_logs(topic):
            with report.item(f"{t}-{p}"):
                report.ledgers_merged += ml.merge_ledgers(target_ledger_bytes)
                ml.enforce_retention()
                files = self.fileio.walk_files(name.data_dir(p))
                # A recorded batch's ledgers may sit in the partition's directory, moved there
                # by a commit that has not appended them yet: not orphans.
                moving = {ml.ledger_path(l.ledger_id) for r in pending for l in r.partitions.get((t, p), ())}
                report.files_removed += ml.remove_orphans([f for f in files if f[0] not in moving], orphan_grace_ms)
        if topic is None:
            report.files_removed += self._remove_dead_staging(
                orphan_grace_ms, {f for r in pending for f in r.staged_files}
            )
            sinks.expire(now - self.config["transactional.id.expiration.ms"])
        return report

    def _remove_dead_staging(self, grace_ms: int, recorded: set) -> list[str]:
        """Staged files of jobs that are gone: no task of theirs has beaten its heart within
        ``SINK_LEASE_MS``, no batch record needs them, and they are older than ``grace_ms``."""
        now = now_ms()
        batches: dict[str, list[tuple[str, float]]] = {}
        for path, mtime in self.fileio.walk_files(STAGING_DIR):
            batches.setdefault("/".join(path.split("/")[:3]), []).append((path, mtime))
        removed = []
        for files in batches.values():
            if now - max(m for _, m in files) * 1000 < SINK_LEASE_MS:
                continue  # a running job's tasks are writing or beating their hearts
            for path, mtime in files:
                if path not in recorded and now - mtime * 1000 >= grace_ms:
                    self.fileio.delete(path)
                    removed.append(path)
        return removed

    # -- checking and repair ---------------------------------------------------------------

    def verify(self, topic: str | None = None) -> dict[str, list[str]]:
        """Check every partition (of ``topic``, or of the store with internal topics): ledgers
        against their metadata and every entry's checksums. Problems by partition; empty if none."""
        out: dict[str, list[str]] = {}
        for t, _, p, ml in self._partition_logs(topic):
            try:
                problems = ml.check()
            except KopError as e:
                problems = [str(e)]
            if problems:
                out[f"{t}-{p}"] = problems
        return out

    def repair(self, topic: str | None = None, dry_run: bool = False) -> RepairReport:
        """Repair a store damaged by an earlier version or by failing hardware: unreadable
        metadata versions give way to the last whole one, and each damaged partition is truncated
        at its first damaged entry (``ManagedLedger.repair``). The report names every offset
        dropped and every group whose committed offset now lies past its log end."""
        report = RepairReport()
        for prefix in ("topics", "managed-ledgers", "sinks"):
            for key in self.store.list_keys(prefix):
                report.metadata_versions_removed += self.store.discard_unreadable(key, dry_run=dry_run)
        if dry_run and report.metadata_versions_removed:
            return report  # the logs can be judged once their metadata reads again
        logs = list(self._partition_logs(topic))
        # The offsets topic first, so that the groups read afterwards are read from a sound log.
        logs.sort(key=lambda item: item[0] != self.groups.topic)
        for t, _, p, ml in logs:
            dropped = ml.repair(dry_run)
            if dropped is not None:
                report.truncated[(self._kafka_name(self.topic_name(t)), p)] = dropped
        if report.truncated:
            for group in self.list_groups():
                for tp, o in self.fetch_offsets(group).items():
                    if tp in report.truncated and o.offset > report.truncated[tp][0]:
                        report.groups_past_end.append((group, tp[0], tp[1], o.offset))
        return report


STAGING_DIR = "_staging"  # where sinks stage ledgers that no reader sees yet
SINK_HEARTBEAT_MS = 10_000  # a task writing staged ledgers touches its directory this often
SINK_LEASE_MS = 60_000  # staged output with no heartbeat this long belongs to a job that is gone
_READ_ATTEMPTS = 5


@dataclass
class MaintenanceReport:
    ledgers_merged: int = 0
    files_removed: list[str] = field(default_factory=list)
    errors: list[tuple[str, KopError]] = field(default_factory=list)  # (topic-partition or sink batch, what went wrong)

    @contextlib.contextmanager
    def item(self, what: str) -> Iterator[None]:
        """Work on one item (a partition, a sink batch): its failure is recorded, the next is done."""
        try:
            yield
        except (TopicNotFoundError, ManagedLedgerDeletedError):
            pass  # deleted meanwhile: nothing left to tidy
        except KopError as e:
            log.error("%s: %s", what, e)
            self.errors.append((what, e))

    def raise_first(self) -> None:
        if self.errors:
            raise self.errors[0][1]


@dataclass
class RepairReport:
    metadata_versions_removed: list[str] = field(default_factory=list)
    truncated: dict[tuple[str, int], tuple[int, int]] = field(
        default_factory=dict
    )  # -> offsets [new end, old end) dropped
    groups_past_end: list[tuple[str, str, int, int]] = field(default_factory=list)  # group, topic, partition, offset


class StagedPartition:
    """A partition's share of a task's output, written to a staged ledger (see ``Broker.stage``)."""

    def __init__(self, topic: str, partition: int, stager: LedgerStager, topic_config: Mapping[str, Any]):
        self.topic = topic
        self.partition = partition
        self._stager = stager
        self._max_bytes = topic_config["max.message.bytes"]
        self._log_append_time = topic_config["message.timestamp.type"] == "LogAppendTime"
        self._compacted = "compact" in topic_config["cleanup.policy"]

    def append(self, batches: Sequence[bytes]) -> None:
        """Stage batches as the ledger's next entries."""
        for batch in batches:
            if len(batch) > self._max_bytes:
                raise RecordTooLargeError(
                    f"{self.topic}-{self.partition}: batch of {len(batch)} bytes is larger "
                    f"than max.message.bytes={self._max_bytes}"
                )
            if self._compacted:
                _check_keys(f"{self.topic}-{self.partition}", RecordBatch(batch).records())
        now = now_ms()
        if self._log_append_time:
            batches = [with_log_append_time(b, now) for b in batches]
        self._stager.append(batches, now)

    def finish(self) -> StagedLedger:
        return self._stager.finish()

    def discard(self) -> None:
        self._stager.discard()


def _standing(topic_metadata: dict | None) -> bool:
    """A topic's key names a topic that exists: written, and not being deleted."""
    return topic_metadata is not None and not topic_metadata.get("deleting")


def _check_keys(where: str, records: Sequence[BatchRecord]) -> None:
    if any(r.key is None for r in records):
        raise InvalidRecordError(f"{where}: Compacted topic cannot accept message without key")


def _validate_produced(where: str, b, topic_config: Mapping[str, Any], now: int) -> bytes:
    """What Kafka's LogValidator checks of a produced v2 batch, and the batch as it is stored:
    timestamp type from the topic, max timestamp from the records (or the append time)."""
    batch = RecordBatch(b)
    max_bytes = topic_config["max.message.bytes"]
    if len(b) > max_bytes:
        raise RecordTooLargeError(f"{where}: batch of {len(b)} bytes is larger than max.message.bytes={max_bytes}")
    if not batch.is_valid():
        raise CorruptRecordError(f"{where}: record batch fails its CRC-32C")
    if batch.is_control:
        raise InvalidRecordError(f"{where}: clients may not produce control batches")
    if batch.record_count < 1 or batch.last_offset_delta != batch.record_count - 1:
        raise InvalidRecordError(f"{where}: {batch.record_count} records but lastOffsetDelta {batch.last_offset_delta}")
    # The records' own times, whatever flag and maximum the header claims.
    create_time = with_timestamps(b, TimestampType.CREATE_TIME, batch.max_timestamp)
    records = RecordBatch(create_time).records()
    for i, r in enumerate(records):
        if r.offset - batch.base_offset != i:
            raise InvalidRecordError(
                f"{where}: record {i} has offset delta {r.offset - batch.base_offset}, expected {i}"
            )
    if "compact" in topic_config["cleanup.policy"]:
        _check_keys(where, records)
    if topic_config["message.timestamp.type"] == "LogAppendTime":
        return with_log_append_time(b, now)
    return with_timestamps(create_time, TimestampType.CREATE_TIME, max(r.timestamp_ms for r in records))
