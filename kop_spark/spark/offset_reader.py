"""The driver's view of the store for a ``kop`` read: which topic partitions the subscription
covers now, their offsets, offsets for timestamps and consumer groups, and read plans.
Spark's Kafka connector calls this part the offset reader; here it is a thin layer over the Broker."""

from __future__ import annotations

import re

from ..broker import Broker
from ..errors import ConfigError, PartitionNotFoundError, TopicNotFoundError, UnknownTopicOrPartitionError
from ..storage.managed_ledger import Snapshot
from .offset_range import OffsetRange
from .options import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    Earliest,
    GlobalTimestamp,
    GroupOffsets,
    Latest,
    OffsetLimit,
    PartitionOffsets,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    TopicPartition,
)
from .partition_reader import KopInputPartition, report_data_loss


def tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


class KopOffsetReader:
    def __init__(self, options: SourceOptions):
        self.options = options
        self.broker = Broker(options.root, options.conf)

    def close(self) -> None:
        self.broker.close()

    def report_data_loss(self, message: str) -> None:
        """Fail or log, per ``failOnDataLoss``."""
        report_data_loss(message, self.options.fail_on_data_loss)

    # -- what there is ---------------------------------------------------------------------

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now. Topics subscribed to that do not exist (yet)
        contribute none, as with a Kafka consumer's subscription."""
        sub = self.options.subscription
        if sub.is_assign:
            return list(sub.assigned)
        if sub.pattern is not None:
            pattern = re.compile(sub.pattern)
            topics = [t for t in self.broker.list_topics() if pattern.fullmatch(t)]
        else:
            topics = list(sub.topics)
        out = []
        for topic in sorted(set(topics)):
            try:
                out.extend((topic, p) for p in range(self.broker.partitions_for(topic)))
            except TopicNotFoundError:
                continue
        return out

    def snapshots(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Snapshot]:
        """Snapshots of the partitions that exist; missing ones (deleted topics) are left out."""
        out = {}
        for tp in partitions:
            try:
                out[tp] = self.broker.snapshot(*tp)
            except UnknownTopicOrPartitionError:
                continue
        return out

    def current(self) -> dict[TopicPartition, Snapshot]:
        """Snapshots of the partitions the subscription covers now."""
        return self.snapshots(self.topic_partitions())

    def starting(self) -> dict[TopicPartition, Snapshot]:
        """``current()`` for a read that starts now: with ``assign``, every assigned partition must exist."""
        snapshots = self.current()
        for tp in self.options.subscription.assigned:
            if tp not in snapshots:
                self.broker.snapshot(*tp)  # raises TopicNotFoundError / PartitionNotFoundError naming it
                raise PartitionNotFoundError(f"assigned partition {tp_name(tp)} does not exist")
        return snapshots

    def latest(self) -> PartitionOffsets:
        return {tp: s.next_offset for tp, s in self.current().items()}

    # -- resolving startingOffsets / endingOffsets ------------------------------------------

    def resolve(self, limit: OffsetLimit, snapshots: dict[TopicPartition, Snapshot], option: str) -> PartitionOffsets:
        """Concrete offsets of ``limit`` for the partitions in ``snapshots``."""
        earliest = {tp: s.log_start_offset for tp, s in snapshots.items()}
        latest = {tp: s.next_offset for tp, s in snapshots.items()}
        if isinstance(limit, Earliest):
            return earliest
        if isinstance(limit, Latest):
            return latest
        if isinstance(limit, GroupOffsets):
            committed = self.broker.fetch_offsets(self.options.group_id)
            out = {}
            for tp in snapshots:
                c = committed.get(tp)
                out[tp] = earliest[tp] if c is None else self._in_range(c.offset, tp, earliest, latest, None)
            return out
        if isinstance(limit, SpecificOffsets):
            specified = set(limit.offsets)
            if specified != set(snapshots):
                raise ConfigError(
                    f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
                    f"Use -1 for latest, -2 for earliest.\n"
                    f"Specified: {sorted(tp_name(tp) for tp in specified)} Assigned: {sorted(tp_name(tp) for tp in snapshots)}"
                )
            out = {}
            for tp, off in limit.offsets.items():
                if off == EARLIEST_OFFSET:
                    out[tp] = earliest[tp]
                elif off == LATEST_OFFSET:
                    out[tp] = latest[tp]
                else:
                    out[tp] = self._in_range(off, tp, earliest, latest, option)
            return out
        if isinstance(limit, GlobalTimestamp):
            timestamps = dict.fromkeys(snapshots, limit.timestamp)
        else:
            assert isinstance(limit, SpecificTimestamps)
            if set(limit.timestamps) != set(snapshots):
                raise ConfigError(
                    f"If {option} contains specific timestamps, you must specify all TopicPartitions.\n"
                    f"Specified: {sorted(tp_name(tp) for tp in limit.timestamps)} Assigned: {sorted(tp_name(tp) for tp in snapshots)}"
                )
            timestamps = limit.timestamps
        out = {}
        for tp, ts in timestamps.items():
            off = self.broker.list_offsets(tp[0], tp[1], ts)
            if off < 0:
                if not limit.no_match_latest:
                    raise ConfigError(
                        f"No offset matched from request of topic-partition {tp_name(tp)} and timestamp {ts} "
                        f"(option '{option}'); set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
                    )
                off = latest[tp]
            out[tp] = off
        return out

    def _in_range(
        self, off: int, tp: TopicPartition, earliest: PartitionOffsets, latest: PartitionOffsets, option: str | None
    ) -> int:
        """``off`` of ``option`` (None: the group's committed offset) checked against the log: below
        its start the offsets are gone (data loss); past its end they never existed, which for an
        option is a mistake in the option."""
        what = f"option '{option}'" if option else "the group's committed offset"
        if off > latest[tp]:
            if option:
                raise ConfigError(
                    f"{what}: offset {off} for {tp_name(tp)} is past the latest offset {latest[tp]}; "
                    f"valid offsets are {earliest[tp]} to {latest[tp]}, or -2 (earliest) and -1 (latest)"
                )
            self.report_data_loss(f"{what} for {tp_name(tp)} was {off} but the latest offset is {latest[tp]}")
            return latest[tp]
        if off < earliest[tp]:
            self.report_data_loss(
                f"{what} for {tp_name(tp)} was {off} but the earliest available offset is "
                f"{earliest[tp]}: offsets {off} to {earliest[tp] - 1} were removed by retention"
            )
            return earliest[tp]
        return off

    # -- planning ----------------------------------------------------------------------------

    def plan(self, ranges: list[OffsetRange], snapshots: dict[TopicPartition, Snapshot]) -> list[KopInputPartition]:
        o = self.options
        return [
            KopInputPartition(
                root=o.root,
                topic=r.topic,
                partition=r.partition,
                start=r.start,
                end=r.end,
                ledgers=tuple(snapshots[(r.topic, r.partition)].slices(r.start, r.end)),
                include_headers=o.include_headers,
                fail_on_data_loss=o.fail_on_data_loss,
                conf=tuple(sorted((k, str(v)) for k, v in o.conf.items())),
            )
            for r in ranges
        ]

    def estimated_bytes(self, snapshot: Snapshot, start: int, end: int) -> int:
        """Bytes of ``[start, end)``, prorated within each ledger (for ``maxBytesPerTrigger``)."""
        total = 0
        for ledger in snapshot.ledgers[max(snapshot.ledger_for_offset(start), 0) :]:
            if ledger.base_offset >= end:
                break
            lo, hi = max(start, ledger.base_offset), min(end, ledger.end_offset)
            if hi > lo and ledger.records:
                total += ledger.length * (hi - lo) // ledger.records
        return total

    # -- consumer groups ---------------------------------------------------------------------

    def commit(self, group: str, offsets: PartitionOffsets, live: dict[TopicPartition, Snapshot] | None = None) -> None:
        """Commit ``offsets`` of the partitions that still exist (``live``, else looked up)."""
        live = self.snapshots(list(offsets)) if live is None else live
        kept = {tp: off for tp, off in offsets.items() if tp in live}
        if kept:
            self.broker.commit_offsets(group, kept)
