"""Housekeeping of a store: retention, compaction, merging small ledgers, orphaned files,
verification and repair. Every partition is tried; a damaged one is reported and does not stop
the others."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from .. import layout
from ..errors import (
    ConfigError,
    HousekeepingStoppedError,
    KopError,
    LogCleaningError,
    ManagedLedgerDeletedError,
    TopicNotFoundError,
)
from ..storage import log_recovery
from ..storage.orphans import remove_orphans
from ..storage.read_plan import LedgerRecord, PartitionView
from ..topic_name import TopicPartition
from .partition_views import PartitionViews
from .sink_commits import SINK_LEASE_MS
from .sink_traces import FinishedBatches, forget_finished

if TYPE_CHECKING:
    from ..storage.managed_ledger import ManagedLedger
    from ..topic_name import TopicName
    from .broker import Broker

log = logging.getLogger(__name__)


@dataclass
class MaintenanceReport:
    ledgers_merged: int = 0
    partitions_compacted: list[str] = field(default_factory=list)
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
    truncated: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # -> [new end, old end) dropped
    groups_past_end: list[tuple[str, str, int, int]] = field(default_factory=list)  # group, topic, partition, offset


class _StagedBatch(NamedTuple):
    """A batch's directory under ``_staging/``."""

    writer: str
    files: list[str]
    # If its job is gone (none of its files written or touched within SINK_LEASE_MS: tasks beat
    # their hearts there), its files older than the grace period, which may go; else none.
    expired: list[str]


def _partition_logs(
    broker: Broker, topic: str | None, stop: threading.Event | None
) -> Iterator[tuple[str, TopicName, int, ManagedLedger]]:
    """Every partition's log, until ``stop`` is set (then ``HousekeepingStoppedError``)."""
    return _until_stopped(broker.admin.partition_logs(topic), stop)


def _until_stopped(
    logs: Iterable[tuple[str, TopicName, int, ManagedLedger]], stop: threading.Event | None
) -> Iterator[tuple[str, TopicName, int, ManagedLedger]]:
    for item in logs:
        if stop is not None and stop.is_set():
            raise HousekeepingStoppedError(f"housekeeping stopped before {item[0]}-{item[2]}")
        yield item


def _ledger_ids(paths: Iterable[str]) -> set[int]:
    """The ledgers staged files are, or name (markers of ledgers staged in partitions' directories)."""
    return {i for i in map(layout.staged_ledger_id, paths) if i is not None}


class Housekeeper:
    """A store's housekeeping. Each pass stops soon after its ``stop`` is set (a server's shutdown),
    with ``HousekeepingStoppedError``: what it was rewriting is abandoned, nothing left half done."""

    def __init__(self, broker: Broker):
        self._broker = broker
        self._uncleanable: set[str] = set()  # partitions a compaction failed on unexpectedly
        self._views = PartitionViews(broker.admin, broker.store)

    def _clean(
        self,
        ml: ManagedLedger,
        partition: str,
        report: MaintenanceReport,
        stop: threading.Event | None,
        view: PartitionView | None = None,
    ) -> None:
        if not ml.config.compact_policy or partition in self._uncleanable:
            return
        try:
            kept = ml.cleaner.clean(stop, view)
        except (KopError, HousekeepingStoppedError, ManagedLedgerDeletedError):
            raise
        except Exception as e:
            # Tried again at every pass, it would fail again, maybe after minutes of work: Kafka's
            # cleaner marks such a partition uncleanable, and so does this one.
            self._uncleanable.add(partition)
            log.exception("%s: compaction failed; not compacted again until the server restarts", partition)
            raise LogCleaningError(f"compaction failed ({e!r}); not compacted again until a restart") from e
        if kept is not None:
            log.info("%s: compacted, %d records kept", partition, kept)
            report.partitions_compacted.append(partition)

    def compact_partition(self, topic: str, partition: int) -> int | None:
        admin = self._broker.admin
        meta = admin.metadata(topic)[1]
        policy = self._broker.config.topic_config(meta.get("config"))["cleanup.policy"]
        if "compact" not in policy:
            raise ConfigError(f"topic {topic!r} has cleanup.policy={policy}; compaction needs compact")
        return admin.log(topic, partition, meta).cleaner.compact()

    def enforce_retention(self, topic: str | None, stop: threading.Event | None = None) -> None:
        report = MaintenanceReport()
        b = self._broker
        most, finished = b.config["maxExactlyOnceWritersPerPartition"], FinishedBatches(b.sink_commits)
        logs = list(b.admin.partition_logs(topic))
        views = self._views_of(logs)
        for t, _, p, ml in _until_stopped(logs, stop):
            with report.item(f"{t}-{p}"):
                ml.enforce_retention(views.get((t, p)))
                forget_finished(ml, most, finished, b.clock.now_ms())
        report.raise_first()

    def clean_logs(self, topic: str | None, stop: threading.Event | None = None) -> MaintenanceReport:
        report = MaintenanceReport()
        logs = list(self._broker.admin.partition_logs(topic))
        views = self._views_of([log for log in logs if log[3].config.compact_policy])
        for t, _, p, ml in _until_stopped(logs, stop):
            with report.item(f"{t}-{p}"):
                self._clean(ml, f"{t}-{p}", report, stop, views.get((t, p)))
        return report

    def _views_of(self, logs: list[tuple[str, TopicName, int, ManagedLedger]]) -> dict[TopicPartition, PartitionView]:
        """The partitions' views, probed together: a partition read alone is a GET on an object
        store, and the log cleaner's pass every 15 s read each of the offsets topic's 50, and a
        retention pass each partition of the store."""
        wanted = [(t, p) for t, _, p, _ in logs]
        views = zip(wanted, self._views.each(wanted), strict=True)
        return {tp: view for tp, view in views if isinstance(view, PartitionView)}

    def maintenance(
        self,
        topic: str | None,
        target_ledger_bytes: int | None = None,
        orphan_grace_ms: int | None = None,
        stop: threading.Event | None = None,
    ) -> MaintenanceReport:
        c = self._broker.config
        if target_ledger_bytes is None:
            target_ledger_bytes = c["maintenanceTargetLedgerMbytes"] << 20
        if orphan_grace_ms is None:
            orphan_grace_ms = c["maintenanceOrphanGraceMinutes"] * 60_000
        if orphan_grace_ms < 0:
            raise ConfigError(f"orphan grace must be 0 or more, got {orphan_grace_ms} ms")
        if target_ledger_bytes < 1:
            raise ConfigError(f"target ledger size must be at least 1 byte, got {target_ledger_bytes}")
        b = self._broker
        report = MaintenanceReport()
        sinks = b.sink_commits
        now = b.clock.now_ms()
        for record in sinks.pending():  # batches whose commit was interrupted: roll them forward
            if now - record.updated_ms > SINK_LEASE_MS:
                with report.item(f"sink batch {record.batch} of {record.writer}"):
                    sinks.complete(record)
        pending = sinks.pending()
        listed = []
        for t, name, p, ml in _partition_logs(b, topic, stop):
            with report.item(f"{t}-{p}"):
                self._clean(ml, f"{t}-{p}", report, stop)
                report.ledgers_merged += ml.cleaner.merge_ledgers(target_ledger_bytes, stop)
                ml.enforce_retention()
                listed.append((t, p, ml, b.fileio.walk_files(layout.data_dir(name, p))))
        # Listed after the partitions: a task names a ledger it stages there before it creates it.
        staging = self._staging_by_batch(now, orphan_grace_ms)
        doomed = self._condemn_dead_staging(staging, report)
        staged = _ledger_ids(path for batch in staging for path in batch.files) - doomed
        for t, p, ml, files in listed:
            with report.item(f"{t}-{p}"):
                # A recorded batch's ledgers may sit in the partition's directory, moved there
                # by a commit that has not appended them yet: not orphans.
                moving = {l.ledger_id for r in pending for l in r.partitions.get((t, p), ())}
                keep = {ml.ledger_path(i) for i in moving | staged}
                report.files_removed += remove_orphans(ml, [f for f in files if f[0] not in keep], orphan_grace_ms)
        if topic is None:
            report.files_removed += self._remove_dead_staging(staging, doomed)
            sinks.expire(now - b.config["transactional.id.expiration.ms"])
            b.transactions.expire(now - b.config["transactional.id.expiration.ms"])
        return report

    def _staging_by_batch(self, now: int, grace_ms: int) -> list[_StagedBatch]:
        """Each staged batch's files, and those that may go if its job is gone."""
        # Read first: a transaction that begins after it has only fresh files when they are listed.
        transactions = self._broker.transactions.staging_in_use()
        batches: dict[str, list[tuple[str, float]]] = {}
        for path, mtime in self._broker.fileio.walk_files(layout.STAGING_DIR):
            batches.setdefault(layout.staging_batch_of(path), []).append((path, mtime))
        out = []
        for directory, files in batches.items():
            gone = now - max(m for _, m in files) * 1000 >= SINK_LEASE_MS and directory not in transactions
            expired = [path for path, mtime in files if gone and now - mtime * 1000 >= grace_ms]
            out.append(_StagedBatch(layout.staging_writer_of(directory), [path for path, _ in files], expired))
        return out

    def _condemn_dead_staging(self, staging: list[_StagedBatch], report: MaintenanceReport) -> set[int]:
        """The expired ledgers of jobs that are gone that may be deleted: condemned in their writers'
        keys, so that a driver that was only slow cannot record them."""
        dead: dict[str, set[int]] = {}
        for batch in staging:
            dead.setdefault(batch.writer, set()).update(_ledger_ids(batch.expired))
        doomed: set[int] = set()
        for writer, ids in dead.items():
            if ids:
                with report.item(f"staged output of sink writer {writer}"):
                    doomed |= self._broker.sink_commits.condemn(writer, ids)
        return doomed

    def _remove_dead_staging(self, staging: list[_StagedBatch], doomed: set[int]) -> list[str]:
        """The expired files of jobs that are gone: of their ledgers (or markers), those condemned."""
        removed = []
        for batch in staging:
            for path in batch.expired:
                ledger = layout.staged_ledger_id(path)
                if ledger is None or ledger in doomed:
                    self._broker.fileio.delete(path)
                    removed.append(path)
        return removed

    def locate_ledger(self, file: str) -> tuple[str, LedgerRecord] | None:
        """The managed ledger (its metadata key) that refers to ``file``, and its record of it."""
        admin = self._broker.admin
        for topic in admin.list_topics(include_internal=True):
            for p in range(admin.metadata(topic)[1]["partitions"]):
                ml, view = admin.view(topic, p)
                found = next((l for l in view.ledgers if l.file == file), None)
                if found is not None:
                    return ml.key, found
        return None

    def verify(self, topic: str | None) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t, _, p, ml in self._broker.admin.partition_logs(topic):
            try:
                problems = log_recovery.check(ml)
            except ManagedLedgerDeletedError:
                continue  # its topic was deleted since the listing
            except KopError as e:
                problems = [str(e)]
            if problems:
                out[f"{t}-{p}"] = problems
        return out

    def repair(self, topic: str | None, dry_run: bool) -> RepairReport:
        b = self._broker
        report = RepairReport()
        for prefix in layout.METADATA_PREFIXES:
            for key in b.store.list_keys(prefix):
                report.metadata_versions_removed += b.store.discard_unreadable(key, dry_run=dry_run)
        if dry_run and report.metadata_versions_removed:
            return report  # the logs can be judged once their metadata reads again
        logs = list(b.admin.partition_logs(topic))
        # The offsets topic first, so that the groups read afterwards are read from a sound log.
        logs.sort(key=lambda item: item[0] != b.groups.topic)
        for _, name, p, ml in logs:
            dropped = log_recovery.repair(ml, dry_run)
            if dropped is not None:
                report.truncated[(b.admin.kafka_name(name), p)] = dropped
        if report.truncated:
            for group in b.list_groups():
                for tp, o in b.fetch_offsets(group).items():
                    if tp in report.truncated and o.offset > report.truncated[tp][0]:
                        report.groups_past_end.append((group, tp[0], tp[1], o.offset))
        return report
