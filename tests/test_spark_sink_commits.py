"""Exactly-once writes that survive a driver dying between the partitions of a commit, reruns
that route records differently, maintenance running during a long job, and many batch jobs
between a query's crash and its restart — on a real local Spark session."""

import os
import threading
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.functions import udf
from pyspark.sql.types import BinaryType, StructField, StructType

from kop_spark import Broker, Record, layout
from kop_spark.broker import SINK_LEASE_MS
from kop_spark.clock import ManualClock, now_ms
from kop_spark.record import build_record_batch
from kop_spark.spark.options import SinkOptions
from kop_spark.spark.sink import KopBatchWriter, KopCommitMessage, KopStreamWriter
from kop_spark.storage.managed_ledger import ManagedLedger

from .conftest import forget_last_batch_commit
from .faults import arm_crash_point
from .test_spark_sink import all_records, staged_files


def _query(spark, root, checkpoint, **source_options):
    reader = (
        spark.readStream.format("kop")
        .option("kop.root", root)
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
    )
    for k, v in source_options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .selectExpr("value")
        .writeStream.format("kop")
        .option("kop.root", root)
        .option("topic", "dst")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def _values(b, topic):
    return sorted(r.value for r in all_records(b, topic))


@pytest.mark.parametrize("change", ["more partitions", "other minPartitions", "maintenance first"])
def test_a_commit_cut_between_partitions_is_completed_by_the_rerun(spark, root, broker, tmp_path, change):
    broker.create_topic("src", partitions=2)
    broker.create_topic("dst", partitions=2)
    for p in (0, 1):  # keyless: where a record goes depends on the tasks, which the change moves
        broker.produce("src", [Record(f"v{p}-{i}".encode()) for i in range(300)], partition=p)
    expected = _values(broker, "src")
    checkpoint = str(tmp_path / "ck")
    arm_crash_point(root, "sink-commit", 1)  # the commit dies once it has appended one partition
    q = _query(spark, root, checkpoint)
    with pytest.raises(Exception):
        q.awaitTermination(300)
    half = [broker.list_offsets("dst", p, "latest") for p in (0, 1)]
    assert sorted(half)[0] == 0 and sum(half) > 0, f"the commit was to stop between partitions: {half}"
    assert broker.sink_commits.pending(), "the batch is recorded, not yet complete"

    if change == "more partitions":
        broker.create_partitions("dst", 4)
        q = _query(spark, root, checkpoint)
    elif change == "maintenance first":  # a driver that is gone for good: maintenance rolls the batch forward
        later = ManualClock(now_ms() + SINK_LEASE_MS + 1)  # the driver's lease has run out
        Broker(root, clock=later).maintenance()
        assert _values(broker, "dst") == expected and not broker.sink_commits.pending()
        q = _query(spark, root, checkpoint)  # and the rerun, finding the batch done, adds nothing
    else:
        q = _query(spark, root, checkpoint, minPartitions="5")
    q.awaitTermination(300)
    assert q.exception() is None
    assert _values(broker, "dst") == expected, "records lost or written twice"
    assert not broker.sink_commits.pending()
    assert staged_files(root) == []


def test_maintenance_during_a_long_job_leaves_its_staged_output(spark, root, broker, tmp_path):
    broker.create_topic("dst", partitions=2)
    go = tmp_path / "go"
    staged_one = threading.Event()

    def value(i):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            import time

            while not os.path.exists(go):  # waits for the test's signal: the job is still running
                time.sleep(0.05)
        return f"{i}".encode()

    df = spark.range(0, 400, numPartitions=2).select(udf(value, "binary", useArrow=False)("id").alias("value"))
    removed = []

    def maintenance_once_a_task_has_staged():  # runs while the job waits on its second task
        while not any(f.endswith(".ledger") for f in staged_files(root)):
            staged_one.wait(0.05)
        removed.extend(Broker(root).maintenance(orphan_grace_ms=0).files_removed)
        go.touch()

    helper = threading.Thread(target=maintenance_once_a_task_has_staged, daemon=True)
    helper.start()
    df.write.format("kop").mode("append").option("kop.root", root).option("topic", "dst").save()
    helper.join(60)
    assert go.exists(), "maintenance never ran during the job"
    assert not [f for f in removed if f.startswith("_staging/")], "a live job's staged output was removed"
    assert _values(broker, "dst") == sorted(f"{i}".encode() for i in range(400))


def test_a_micro_batchs_abort_leaves_no_mark_its_rerun_would_trip_on(root, broker):
    """Spark runs an aborted micro-batch again as the same writer (query id) and batch id: its
    abort deletes what the ended tasks staged, and marks nothing, unlike a batch job's."""
    broker.create_topic("dst", partitions=1)
    task_dir = broker.sink_commits.task_dir("query", 4, "0-0-ended")
    staged = broker.sink_commits.stage("dst", 0, task_dir)
    staged.append([build_record_batch([Record(b"v")])])
    ended = KopCommitMessage("query", 4, 0, tuple(("dst", 0, ledger) for ledger in staged.finish()))
    schema = StructType([StructField("value", BinaryType())])
    KopStreamWriter(SinkOptions.parse({"kop.root": root, "topic": "dst"}), schema).abort([ended, None], 4)
    assert staged_files(root) == []
    assert broker.store.get(layout.sink_key("query")).value is None


@pytest.mark.slow
def test_a_rerun_after_a_thousand_batch_jobs_is_not_applied_twice(spark, root, broker, tmp_path):
    broker.create_topic("src", partitions=1)
    broker.create_topic("dst", partitions=2)
    broker.produce("src", [Record(f"q{i}".encode()) for i in range(50)], partition=0)
    checkpoint = str(tmp_path / "ck")
    q = _query(spark, root, checkpoint)
    q.awaitTermination(300)
    forget_last_batch_commit(checkpoint)
    # Meanwhile, many batch jobs write the same partitions (each df.write is a new writer).
    options = SinkOptions.parse({"kop.root": root, "topic": "dst"})
    for i in range(1100):
        writer = KopBatchWriter(options)
        message = writer.write(iter([pa.RecordBatch.from_pydict({"value": [f"j{i}".encode()]})]))
        writer.commit([message])
    q = _query(spark, root, checkpoint)
    q.awaitTermination(300)
    values = _values(broker, "dst")
    assert [v for v in values if v.startswith(b"q")] == sorted(f"q{i}".encode() for i in range(50)), (
        "the rerun was applied twice"
    )
    assert len(values) == 50 + 1100
    for p in (0, 1):  # batch jobs leave no record behind; the query keeps its own
        ml: ManagedLedger = broker.managed_ledger("dst", p)
        assert len(ml.view() and ml.store.get(ml.key).value.get("sinks", {})) <= 1
    assert uuid.UUID(next(iter(broker.store.list_keys("sinks"))).split("/")[1])
