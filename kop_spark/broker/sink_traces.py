"""Exactly-once writers' traces in partitions, forgotten where they pile up.

A sink commit leaves its writer's batch in each partition it appends to (``LogMetadata.sinks``), so
that an interrupted commit, completed again, never appends a partition twice; every append rewrites
them. A Spark query is one writer for as long as it runs, but each Kafka transactional id is a
writer too, and some applications take a new one often (Flink's exactly-once sink, one per subtask
and checkpoint; Kafka Streams, one per process start): their traces stayed for
transactional.id.expiration.ms, 7 days.

Past ``maxExactlyOnceWritersPerPartition`` traces in a partition, those idle
``retention.FORGETTABLE_AFTER_MS`` whose writer's record says their batch is finished are forgotten, longest
idle first, at each retention pass. Every completer works from the record (Spark's rerun, kop
maintenance, kop serve's transaction coordinator), so none will apply a finished batch again; a
batch still committing keeps its traces however long it waits."""

from __future__ import annotations

from ..storage.managed_ledger import ManagedLedger
from ..storage.retention import longest_idle
from .sink_commits import DONE, TRACE_PREFIX, SinkBatch, SinkCommits


class FinishedBatches:
    """Whether a writer's batch is finished, by its record, each read once a pass."""

    def __init__(self, sinks: SinkCommits):
        self._sinks = sinks
        self._records: dict[str, SinkBatch | None] = {}

    def __call__(self, trace_writer: str, batch: int) -> bool:
        if not trace_writer.startswith(TRACE_PREFIX):
            return False  # of a Broker.append_staged caller of its own, whose batches only it knows
        writer = trace_writer.removeprefix(TRACE_PREFIX)
        if writer not in self._records:
            self._records[writer] = self._sinks.record(writer)
        record = self._records[writer]
        # None: removed (a batch job's, complete) or expired; past it: the next batch is the record's.
        return record is None or record.batch > batch or (record.batch == batch and record.state == DONE)


def forget_finished(ml: ManagedLedger, most: int, finished: FinishedBatches, now: int) -> None:
    """Forget the partition's traces past ``most`` that may go, longest idle first."""
    meta = ml.last_known  # as the retention pass just left it
    if meta is None:
        return
    gone = longest_idle(meta.sinks, most, now, lambda w: finished(w, meta.sinks[w].seq))
    if gone:
        ml.forget_sinks({w: meta.sinks[w].seq for w in gone})
