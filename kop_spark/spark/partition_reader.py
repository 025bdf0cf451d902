"""What a Spark task reads: one offset range of one topic partition, straight from ledger files.

The driver plans a ``KopInputPartition`` from a snapshot of the partition's managed ledger; the
task needs nothing else (no metadata store, no broker), only the files under the store root.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Tuple

import pyarrow as pa
import pyarrow.fs as pafs

from pyspark.sql.datasource import InputPartition

from ..errors import DataLossError, StorageError
from ..record import RecordBatch
from ..record.arrow import ArrowRecordBuilder
from ..storage.fileio import FileIO
from ..storage.managed_ledger import LedgerSlice, read_slice

log = logging.getLogger(__name__)

# Arrow batches handed to Spark: big enough to amortise the per-batch cost, small enough to stream.
_FLUSH_RECORDS = 32_768
_FLUSH_BYTES = 32 << 20

INSTRUCTION_FAIL = (
    "Some data may have been lost because they are not available in the store any more; either the data was "
    "removed by retention or the topic was deleted before all the data in the topic was processed. If you "
    "don't want your streaming query to fail on such cases, set the source option \"failOnDataLoss\" to \"false\"."
)
INSTRUCTION_SKIP = (
    "Some data may have been lost because they are not available in the store any more; either the data was "
    "removed by retention or the topic was deleted before all the data in the topic was processed. If you "
    "want your streaming query to fail on such cases, set the source option \"failOnDataLoss\" to \"true\"."
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
    ledgers: Tuple[LedgerSlice, ...]
    include_headers: bool
    fail_on_data_loss: bool


def read_partition(p: KopInputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``[p.start, p.end)`` as Arrow batches in Spark's Kafka source schema."""
    fileio = FileIO(p.root)
    builder = ArrowRecordBuilder(p.topic, p.partition, p.include_headers)
    for ledger in p.ledgers:
        start, end = max(p.start, ledger.base_offset), min(p.end, ledger.end_offset)
        if start >= end:
            continue
        try:
            for entry in read_slice(fileio, ledger, start, end):
                builder.add(RecordBatch(entry.entry.batch), entry.base_offset, start, end)
                if len(builder) >= _FLUSH_RECORDS or builder.size_in_bytes >= _FLUSH_BYTES:
                    yield builder.build()
        except StorageError:
            if _exists(fileio, ledger.file):
                raise
            # Retention or a topic deletion removed the ledger after the batch was planned.
            report_data_loss(
                f"Cannot read offsets {start} to {end - 1} of {p.topic}-{p.partition}: "
                f"ledger {fileio.full_path(ledger.file)} is gone",
                p.fail_on_data_loss,
            )
    if len(builder):
        yield builder.build()


def _exists(fileio: FileIO, path: str) -> bool:
    return fileio.fs.get_file_info(fileio.full_path(path)).type != pafs.FileType.NotFound
