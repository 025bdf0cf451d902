"""A producer process for crash and concurrency tests: prints each append once it is confirmed."""

import json
import random
import sys

from kop_spark import Broker, Record

root, name, appends, max_entries = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
conf = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}  # the store's other settings
rng = random.Random(name)
b = Broker(root, conf={**conf, "managedLedgerMaxEntriesPerLedger": max_entries})
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":  # a start line, so concurrent writers really overlap
    sys.exit(1)
for i in range(appends):
    n = rng.randint(1, 5)
    records = [Record(value=f"{name}/{i}/{j}".encode(), key=name.encode()) for j in range(n)]
    ((_, base, count),) = b.produce("t", records, partition=0)
    print(f"{i} {base} {count}", flush=True)
b.close()
