"""The group coordinator: consumer offsets kept in the offsets topic, served from memory.

As in Kafka (KAFKA-1000 and the offset management API), a group's offsets live in one partition
of a compacted topic, ``abs(hash(group)) % partitions``, keyed by (group, topic, partition). The
coordinator keeps an in-memory table per offsets partition, loaded from it and kept current by
reading its tail before every request, so a commit in one process is seen by a fetch in another.
All offsets of one commit are one record batch, hence one entry: all or nothing. Deletions
decided from the table (expiry, deleting a group or some offsets) are appended only while the
partition still ends where the table was read up to, so a commit racing them is never erased:
Kafka makes both decisions under the group's lock, which other processes do not share here.

The coordinator sits below the Broker and reaches the offsets topic through the narrow
``OffsetsLog`` interface, which the Broker gives it as the one writer its internal topic takes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (
    CorruptRecordError,
    KopError,
    LogEndMovedError,
    OffsetMetadataTooLargeError,
    TopicAlreadyExistsError,
)
from ..record import Record, RecordBatch, build_record_batch
from ..retry import retry_cas
from ..topic_name import TopicPartition
from .offsets_topic import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    partition_for_group,
)

_log = logging.getLogger(__name__)
_DECISION_ATTEMPTS = 100
# Only the coordinator reads the offsets topic, and its reads find merged or compacted-away
# ledgers' offsets again in the current metadata, so their files need little grace; a short one
# keeps the trash (and with it the metadata every commit rewrites) small when commits are many.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "file.delete.delay.ms": 1000}


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1


NO_OFFSET = OffsetAndMetadata(-1, "", -1)


class LogRange(Protocol):
    """Where a partition's log starts and ends, read together (``Broker.view``)."""

    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...


class OffsetsLog(Protocol):
    def create_topic(self, topic: str, partitions: int | None = None, config: Mapping | None = None) -> None: ...
    def partitions_for(self, topic: str) -> int: ...
    def produce_batches(
        self, topic: str, partition: int, batches: Sequence[bytes], *, expected_log_end_offset: int | None = None
    ) -> int: ...
    def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> list[bytes]: ...
    def view(self, topic: str, partition: int) -> LogRange: ...
    def views(self, topic: str, partitions: Sequence[int]) -> Sequence[LogRange | Exception]:
        """Each partition's ``view`` or why not, read together where the store can."""
        ...

    def compact_partition(self, topic: str, partition: int) -> int | None: ...


@dataclass
class GroupStats:
    """What loading cost; tests assert on it."""

    records_loaded: int = 0
    compactions: int = 0


@dataclass
class _Group:
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    metadata: GroupMetadataValue | None = None

    @property
    def last_commit_ms(self) -> int:
        return max((o.commit_timestamp_ms for o in self.offsets.values()), default=-1)


@dataclass
class _Partition:
    next_offset: int = 0
    groups: dict[str, _Group] = field(default_factory=dict)
    dirty: int = 0  # records read since the table was last compacted

    def live_keys(self) -> int:
        return sum(len(g.offsets) + (g.metadata is not None) for g in self.groups.values())


class GroupCoordinator:
    def __init__(
        self,
        log: OffsetsLog,
        topic: str,
        num_partitions: int,
        *,
        retention_ms: int,
        metadata_max_size: int,
        check_interval_ms: int,
        compaction_threshold: int = 200,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self._clock = clock
        self._log = log
        self.topic = topic
        self._configured_partitions = num_partitions
        self._num_partitions: int | None = None
        self.retention_ms = retention_ms
        self.metadata_max_size = metadata_max_size
        self.check_interval_ms = check_interval_ms
        self.compaction_threshold = compaction_threshold
        self.stats = GroupStats()
        self._partitions: dict[int, _Partition] = {}
        self._last_expiry_check = self._clock.now_ms()
        self._lock = threading.RLock()  # one coordinator may serve several threads

    # -- the offsets topic ------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        """Partitions of the offsets topic, which is created on first use."""
        with self._lock:
            if self._num_partitions is None:
                try:
                    self._log.create_topic(self.topic, self._configured_partitions, OFFSETS_TOPIC_CONFIG)
                except TopicAlreadyExistsError:
                    pass
                self._num_partitions = self._log.partitions_for(self.topic)
            return self._num_partitions

    def partition_for(self, group: str) -> int:
        return partition_for_group(group, self.num_partitions)

    def _load(self, p: int, log: LogRange | Exception | None = None) -> _Partition:
        """The partition's table, brought up to the log end (as ``log`` says, if given)."""
        state = self._partitions.setdefault(p, _Partition())
        if log is None:
            log = self._log.view(self.topic, p)
        elif isinstance(log, Exception):
            raise log
        start, end = log.log_start_offset, log.log_end_offset
        if state.next_offset < start:
            state.next_offset = start
        while state.next_offset < end:
            batches = self._log.fetch_batches(self.topic, p, state.next_offset, 4 << 20)
            if not batches:  # the rest up to the end was emptied by compaction
                state.next_offset = end
                break
            for raw in batches:
                batch = RecordBatch(raw)
                if not batch.is_control:
                    for r in batch.records():
                        if r.offset >= state.next_offset:
                            self._apply(state, r.key, r.value)
                            self.stats.records_loaded += 1
                            state.dirty += 1
                state.next_offset = max(state.next_offset, batch.last_offset + 1)
        return state

    @staticmethod
    def _apply(state: _Partition, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            raise CorruptRecordError("offsets topic record without a key")
        k = decode_key(key)
        if isinstance(k, UnknownKey):
            _log.warning("offsets topic: skipped a record of unknown type (key version %d)", k.version)
            return
        group = state.groups.get(k.group)
        if isinstance(k, OffsetCommitKey):
            if value is None:
                if group is not None:
                    group.offsets.pop((k.topic, k.partition), None)
            else:
                v = decode_offset_value(value)
                group = state.groups.setdefault(k.group, _Group())
                group.offsets[(k.topic, k.partition)] = OffsetAndMetadata(
                    v.offset, v.metadata, v.commit_timestamp, v.expire_timestamp
                )
        else:
            if value is None:
                state.groups.pop(k.group, None)
            else:
                state.groups.setdefault(k.group, _Group()).metadata = decode_group_value(value)
        if group is not None and not group.offsets and group.metadata is None:
            state.groups.pop(k.group, None)

    def _write(self, p: int, state: _Partition, records: list[Record], if_log_end: int | None = None) -> None:
        """One batch, so one entry: the records are applied all together or not at all. With
        ``if_log_end``, only while the partition still ends there (else ``LogEndMovedError``). The
        table takes them as written when they follow what it holds; else it reads up to them."""
        if not records:
            return
        batch = build_record_batch(records)
        base = self._log.produce_batches(self.topic, p, [batch], expected_log_end_offset=if_log_end)
        if base != state.next_offset:  # another process's commits came first
            self._load(p)
            return
        for r in records:
            self._apply(state, r.key, r.value)
        state.dirty += len(records)
        state.next_offset = base + len(records)

    def _decide_and_write(self, p: int, decide: Callable[[_Partition], list[Record]]) -> None:
        """Write what ``decide`` makes of the partition's table, in the append that checks the
        table is still complete: a commit that lands in between makes it decide again."""

        def attempt() -> None:
            state = self._load(p)
            self._write(p, state, decide(state), if_log_end=state.next_offset)

        retry_cas(f"{self.topic}-{p}", attempt, lost=(LogEndMovedError,), attempts=_DECISION_ATTEMPTS)

    def _group(self, group: str) -> tuple[int, _Partition]:
        if not isinstance(group, str) or not group:
            raise KopError(f"invalid group id {group!r}: a non-empty string is needed")
        p = self.partition_for(group)
        state = self._load(p)
        self._maybe_maintain(p, state)
        return p, state

    # -- requests ---------------------------------------------------------------------------

    def commit(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        expire_timestamp_ms: int | None = None,
    ) -> None:
        """OffsetCommit: every offset in one entry, applied all together or not at all."""
        with self._lock:
            now = self._clock.now_ms()
            values: dict[TopicPartition, OffsetCommitValue] = {}
            for tp, o in offsets.items():
                offset, metadata = (o, "") if isinstance(o, int) else (o.offset, o.metadata or "")
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    raise KopError(f"group {group!r}: offset {offset!r} for {tp[0]}-{tp[1]} is not a valid offset")
                if len(metadata.encode("utf-8")) > self.metadata_max_size:
                    raise OffsetMetadataTooLargeError(
                        f"group {group!r}: metadata for {tp[0]}-{tp[1]} is {len(metadata.encode())} bytes, "
                        f"more than offsetMetadataMaxSize={self.metadata_max_size}"
                    )
                values[tp] = OffsetCommitValue(
                    offset, metadata, now, -1 if expire_timestamp_ms is None else expire_timestamp_ms
                )
            p, state = self._group(group)
            records = []
            if group not in state.groups or state.groups[group].metadata is None:
                value = GroupMetadataValue(protocol_type="consumer", current_state_timestamp=now)
                records.append(Record(encode_group_value(value), encode_key(GroupMetadataKey(group)), now))
            for (topic, partition), v in sorted(values.items()):
                records.append(
                    Record(encode_offset_value(v), encode_key(OffsetCommitKey(group, topic, partition)), now)
                )
            self._write(p, state, records)

    def fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: the group's committed offsets; -1 for asked-for partitions with none."""
        with self._lock:
            _, state = self._group(group)
            committed = dict(state.groups[group].offsets) if group in state.groups else {}
            if partitions is None:
                return committed
            return {tp: committed.get(tp, NO_OFFSET) for tp in partitions}

    def list_groups(self) -> list[str]:
        with self._lock:
            groups: set[str] = set()
            for p, log in enumerate(self._log.views(self.topic, range(self.num_partitions))):
                groups.update(self._load(p, log).groups)
            return sorted(groups)

    def delete_group(self, group: str) -> bool:
        """Tombstone the group and all its offsets; False if it had none."""
        existed: list[bool] = []

        def decide(state: _Partition) -> list[Record]:
            existed[:] = [group in state.groups]
            g = state.groups.get(group)
            return [] if g is None else self._tombstones(group, g, g.offsets, whole=True)

        with self._lock:
            p, _ = self._group(group)
            self._decide_and_write(p, decide)
        return existed[0]

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Tombstone some of a group's offsets; returns those that existed."""
        asked = list(partitions)
        present: list[TopicPartition] = []

        def decide(state: _Partition) -> list[Record]:
            g = state.groups.get(group)
            present[:] = [tp for tp in asked if g is not None and tp in g.offsets]
            if g is None or not present:
                return []
            return self._tombstones(group, g, present, whole=len(present) == len(g.offsets))

        with self._lock:
            p, _ = self._group(group)
            self._decide_and_write(p, decide)
        return present

    def _tombstones(self, group: str, g: _Group, partitions: Iterable[TopicPartition], whole: bool) -> list[Record]:
        now = self._clock.now_ms()
        records = [Record(None, encode_key(OffsetCommitKey(group, t, p)), now) for t, p in sorted(partitions)]
        if whole and g.metadata is not None:
            records.append(Record(None, encode_key(GroupMetadataKey(group)), now))
        return records

    # -- expiry and compaction --------------------------------------------------------------

    def expire(self, now: int | None = None, partitions: Iterable[int] | None = None) -> int:
        """Drop offsets past retention: a whole group once ``offsetsRetentionMinutes`` have passed
        since its last commit (it has no active consumer: KIP-211's empty group), or one offset
        whose explicit expire timestamp passed. Returns the number of offsets dropped."""
        now = self._clock.now_ms() if now is None else now
        dropped = [0]

        def decide(state: _Partition) -> list[Record]:
            records: list[Record] = []
            dropped[0] = 0
            for name, g in list(state.groups.items()):
                if g.offsets and now - g.last_commit_ms >= self.retention_ms:
                    records += self._tombstones(name, g, g.offsets, whole=True)
                    dropped[0] += len(g.offsets)
                else:
                    old = [tp for tp, o in g.offsets.items() if 0 <= o.expire_timestamp_ms <= now]
                    records += self._tombstones(name, g, old, whole=len(old) == len(g.offsets))
                    dropped[0] += len(old)
            return records

        total = 0
        with self._lock:
            for p in range(self.num_partitions) if partitions is None else partitions:
                self._decide_and_write(p, decide)
                total += dropped[0]
        return total

    def compact(self, partitions: Iterable[int] | None = None) -> None:
        with self._lock:
            for p in range(self.num_partitions) if partitions is None else partitions:
                if self._log.compact_partition(self.topic, p) is not None:
                    self.stats.compactions += 1
                # Done by us or, when the log changed under us, by another process's cleaner.
                self._partitions.setdefault(p, _Partition()).dirty = 0

    def _maybe_maintain(self, p: int, state: _Partition) -> None:
        """The log cleaner's job, done in passing: expire on schedule, and compact a partition
        whose dirty records far outnumber its live keys, so loading it stays fast (a cold load
        replays at most a few hundred records more than the live ones)."""
        now = self._clock.now_ms()
        if now - self._last_expiry_check >= self.check_interval_ms:
            self._last_expiry_check = now
            self.expire(now)
        if state.dirty > max(self.compaction_threshold, 4 * state.live_keys()):
            self.compact([p])
