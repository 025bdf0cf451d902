"""Runs one housekeeping operation in a loop against a store that other processes write to, until
told to stop on stdin; then, the writers done, a few rounds more until one compaction lands, so
that the test has one to check however the rounds fell (the writers may be done before any
compaction was due). Prints the rounds done."""

import sys
import threading

from kop_spark import Broker, OffsetOutOfRangeError, Record

root, operation = sys.argv[1], sys.argv[2]
b = Broker(root, conf={"managedLedgerMergeInPassing": 0})
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()


def one_round() -> bool:
    """One round of the operation; whether it did its work (only a compaction can give way)."""
    if operation == "maintenance":
        b.maintenance(target_ledger_bytes=4096, orphan_grace_ms=0)
    elif operation == "retention":
        b.enforce_retention("t")
        try:  # a reader racing the deletions: out of range at worst, never a missing file
            b.fetch("t", 0, b.list_offsets("t", 0, "earliest"), max_records=50)
        except OffsetOutOfRangeError:
            pass
    elif operation == "compaction":
        return b.compact_partition("t", 0) is not None
    elif operation == "cleaning":
        return bool(b.clean_logs("t").partitions_compacted)
    elif operation == "expiry":
        b.expire_offsets()
    elif operation == "deletion":
        b.create_topic("x", 2)
        b.produce("x", [Record(b"x")], 0)
        b.delete_topic("x")
        b.maintenance(orphan_grace_ms=0)
    return True


print("ready", flush=True)
rounds = 0
while not stop.is_set():
    one_round()
    rounds += 1
for _ in range(10):
    rounds += 1
    if one_round():
        break
b.close()
print(rounds, flush=True)
