# Databricks notebook source
# MAGIC %md
# MAGIC # Consumer-group lag
# MAGIC
# MAGIC A query with `group.id` commits the offsets of every completed micro-batch to the offsets topic,
# MAGIC as a Kafka consumer would, so the group's lag is there to see, chart and alert on; `kop groups`
# MAGIC shows the same numbers in `kafka-consumer-groups.sh`'s layout.

# COMMAND ----------

# MAGIC %pip install kop-spark

# COMMAND ----------

import os
import time

from pyspark.sql import SparkSession

import kop_spark
import kop_spark.cli

spark = SparkSession.builder.getOrCreate()
try:  # Databricks: the store root from a widget, a cloud URI (s3://, abfss://, gs://)
    dbutils.widgets.text("root", "s3://my-bucket/kop", "kop store root")  # noqa: F821
    ROOT = dbutils.widgets.get("root")  # noqa: F821
except NameError:
    ROOT = os.environ.get("KOP_ROOT", "./kop-data/notebooks")
kop_spark.register(spark)  # Spark looks for data sources once per session, before %pip installed this one
try:
    display  # noqa: B018
except NameError:
    def display(df):
        """Plain Python: a text bar chart of the lag per partition."""
        rows = df.collect()
        top = max([r.lag for r in rows] + [1])
        for r in rows:
            print(f"{r.topic}-{r.partition:<3} {'#' * round(40 * r.lag / top):<40} {r.lag}")

# COMMAND ----------

broker = kop_spark.Broker(ROOT)
if "sensor-readings" not in broker.list_topics():
    broker.create_topic("sensor-readings", partitions=4)
now = int(time.time() * 1000)
for p in range(4):
    broker.produce("sensor-readings", [kop_spark.Record(value=b"%d" % i, timestamp_ms=now) for i in range(100 * (p + 1))], partition=p)

# COMMAND ----------

# MAGIC %md
# MAGIC Process the backlog in micro-batches of at most 300 records, then stop the query; more readings
# MAGIC arrive after it. (With `Trigger.AvailableNow` the group learns of a run's last batch on Spark 4.2
# MAGIC and later only: older runtimes tell a Python source nothing once that batch is done.)

# COMMAND ----------

readings = (spark.readStream.format("kop")
            .option("kop.root", ROOT)
            .option("subscribe", "sensor-readings")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "300")
            .option("group.id", "sensor-dashboard")
            .load())
query = (readings.writeStream.format("noop")
         .option("checkpointLocation", os.path.join(ROOT, "_checkpoints", "sensor-dashboard"))
         .start())
query.processAllAvailable()
query.stop()
for p in range(1, 4):  # more readings arrive after the run
    broker.produce("sensor-readings", [kop_spark.Record(value=b"late", timestamp_ms=now)] * (10 * p), partition=p)

# COMMAND ----------

committed = broker.fetch_offsets("sensor-dashboard")
lag = spark.createDataFrame(
    [(t, p, committed[(t, p)].offset, broker.list_offsets(t, p, "latest"),
      broker.list_offsets(t, p, "latest") - committed[(t, p)].offset) for (t, p) in sorted(committed)],
    "topic string, partition int, current_offset long, log_end_offset long, lag long",
)
display(lag)  # on Databricks: choose the bar chart, partition on the x axis, lag on the y axis

# COMMAND ----------

kop_spark.cli.main(["--root", ROOT, "groups", "describe", "--group", "sensor-dashboard"])
assert [r.lag for r in lag.orderBy("partition").collect()] == [0, 10, 20, 30]
broker.close()
