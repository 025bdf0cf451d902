"""The partition logs a Broker has open, one managed ledger per partition, shared by its threads
(Kafka's LogManager): opened with the broker's and the topic's settings, sealed on close."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection
from typing import Any

from .. import layout
from ..clock import Clock
from ..config import Config
from ..storage.fileio import FileIO
from ..storage.ledger import IOStats
from ..storage.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ..storage.metadata_store import MetadataStore
from ..topic_name import TopicName

# Set by TopicAdmin in the topic metadata it reads, never stored: when it was read (``ManagedLedgerConfig.settings_read_ms``).
SETTINGS_READ_MS = "_read_ms"


class LogManager:
    def __init__(
        self, store: MetadataStore, fileio: FileIO, config: Config, writer_id: str, stats: IOStats, clock: Clock
    ):
        self._store = store
        self._fileio = fileio
        self._config = config
        self._writer_id = writer_id
        self._stats = stats
        self._clock = clock
        self._logs: dict[str, dict[int, ManagedLedger]] = {}  # by topic (full name), by partition
        self._overrides: dict[tuple[str, int], dict[str, Any]] = {}  # the topic settings each log has
        self._lock = threading.Lock()

    def get(self, name: TopicName, partition: int, topic_meta: dict[str, Any]) -> ManagedLedger:
        """The open log of a partition, opened on first use, and given the topic's settings in
        ``topic_meta`` when they changed since (``kop topics alter``, AlterConfigs)."""
        key = (name.full_name, partition)
        ml = self.cached(name, partition)
        if ml is None:
            ml = self.open(name, partition, topic_meta)
            with self._lock:
                kept = self._logs.setdefault(name.full_name, {}).setdefault(partition, ml)
                if kept is ml:
                    self._overrides[key] = topic_meta.get("config") or {}
                return kept
        overrides = topic_meta.get("config") or {}
        if self._overrides.get(key, {}) != overrides:
            # read afresh by every use: a retention pass, a merge, a compaction
            ml.config = self._ledger_config(topic_meta)
            self._overrides[key] = overrides
        elif ml.config.settings_read_ms != topic_meta.get(SETTINGS_READ_MS):
            ml.config = dataclasses.replace(ml.config, settings_read_ms=topic_meta.get(SETTINGS_READ_MS))
        return ml

    def cached(self, name: TopicName, partition: int) -> ManagedLedger | None:
        return self._logs.get(name.full_name, {}).get(partition)

    def cached_of(self, name: TopicName) -> list[ManagedLedger]:
        """The topic's open logs."""
        with self._lock:
            return list(self._logs.get(name.full_name, {}).values())

    def open(self, name: TopicName, partition: int, topic_meta: dict[str, Any]) -> ManagedLedger:
        """A new instance on a partition's log, not kept (for a topic being deleted)."""
        c = self._config
        return ManagedLedger(
            name=f"{name.kafka_name(c['kafkaTenant'], c['kafkaNamespace'])}-{partition}",
            key=layout.managed_ledger_key(name, partition),
            data_dir=layout.data_dir(name, partition),
            store=self._store,
            fileio=self._fileio,
            config=self._ledger_config(topic_meta),
            writer_id=self._writer_id,
            stats=self._stats,
            clock=self._clock,
        )

    def _ledger_config(self, topic_meta: dict[str, Any]) -> ManagedLedgerConfig:
        c = self._config
        topic = c.topic_config(topic_meta.get("config"))
        return ManagedLedgerConfig(
            max_entries_per_ledger=c["managedLedgerMaxEntriesPerLedger"],
            max_bytes_per_ledger=min(c["managedLedgerMaxSizePerLedgerMbytes"] << 20, topic["segment.bytes"]),
            max_ledger_age_ms=min(c["managedLedgerMaxLedgerRolloverTimeMinutes"] * 60_000, _segment_ms(topic)),
            producer_expiration_ms=c["producer.id.expiration.ms"],
            max_producers=c["kafkaMaxProducersPerPartition"],
            retention_ms=topic["retention.ms"],
            retention_bytes=topic["retention.bytes"],
            file_delete_delay_ms=topic["file.delete.delay.ms"],
            delete_policy="delete" in topic["cleanup.policy"],
            delete_retention_ms=topic["delete.retention.ms"],
            compact_policy="compact" in topic["cleanup.policy"],
            min_cleanable_dirty_ratio=topic["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=topic["min.compaction.lag.ms"],
            max_compaction_lag_ms=topic["max.compaction.lag.ms"],
            dedupe_buffer_bytes=c["log.cleaner.dedupe.buffer.size"],
            target_ledger_bytes=c["maintenanceTargetLedgerMbytes"] << 20,
            merge_in_passing=c["managedLedgerMergeInPassing"],
            sink_expiration_ms=c["transactional.id.expiration.ms"],
            settings_read_ms=topic_meta.get(SETTINGS_READ_MS),
        )

    def forget(self, name: TopicName) -> None:
        """Close and drop the open logs of a deleted topic. A writer's file stayed open, holding
        the deleted file's disk space, for as long as the process ran; closed on a deleted log,
        it is let go, nothing sealed."""
        with self._lock:
            forgotten = self._logs.pop(name.full_name, {})
            for partition in forgotten:
                self._overrides.pop((name.full_name, partition), None)
        for ml in forgotten.values():
            ml.close()

    def release_gone(self, listed: Collection[str], stands: Callable[[TopicName], bool]) -> None:
        """``forget`` the topics whose logs are open here that are not ``listed`` (full names) and
        do not stand: those another process deleted."""
        with self._lock:
            others = set(self._logs) - set(listed)
        for full in others:
            name = TopicName.parse(full)
            if not stands(name):  # looked at again: it may have been made anew since the listing
                self.forget(name)

    def close(self) -> None:
        """Seal this broker's open ledgers, so readers get entry tables and no one must fence them."""
        with self._lock:
            logs, self._logs = [ml for by_partition in self._logs.values() for ml in by_partition.values()], {}
        for ml in logs:
            ml.close()


def _segment_ms(topic: dict[str, Any]) -> int:
    # Kafka's LogConfig.maxSegmentMs: a compacted topic rolls its active segment by
    # max.compaction.lag.ms too, or the records in it would wait for segment.ms to be compacted.
    if "compact" in topic["cleanup.policy"]:
        return int(min(topic["segment.ms"], topic["max.compaction.lag.ms"]))
    return int(topic["segment.ms"])
