"""Spark tasks are bound to offsets, not files: a partition planned before ``kop maintenance``
merged its ledgers (or retention dropped them) reads every offset still there, in a real Spark
executor, and reports as data loss only the offsets retention really removed, naming them."""

import time
import uuid

import pytest

from kop_spark import Broker, Record
from kop_spark.spark.batch_reader import KopBatchReader
from kop_spark.spark.micro_batch_stream import KopMicroBatchStream
from kop_spark.spark.options import SourceOptions

from . import servers
from .test_spark_source import SPARK_ERRORS

DAY = 86_400_000


def _small_ledgers(root, n, old=False):
    """``n`` records in two-record ledgers that no reader grace protects (deleted at the next CAS)."""
    b = Broker(root, conf={"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMergeInPassing": 0, "retention.ms": -1})
    if "t" not in b.list_topics():
        b.create_topic("t", 1, config={"file.delete.delay.ms": 0})
    ts = int(time.time() * 1000) - (30 * DAY if old else 0)
    for i in range(0, n, 2):
        b.produce("t", [Record(f"v{j}".encode(), timestamp_ms=ts) for j in (i, i + 1)], 0)
    b.close()


def _read_in_spark(spark, reader, planned):
    """Run the planned partitions in Spark's executors, as a query's tasks would."""

    def offsets(p):
        return [o for rb in reader.read(p) for o in rb.column("offset").to_pylist()]

    return sorted(spark.sparkContext.parallelize(planned, len(planned)).flatMap(offsets).collect())


def _merge_everything(root):
    with Broker(root) as b:
        assert b.maintenance(target_ledger_bytes=1 << 20).ledgers_merged > 0
        b.enforce_retention("t")  # the merged-away files' grace is zero: gone now


@pytest.fixture(params=["local", "s3"])
def any_root(request, root):
    """A local root, or an S3 one, where a task opens its planned ledgers ahead of their turn."""
    if request.param == "local":
        return root
    request.getfixturevalue("running")
    return f"s3://{servers.BUCKET}/spark-{uuid.uuid4().hex[:10]}"


def test_a_batch_read_planned_before_maintenance_reads_every_offset(spark, any_root):
    root = any_root
    _small_ledgers(root, 40)
    reader = KopBatchReader(
        SourceOptions.parse({"kop.root": root, "subscribe": "t", "minPartitions": "3"}, streaming=False)
    )
    planned = reader.partitions()
    _merge_everything(root)
    assert _read_in_spark(spark, reader, planned) == list(range(40))


def test_a_micro_batch_planned_before_maintenance_reads_every_offset(spark, root):
    _small_ledgers(root, 30)
    reader = KopMicroBatchStream(
        SourceOptions.parse({"kop.root": root, "subscribe": "t", "startingOffsets": "earliest"}, streaming=True)
    )
    start = reader.initialOffset()
    planned = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    _merge_everything(root)
    assert _read_in_spark(spark, reader, planned) == list(range(30))


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_only_offsets_retention_removed_are_data_loss(spark, root, fail_on_data_loss):
    _small_ledgers(root, 10, old=True)
    _small_ledgers(root, 10)
    options = {"kop.root": root, "subscribe": "t", "failOnDataLoss": fail_on_data_loss}
    reader = KopBatchReader(SourceOptions.parse(options, streaming=False))
    planned = reader.partitions()
    with Broker(root) as b:  # retention.ms of 7 days: the first ten records go
        b.enforce_retention("t")
        assert b.list_offsets("t", 0, "earliest") == 10
    if fail_on_data_loss == "true":
        with pytest.raises(SPARK_ERRORS, match=r"Cannot read offsets 0 to 9 of t-0: retention removed them"):
            _read_in_spark(spark, reader, planned)
    else:
        assert _read_in_spark(spark, reader, planned) == list(range(10, 20))


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_offsets_past_the_end_are_an_option_error(spark, root, option):
    _small_ledgers(root, 4)
    value = '{"t": {"0": 99}}'
    other = {"startingOffsets": "earliest"} if option == "endingOffsets" else {"endingOffsets": "latest"}
    df = spark.read.format("kop").option("kop.root", root).option("subscribe", "t").option(option, value)
    for k, v in other.items():
        df = df.option(k, v)
    with pytest.raises(
        SPARK_ERRORS,
        match=rf"option '{option}': offset 99 for t-0 is past the latest offset 4; valid offsets are 0 to 4",
    ):
        df.load().count()
