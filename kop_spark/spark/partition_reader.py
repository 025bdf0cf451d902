"""What a Spark task reads: an offset range of a topic partition (or several, in turn), straight
from ledger files.

The driver plans a ``KopInputPartition`` from a view of the partition's log; the
task needs nothing else, only the files under the store root, unless maintenance or retention
moved its offsets to other files meanwhile: then it reads the metadata to find them again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..config import CLOUD_OPTION_PREFIXES
from ..errors import DataLossError, FileMissingError, UnknownTopicOrPartitionError
from ..record.arrow import ArrowRecordBuilder
from ..storage.read_plan import LedgerSlice, SliceReader

log = logging.getLogger(__name__)

# Arrow batches handed to Spark: big enough to amortise the per-batch cost, small enough to stream.
_FLUSH_RECORDS = 32_768
_FLUSH_BYTES = 32 << 20

INSTRUCTION_FAIL = (
    "Some data may have been lost because they are not available in the store any more; either the data was "
    "removed by retention or the topic was deleted before all the data in the topic was processed. If you "
    'don\'t want your streaming query to fail on such cases, set the source option "failOnDataLoss" to "false".'
)
INSTRUCTION_SKIP = (
    "Some data may have been lost because they are not available in the store any more; either the data was "
    "removed by retention or the topic was deleted before all the data in the topic was processed. If you "
    'want your streaming query to fail on such cases, set the source option "failOnDataLoss" to "true".'
)


def report_data_loss(message: str, fail: bool) -> None:
    """Raise ``DataLossError``, or log and go on, per ``failOnDataLoss`` (as Spark's Kafka source)."""
    if fail:
        raise DataLossError(f"{message}. {INSTRUCTION_FAIL}")
    log.warning("%s. %s", message, INSTRUCTION_SKIP)


@dataclass(frozen=True)
class KopInputPartition(InputPartition):
    root: str
    topic: str
    partition: int
    start: int
    end: int
    ledgers: tuple[LedgerSlice, ...]
    include_headers: bool
    fail_on_data_loss: bool
    conf: tuple[tuple[str, str], ...] = ()  # the source's kop.* settings, to re-plan by offset


@dataclass(frozen=True)
class KopInputPartitions(InputPartition):
    """Several ranges one task reads in turn (``maxPartitions``): a Python data source's task costs
    tens of milliseconds however little it reads, so a batch of 1,500 small ranges, a task each,
    took a minute on two cores."""

    parts: tuple[KopInputPartition, ...]


_REPLANS = 5


def read_input_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, KopInputPartitions):
        return _read_parts(partition.parts)
    if not isinstance(partition, KopInputPartition):
        return iter(())  # Spark's stand-in partition when there is nothing to read
    return _read_parts((partition,))


def _read_parts(parts: Sequence[KopInputPartition]) -> Iterator[pa.RecordBatch]:
    """The ranges' records in turn, their planned ledgers opened ahead where the store serves
    reads at once (one task's ranges share a root)."""
    first = parts[0]
    with SliceReader(first.root, {k: v for k, v in first.conf if k.startswith(CLOUD_OPTION_PREFIXES)}) as files:
        files.read_ahead(ledger for p in parts for ledger in p.ledgers)
        for p in parts:
            yield from read_partition(p, files)


def read_partition(p: KopInputPartition, files: SliceReader) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``[p.start, p.end)`` as Arrow batches in Spark's Kafka source schema.

    A task is bound to offsets, not files: when a planned ledger is gone (merged, compacted or
    rolled into another by maintenance, or dropped by retention), the offsets still to read are
    looked up again in the current metadata, as Spark's Kafka source reads by offset. Only
    offsets below the log start now are data loss."""
    builder = ArrowRecordBuilder(p.topic, p.partition, p.include_headers)
    position, ledgers = p.start, p.ledgers
    for attempt in range(_REPLANS + 1):
        try:
            for ledger in ledgers:
                start, end = max(position, ledger.base_offset), min(p.end, ledger.end_offset)
                if start >= end:
                    continue
                for run in files.read_runs(ledger, start, end):
                    taken = 0
                    while taken < len(run):
                        taken = builder.add_batches(
                            run.data, run.spans, taken, ledger.base_offset, start, end, _FLUSH_RECORDS, _FLUSH_BYTES
                        )
                        if len(builder) >= _FLUSH_RECORDS or builder.size_in_bytes >= _FLUSH_BYTES:
                            yield builder.build()
                    position = max(position, ledger.base_offset + run.end_index)
                position = max(position, end)
            break
        except FileMissingError:
            if attempt == _REPLANS:
                raise
            position, ledgers = _replan(p, position)
    if len(builder):
        yield builder.build()


def _replan(p: KopInputPartition, position: int) -> tuple[int, tuple[LedgerSlice, ...]]:
    """Where the offsets from ``position`` on are now, and where reading can resume."""
    from ..broker import Broker  # the metadata, read only when a planned file went away

    with Broker(p.root, dict(p.conf)) as broker:
        try:
            view = broker.view(p.topic, p.partition)
        except UnknownTopicOrPartitionError:
            report_data_loss(
                f"Cannot read offsets {position} to {p.end - 1} of {p.topic}-{p.partition}: the topic "
                f"was deleted after the batch was planned",
                p.fail_on_data_loss,
            )
            return p.end, ()
    if position < view.log_start_offset:
        resume = min(view.log_start_offset, p.end)
        report_data_loss(
            f"Cannot read offsets {position} to {resume - 1} of {p.topic}-{p.partition}: retention removed "
            f"them after the batch was planned (the log now starts at {view.log_start_offset})",
            p.fail_on_data_loss,
        )
        position = resume
    return position, tuple(view.slices(position, p.end))
