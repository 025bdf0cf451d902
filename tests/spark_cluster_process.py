"""A Spark application in local-cluster mode (executors in their own JVMs and Python workers, as on
a cluster): batch-writes a topic and reads it back on a store root given on the command line, so
nothing can rely on a local disk shared between driver and executors. Prints what it read."""

import json
import sys

from pyspark.sql import SparkSession

root, n = sys.argv[1], int(sys.argv[2])
spark = (
    SparkSession.builder.master("local-cluster[2,1,1024]")
    .config("spark.ui.enabled", "false")
    .config("spark.executor.memory", "512m")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
(
    spark.range(n)
    .selectExpr("cast(id % 5 as string) as key", "cast(id as string) as value")
    .repartition(2)
    .write.format("kop")
    .mode("append")
    .option("kop.root", root)
    .option("topic", "t")
    .save()
)
rows = spark.read.format("kop").option("kop.root", root).option("subscribe", "t").load()
print(json.dumps(sorted(int(r.value) for r in rows.select("value").collect())), flush=True)
spark.stop()
