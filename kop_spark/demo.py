"""The main job: an exactly-once Spark pipeline on the embedded local store.

Produces click events to topic ``clicks``, runs a Spark structured-streaming query that reads them
with consumer group ``click-enricher``, enriches them, and writes topic ``clicks-enriched``
exactly-once; then prints the group's lag and the counts. Run it again: it picks up where it left
off (new events only), and the output still holds every input record exactly once.

    python -m kop_spark.demo [ROOT]        default ROOT: storageRoot of conf/kop.conf (./kop-data)
"""

from __future__ import annotations

import json
import os
import sys

from . import Broker, Record
from .cli import main as kop
from .clock import now_ms

SOURCE, SINK, GROUP = "clicks", "clicks-enriched", "click-enricher"
EVENTS_PER_RUN = 2000


def produce_events(b: Broker) -> int:
    for topic in (SOURCE, SINK):
        if topic not in b.list_topics():
            b.create_topic(topic, partitions=3)
    start = sum(b.list_offsets(SOURCE, p, "latest") for p in range(3))
    now = now_ms()
    for i in range(start, start + EVENTS_PER_RUN, 100):
        b.produce(
            SOURCE,
            [
                Record(
                    key=f"user-{j % 17}".encode(),
                    value=json.dumps({"id": j, "page": f"/item/{j % 50}"}).encode(),
                    timestamp_ms=now,
                    headers=[("source", b"demo")],
                )
                for j in range(i, i + 100)
            ],
        )
    return EVENTS_PER_RUN


def run_pipeline(root: str) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kop-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    clicks = (
        spark.readStream.format("kop")
        .option("kop.root", root)
        .option("subscribe", SOURCE)
        .option("startingOffsets", "earliest")
        .option("group.id", GROUP)
        .option("maxOffsetsPerTrigger", "1000")
        .load()
    )
    enriched = clicks.selectExpr(
        "key",
        "to_json(named_struct('id', get_json_object(cast(value as string), '$.id'),"
        " 'user', cast(key as string), 'page', get_json_object(cast(value as string), '$.page'),"
        " 'source_offset', concat(topic, '-', partition, '@', offset))) as value",
    )
    query = (
        enriched.writeStream.format("kop")
        .option("kop.root", root)
        .option("topic", SINK)
        .option("checkpointLocation", os.path.join(root, "_checkpoints", "demo"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    print(f"Spark processed {sum(p['numInputRows'] for p in batches)} records in {len(batches)} micro-batches.")
    spark.stop()


def main(argv: list[str]) -> None:
    with Broker(argv[0] if argv else None) as b:
        root = os.path.abspath(b.root)
        print(f"Producing {produce_events(b)} click events to topic '{SOURCE}' in {root}")
    run_pipeline(root)
    print(f"\n$ kop groups describe --group {GROUP}")
    kop(["--root", root, "groups", "describe", "--group", GROUP])
    with Broker(root) as b:
        counts = {
            t: sum(b.list_offsets(t, p, "latest") - b.list_offsets(t, p, "earliest") for p in range(3))
            for t in (SOURCE, SINK)
        }
        sample = b.fetch(SINK, 0, b.list_offsets(SINK, 0, "earliest"), max_records=1)
    print(f"\n{SOURCE}: {counts[SOURCE]} records   {SINK}: {counts[SINK]} records")
    if sample:
        print(f"e.g. {SINK}-0@{sample[0].offset}: {(sample[0].value or b'').decode()}")
    if counts[SOURCE] != counts[SINK]:
        sys.exit("the output does not hold every input record exactly once")


if __name__ == "__main__":
    main(sys.argv[1:])
