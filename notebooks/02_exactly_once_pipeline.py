# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once pipeline: topic → Spark → topic
# MAGIC
# MAGIC A streaming query reads `payments`, keeps the large ones and writes `large-payments`. Each
# MAGIC micro-batch is appended once even if the query is restarted in the middle of it: the sink stages
# MAGIC each task's output and appends it keyed by (query id, batch id). `Trigger.AvailableNow` is all
# MAGIC serverless compute allows, and all this needs.

# COMMAND ----------

# MAGIC %pip install kop-spark

# COMMAND ----------

import os
import time

from pyspark.sql import SparkSession

import kop_spark

spark = SparkSession.builder.getOrCreate()
try:  # Databricks: the store root from a widget, a cloud URI (s3://, abfss://, gs://)
    dbutils.widgets.text("root", "s3://my-bucket/kop", "kop store root")  # noqa: F821
    ROOT = dbutils.widgets.get("root")  # noqa: F821
except NameError:
    ROOT = os.environ.get("KOP_ROOT", "./kop-data/notebooks")
kop_spark.register(spark)  # Spark looks for data sources once per session, before %pip installed this one
CHECKPOINT = os.path.join(ROOT, "_checkpoints", "large-payments")

# COMMAND ----------

broker = kop_spark.Broker(ROOT)
for topic in ("payments", "large-payments"):
    if topic not in broker.list_topics():
        broker.create_topic(topic, partitions=2)
now = int(time.time() * 1000)
for i in range(0, 500, 50):
    broker.produce("payments", [
        kop_spark.Record(key=f"acct-{j % 11}".encode(), value=str(j % 97).encode(), timestamp_ms=now)
        for j in range(i, i + 50)
    ])

# COMMAND ----------

def run_once():
    payments = (spark.readStream.format("kop")
                .option("kop.root", ROOT)
                .option("subscribe", "payments")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "200")
                .option("group.id", "large-payments-job")
                .load())
    query = (payments.where("cast(cast(value as string) as int) >= 50")
             .selectExpr("key", "value", "array(named_struct('key', 'from', 'value', cast(concat(topic, '-', partition, '@', offset) as binary))) as headers")
             .writeStream.format("kop")
             .option("kop.root", ROOT)
             .option("topic", "large-payments")
             .option("checkpointLocation", CHECKPOINT)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()

run_once()
run_once()  # a second run finds nothing new: nothing is written twice

# COMMAND ----------

def values(topic):
    return [r.value for p in range(2) for r in broker.fetch(topic, p, broker.list_offsets(topic, p, "earliest"), max_records=1 << 30)]

large = [v for v in values("payments") if int(v) >= 50]
written = values("large-payments")
print(f"{len(large)} large payments in, {len(written)} out")
assert sorted(written) == sorted(large)
broker.close()
