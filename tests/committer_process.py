"""Commits offsets for its own group, printing each commit once it is acknowledged."""

import sys

from kop_spark import Broker

root, group, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = Broker(root)
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(1)
for i in range(commits):
    b.commit_offsets(group, {("t", 0): i + 1})
    print(i + 1, flush=True)
b.close()
