# Databricks notebook source
# MAGIC %md
# MAGIC # kop-spark: quick start
# MAGIC
# MAGIC Kafka-style topics on ledgers, read and written by Spark with `format("kop")` exactly as with
# MAGIC `format("kafka")`. The store is a cloud URI on Databricks (the `root` widget) or a directory;
# MAGIC offsets are continuous: 0, 1, 2, … with no gaps.
# MAGIC
# MAGIC Runs unchanged as plain Python: `python notebooks/01_quick_start.py` (store in `$KOP_ROOT`).

# COMMAND ----------

# MAGIC %pip install kop-spark

# COMMAND ----------

import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import kop_spark

spark = SparkSession.builder.getOrCreate()  # on Databricks: the notebook's session
try:  # Databricks: the store root from a widget, a cloud URI (s3://, abfss://, gs://)
    dbutils.widgets.text("root", "s3://my-bucket/kop", "kop store root")  # noqa: F821
    ROOT = dbutils.widgets.get("root")  # noqa: F821
except NameError:
    ROOT = os.environ.get("KOP_ROOT", "./kop-data/notebooks")
kop_spark.register(spark)  # Spark looks for data sources once per session, before %pip installed this one
try:
    display  # noqa: B018 - Databricks renders DataFrames and charts
except NameError:
    def display(df):
        df.show(truncate=False)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Create a topic and write to it from Spark
# MAGIC Columns as for the Kafka sink: `value` (required), `key`, `topic`, `partition`, `headers`, `timestamp`.

# COMMAND ----------

broker = kop_spark.Broker(ROOT)
if "orders" not in broker.list_topics():
    broker.create_topic("orders", partitions=3)
before = sum(broker.list_offsets("orders", p, "latest") for p in range(3))

orders = spark.createDataFrame(
    [(f"customer-{i % 7}", f'{{"order": {i}, "amount": {i * 3 % 40}}}') for i in range(100)],
    "key string, value string",
)
orders.write.format("kop").mode("append").option("kop.root", ROOT).option("topic", "orders").save()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read it back: the Kafka source's schema and options

# COMMAND ----------

df = (spark.read.format("kop")
      .option("kop.root", ROOT)
      .option("subscribe", "orders")
      .option("startingOffsets", "earliest")
      .load())
df.printSchema()
display(df.selectExpr("partition", "offset", "cast(key as string) key", "cast(value as string) value").orderBy("partition", "offset").limit(10))

# COMMAND ----------

stats = df.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("first"), F.max("offset").alias("last"))
per_partition = {r.partition: (r.n, r.first, r.last) for r in stats.collect()}
print(per_partition)
# Continuous offsets: each partition holds exactly offsets first..last, and all 100 new orders are there.
assert all(n == last - first + 1 for n, first, last in per_partition.values())
assert sum(n for n, _, _ in per_partition.values()) == before + 100
broker.close()
