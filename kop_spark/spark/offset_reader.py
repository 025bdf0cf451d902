"""The driver's view of the store for a ``kop`` read: which topic partitions the subscription
covers now, their offsets, offsets for timestamps and consumer groups, the offset ranges of a
batch (reporting data loss as Spark's Kafka source does) and the input partitions planned from
them. Spark's Kafka connector calls this part the offset reader; here it is a thin layer over
the Broker."""

from __future__ import annotations

import re

from ..broker import SPARK_COMMIT, Broker, OffsetAndMetadata, PartitionViews
from ..errors import ConfigError, PartitionNotFoundError, TopicNotFoundError
from ..storage.read_plan import PartitionView
from ..topic_name import TopicPartition, partition_label
from .offset_range import OffsetRange, pack_ranges, split_ranges
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
)
from .partition_reader import KopInputPartition, KopInputPartitions, report_data_loss

Views = dict[TopicPartition, PartitionView]
# An idle stream's looks at a store billed by the request, at least this far apart: Spark asks for
# the latest offsets every 10 ms while nothing comes (spark.sql.streaming.pollingDelay), and each
# look is a LIST of the partitions and a GET of the topic on an object store. Databricks' Kinesis
# source (minFetchPeriod) waits as long between its own fetches.
BILLED_MIN_FETCH_PERIOD_MS = 400


class KopOffsetReader:
    def __init__(self, options: SourceOptions):
        self.options = options
        self.broker = Broker(options.root, options.conf)
        if not self.broker.root_exists():
            self.broker.close()
            raise ConfigError(f"option 'kop.root': the store {options.root} does not exist")
        self._views = PartitionViews(self.broker.admin, self.broker.store)

    def close(self) -> None:
        self.broker.close()

    @property
    def min_fetch_period_ms(self) -> int:
        """``minFetchPeriod``, or the store's: ``BILLED_MIN_FETCH_PERIOD_MS`` where each request is
        billed, none where a look is cheap (local files, ZooKeeper's watches, etcd)."""
        given = self.options.min_fetch_period_ms
        if given is not None:
            return given
        return BILLED_MIN_FETCH_PERIOD_MS if self.broker.store.requests_billed else 0

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
        out: list[TopicPartition] = []
        for topic in sorted(set(topics)):
            try:
                out.extend((topic, p) for p in range(self.broker.partitions_for(topic)))
            except TopicNotFoundError:
                continue
        return out

    def views(self, partitions: list[TopicPartition]) -> Views:
        """Views of the partitions that exist; missing ones (deleted topics) are left out."""
        return self._views.existing(partitions)

    def current(self) -> Views:
        """Views of the partitions the subscription covers now."""
        return self.views(self.topic_partitions())

    def starting(self) -> Views:
        """``current()`` for a read that starts now: with ``assign``, every assigned partition must exist."""
        views = self.current()
        for tp in self.options.subscription.assigned:
            if tp not in views:
                self.broker.view(*tp)  # raises TopicNotFoundError / PartitionNotFoundError naming it
                raise PartitionNotFoundError(f"assigned partition {partition_label(tp)} does not exist")
        return views

    def latest(self) -> PartitionOffsets:
        return {tp: s.log_end_offset for tp, s in self.current().items()}

    # -- resolving startingOffsets / endingOffsets ------------------------------------------

    def resolve(self, limit: OffsetLimit, views: Views, option: str) -> PartitionOffsets:
        """Concrete offsets of ``limit`` for the partitions in ``views``."""
        earliest = {tp: s.log_start_offset for tp, s in views.items()}
        latest = {tp: s.log_end_offset for tp, s in views.items()}
        if isinstance(limit, Earliest):
            return earliest
        if isinstance(limit, Latest):
            return latest
        if isinstance(limit, GroupOffsets):
            assert self.options.group_id is not None  # SourceOptions.parse requires one for 'group'
            committed = self.broker.fetch_offsets(self.options.group_id)
            out = {}
            for tp in views:
                c = committed.get(tp)
                out[tp] = earliest[tp] if c is None else self._in_range(c.offset, tp, earliest, latest, None)
            return out
        if isinstance(limit, SpecificOffsets):
            specified = set(limit.offsets)
            if specified != set(views):
                raise ConfigError(
                    f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
                    f"Use -1 for latest, -2 for earliest.\n"
                    f"Specified: {sorted(partition_label(tp) for tp in specified)} Assigned: {sorted(partition_label(tp) for tp in views)}"
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
            timestamps = dict.fromkeys(views, limit.timestamp)
        else:
            assert isinstance(limit, SpecificTimestamps)
            if set(limit.timestamps) != set(views):
                raise ConfigError(
                    f"If {option} contains specific timestamps, you must specify all TopicPartitions.\n"
                    f"Specified: {sorted(partition_label(tp) for tp in limit.timestamps)} Assigned: {sorted(partition_label(tp) for tp in views)}"
                )
            timestamps = limit.timestamps
        out = {}
        for tp, ts in timestamps.items():
            off = self.broker.list_offsets(tp[0], tp[1], ts)
            if off < 0:
                if not limit.no_match_latest:
                    raise ConfigError(
                        f"No offset matched from request of topic-partition {partition_label(tp)} and timestamp {ts} "
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
                    f"{what}: offset {off} for {partition_label(tp)} is past the latest offset {latest[tp]}; "
                    f"valid offsets are {earliest[tp]} to {latest[tp]}, or -2 (earliest) and -1 (latest)"
                )
            self.report_data_loss(f"{what} for {partition_label(tp)} was {off} but the latest offset is {latest[tp]}")
            return latest[tp]
        if off < earliest[tp]:
            self.report_data_loss(
                f"{what} for {partition_label(tp)} was {off} but the earliest available offset is "
                f"{earliest[tp]}: offsets {off} to {earliest[tp] - 1} were removed by retention"
            )
            return earliest[tp]
        return off

    # -- planning ----------------------------------------------------------------------------

    def batch_ranges(self, start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
        """The tasks of a batch read of ``[start, end)`` per partition."""
        ranges = []
        for tp in sorted(start):
            if start[tp] > end[tp]:
                raise ConfigError(
                    f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for topic {tp[0]} "
                    f"partition {tp[1]}. You either provided an invalid fromOffset, or the topic has been damaged"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)

    def stream_ranges(self, begin: PartitionOffsets, until: PartitionOffsets, views: Views) -> list[OffsetRange]:
        """The tasks of a micro-batch ``[begin, until)``, as Spark's Kafka source plans them:
        partitions that went away, that appeared past offset 0, that moved backwards or lost
        offsets to retention are data loss (fail or warn, per ``failOnDataLoss``)."""
        gone = sorted((set(begin) - set(until)) | (set(until) - set(views)))
        if gone:
            self.report_data_loss(
                f"{', '.join(partition_label(tp) for tp in gone)} are gone. Some data may have been missed"
            )
        ranges = []
        for tp in sorted(views):
            view = views[tp]
            if tp in begin:
                lo = begin[tp]
            else:
                lo = view.log_start_offset
                if lo != 0:
                    self.report_data_loss(
                        f"Added partition {partition_label(tp)} starts from {lo} instead of 0. Some data may have been missed"
                    )
            hi = until[tp]
            if hi < lo:
                self.report_data_loss(
                    f"Partition {partition_label(tp)}'s offset was changed from {lo} to {hi}, some data may have been missed"
                )
                continue
            if lo < view.log_start_offset:
                trimmed_to = min(view.log_start_offset, hi)
                self.report_data_loss(
                    f"Cannot fetch offsets {lo} to {trimmed_to - 1} of {partition_label(tp)}: the earliest available "
                    f"offset is now {view.log_start_offset}"
                )
                lo = trimmed_to
            ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
        return split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)

    def plan(self, ranges: list[OffsetRange], views: Views) -> list[KopInputPartition | KopInputPartitions]:
        """A Spark partition (task) a range, or several ranges a task with ``maxPartitions``."""
        tasks = [[self._planned(r, views) for r in task] for task in pack_ranges(ranges, self.options.max_partitions)]
        return [task[0] if len(task) == 1 else KopInputPartitions(tuple(task)) for task in tasks]

    def _planned(self, r: OffsetRange, views: Views) -> KopInputPartition:
        o = self.options
        return KopInputPartition(
            root=o.root,
            topic=r.topic,
            partition=r.partition,
            start=r.start,
            end=r.end,
            ledgers=tuple(views[(r.topic, r.partition)].slices(r.start, r.end)),
            include_headers=o.include_headers,
            fail_on_data_loss=o.fail_on_data_loss,
            conf=tuple(sorted((k, str(v)) for k, v in o.conf.items())),
        )

    # -- consumer groups ---------------------------------------------------------------------

    def commit(self, group: str, offsets: PartitionOffsets, live: Views | None = None) -> None:
        """Commit ``offsets`` of the partitions that still exist (``live``, else looked up)."""
        live = self.views(list(offsets)) if live is None else live
        kept = {tp: OffsetAndMetadata(off, SPARK_COMMIT) for tp, off in offsets.items() if tp in live}
        if kept:
            self.broker.commit_offsets(group, kept)
