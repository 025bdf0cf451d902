"""A Spark driver for the exactly-once crash test: read topic "in" with a consumer group, transform,
write topic "out" exactly-once; small micro-batches so a kill -9 lands in every phase of them.
Prints "done" once everything in "in" has been processed."""

import sys

from pyspark.sql import SparkSession

root, checkpoint = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
query = (
    spark.readStream.format("kop")
    .option("kop.root", root)
    .option("subscribe", "in")
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "40")  # several batches to be killed between
    .option("group.id", "pipeline")
    .option("includeHeaders", "true")
    .load()
    .selectExpr("key", "concat('out:', cast(value as string)) as value", "headers")
    .writeStream.format("kop")
    .option("kop.root", root)
    .option("topic", "out")
    .option("checkpointLocation", checkpoint)
    .start()
)
print("started", flush=True)
query.processAllAvailable()
query.stop()
print("done", flush=True)
