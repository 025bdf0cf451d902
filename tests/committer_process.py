"""Commits offsets in a loop for the group tests; prints each commit once it returned."""

import sys

from kop_spark import Broker

root, group, mode = sys.argv[1], sys.argv[2], sys.argv[3]
commits = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000  # how many, then exit
b = Broker(root)
if mode == "fetch":  # print the group's offsets as this process sees them
    for (t, p), o in sorted(b.fetch_offsets(group).items()):
        print(f"{t} {p} {o.offset}")
    sys.exit(0)
partitions = b.partitions_for("t")
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(1)
for i in range(1, commits + 1):
    if mode == "all-partitions":  # one commit of every partition, all at offset i
        b.commit_offsets(group, {("t", p): i for p in range(partitions)})
    elif mode == "expired-then-fresh":  # group-i: an offset already expired, then a fresh one
        b.commit_offsets(f"{group}-{i}", {("t", 0): i}, expire_timestamp_ms=1)
        b.commit_offsets(f"{group}-{i}", {("t", 0): i + 1})
    else:
        b.commit_offsets(group, {("t", 0): i})
    print(i, flush=True)
b.close()
