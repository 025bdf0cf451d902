"""Invariant 5: seeking reads a handful of entries, however long the partition."""

import random
import time

import pytest

from kop_spark import Broker, Record
from kop_spark.record import build_record_batch

RECORDS_PER_BATCH = 100
BATCHES_PER_LEDGER = 10
LEDGERS = 1000
TOTAL = RECORDS_PER_BATCH * BATCHES_PER_LEDGER * LEDGERS  # 1,000,000
T0 = int(time.time()) * 1000  # now: retention keeps everything, and T0 + 2 * TOTAL is within the hour ahead
# that message.timestamp.after.max.ms allows


@pytest.fixture(scope="module")
def big_partition(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("big"))
    conf = {
        "managedLedgerMaxEntriesPerLedger": BATCHES_PER_LEDGER,
        "journalSyncData": False,
        "managedLedgerMergeInPassing": 0,
    }  # 1000 ledgers to search between, as a long-lived log has
    b = Broker(root, conf=conf)
    b.create_topic("t", 1)
    offset = 0
    for _ in range(LEDGERS):
        batches = []
        for _ in range(BATCHES_PER_LEDGER):
            # Record at offset o has timestamp T0 + 2*o: growing, with gaps to search between.
            batches.append(
                build_record_batch(
                    [Record(b"x" * 8, timestamp_ms=T0 + 2 * (offset + i)) for i in range(RECORDS_PER_BATCH)]
                )
            )
            offset += RECORDS_PER_BATCH
        b.produce_batches("t", 0, batches)
    b.close()
    return root


@pytest.mark.slow
def test_partition_shape(big_partition):
    d = Broker(big_partition).describe_topic("t").partitions[0]
    assert (d.log_start_offset, d.log_end_offset, d.ledgers) == (0, TOTAL, LEDGERS)


@pytest.mark.slow
def test_seek_to_any_offset_reads_one_entry(big_partition):
    b = Broker(big_partition)
    rng = random.Random(5)
    for offset in [0, TOTAL - 1, 999, 1000, 1001] + [rng.randrange(TOTAL) for _ in range(100)]:
        before = (b.stats.entries_read, b.stats.tables_loaded, b.stats.entries_scanned)
        (r,) = b.fetch("t", 0, offset, max_records=1)
        assert r.offset == offset and r.timestamp_ms == T0 + 2 * offset
        entries, tables, scanned = (
            a - c
            for a, c in zip(
                (b.stats.entries_read, b.stats.tables_loaded, b.stats.entries_scanned), before, strict=False
            )
        )
        assert entries == 1 and tables <= 1 and scanned == 0, (offset, entries, tables, scanned)


@pytest.mark.slow
def test_seek_to_any_timestamp_reads_one_entry(big_partition):
    b = Broker(big_partition)
    rng = random.Random(6)
    for offset in [0, TOTAL - 1] + [rng.randrange(TOTAL) for _ in range(100)]:
        before = (b.stats.entries_read, b.stats.tables_loaded)
        assert b.list_offsets("t", 0, T0 + 2 * offset) == offset
        assert b.list_offsets("t", 0, T0 + 2 * offset - 1) == offset  # between two records
        assert b.stats.entries_read - before[0] == 2 and b.stats.tables_loaded - before[1] <= 2
    assert b.list_offsets("t", 0, T0 + 2 * TOTAL) == -1
