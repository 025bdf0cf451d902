"""The kop command line, run as a user runs it: a real subprocess."""

import json
import os
import subprocess

from .conftest import PYTHON, python_subprocess_env


def kop(root, *args, stdin=None):
    return subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "--root", root, *args],
        input=stdin, capture_output=True, text=True, env=python_subprocess_env(),
    )


def test_topics_produce_consume(root):
    assert kop(root, "topics", "create", "events", "--partitions", "2", "--config", "retention.ms=-1").returncode == 0
    assert kop(root, "topics", "list").stdout.split() == ["events"]
    out = kop(root, "produce", "events", "--key-separator", ":", "--header", "source=test", stdin="a:one\nb:two\na:three\n")
    assert out.returncode == 0 and "Produced 3 records" in out.stderr
    out = kop(root, "consume", "events", "--from-beginning", "--print-key", "--print-offset")
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 3 and {l.split("\t")[1] + ":" + l.split("\t")[2] for l in lines} == {"a:one", "b:two", "a:three"}
    assert "Processed a total of 3 messages" in out.stderr
    recs = [json.loads(l) for l in kop(root, "consume", "events", "--from-beginning", "--format", "json").stdout.splitlines()]
    assert {r["value"] for r in recs} == {"one", "two", "three"}
    assert all(r["headers"] == [{"key": "source", "value": "test"}] for r in recs)
    three = next(r for r in recs if r["value"] == "three")
    out = kop(root, "consume", "events", "--partition", str(three["partition"]), "--offset", str(three["offset"]))
    assert out.stdout == "three\n"
    out = kop(root, "consume", "events", "--partition", str(three["partition"]), "--from-timestamp", str(three["timestamp"]), "--format", "json")
    same_partition = sorted((r for r in recs if r["partition"] == three["partition"]), key=lambda r: r["offset"])
    assert [json.loads(l)["value"] for l in out.stdout.splitlines()] == [r["value"] for r in same_partition if r["timestamp"] >= three["timestamp"]]
    assert kop(root, "consume", "events").stdout == ""  # default start is latest, as in Kafka

    desc = kop(root, "topics", "describe", "events").stdout.splitlines()
    assert desc[0].startswith("Topic: events\tFullName: persistent://public/default/events\tPartitionCount: 2")
    assert "retention.ms=-1" in desc[0]
    assert sum(int(l.split("LogEndOffset: ")[1].split("\t")[0]) for l in desc[1:]) == 3

    assert kop(root, "topics", "alter", "events", "--partitions", "3").returncode == 0
    assert "PartitionCount: 3" in kop(root, "topics", "describe", "events").stdout
    assert kop(root, "topics", "delete", "events").returncode == 0
    assert kop(root, "topics", "list").stdout == ""


def test_dump_ledger(root):
    small = ("--conf", "managedLedgerMaxEntriesPerLedger=2")
    assert kop(root, *small, "topics", "create", "t").returncode == 0
    # The CLI sends 1000 lines per batch: 2500 lines are 3 entries, 2 in the first ledger.
    kop(root, *small, "produce", "t", stdin="".join(f"line{i}\n" for i in range(2500)))
    ledgers = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".ledger")]
    dumps = {l: kop(root, "dump-ledger", l, "--print-data-log") for l in ledgers}
    assert all(o.returncode == 0 for o in dumps.values())
    ledger, out = next((l, o) for l, o in dumps.items() if "BaseOffset: 0 " in o.stdout)
    assert "State: sealed" in out.stdout and "Sealed: true" in out.stdout
    entries = [l for l in out.stdout.splitlines() if l.startswith("position:")]
    assert len(entries) == 2
    assert "baseOffset: 1000 lastOffset: 1999 count: 1000" in entries[1] and "crcValid: true" in entries[1]
    assert "| offset: 1999 " in out.stdout and "value: line1999 " in out.stdout
    # A torn tail is shown for what it is, and the valid entries before it still are.
    with open(ledger, "r+b") as f:
        f.truncate(os.path.getsize(ledger) - 100)
    out = kop(root, "dump-ledger", ledger)
    assert "corrupt or torn entry" in out.stdout and len([l for l in out.stdout.splitlines() if l.startswith("position:")]) == 1
    assert out.returncode == 1  # confirmed data is damaged


def test_errors_are_clear_and_exit_1(root):
    out = kop(root, "consume", "missing")
    assert out.returncode == 1 and "error: topic 'missing' does not exist" in out.stderr
    out = kop(root, "topics", "create", "bad name!")
    assert out.returncode == 1 and "'bad name!'" in out.stderr
    kop(root, "topics", "create", "t")
    out = kop(root, "consume", "t", "--partition", "0", "--offset", "5")
    assert out.returncode == 1 and "offset 5 is out of range for t-0" in out.stderr
    out = kop(root, "produce", "t", "--key-separator", ":", stdin="no separator here\n")
    assert out.returncode == 1 and "no key separator" in out.stderr
    out = kop(root, "--conf", "noSuchSetting=1", "topics", "list")
    assert out.returncode == 1 and "noSuchSetting" in out.stderr
    out = kop(root, "dump-ledger", os.path.join(root, "nope.ledger"))
    assert out.returncode == 1 and "nope.ledger does not exist" in out.stderr


def test_groups_tools(root):
    from kop_spark import Broker, Record

    b = Broker(root)
    b.create_topic("orders", 2)
    for p in range(2):
        b.produce("orders", [Record(f"{p}-{i}".encode(), timestamp_ms=1_800_000_000_000 + i) for i in range(10)], partition=p)
    b.commit_offsets("my-group", {("orders", 0): 4, ("orders", 1): 10})
    b.close()

    assert kop(root, "groups", "list").stdout.split() == ["my-group"]
    out = kop(root, "groups", "describe", "my-group").stdout.splitlines()
    assert out[1] == "Consumer group 'my-group' has no active members."
    assert out[3].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert out[4].split() == ["my-group", "orders", "0", "4", "10", "6", "-", "-", "-"]
    assert out[5].split() == ["my-group", "orders", "1", "10", "10", "0", "-", "-", "-"]
    assert out[3].index("TOPIC") == out[4].index("orders")  # columns line up

    def reset(*args):
        got = kop(root, "groups", "reset-offsets", "my-group", *args, "--output", "json")
        assert got.returncode == 0, got.stderr
        return {(r["topic"], r["partition"]): r["new_offset"] for r in json.loads(got.stdout)}

    assert reset("--all-topics", "--to-earliest") == {("orders", 0): 0, ("orders", 1): 0}
    assert reset("--topic", "orders:1", "--shift-by", "5") == {("orders", 1): 10}  # clamped to the log end
    assert reset("--topic", "orders", "--shift-by", "-7") == {("orders", 0): 0, ("orders", 1): 3}  # clamped to the start
    assert reset("--topic", "orders:0", "--to-offset", "99") == {("orders", 0): 10}
    assert reset("--topic", "orders:0", "--to-current") == {("orders", 0): 4}
    assert reset("--topic", "orders:0", "--to-datetime", "2027-01-15T08:00:00.003Z") == {("orders", 0): 3}
    assert reset("--topic", "orders:0", "--by-duration", "PT1H") == {("orders", 0): 0}  # all records are newer than an hour ago
    assert json.loads(kop(root, "groups", "describe", "my-group", "--output", "json").stdout)[0]["current_offset"] == 4  # dry run
    text = kop(root, "groups", "reset-offsets", "my-group", "--topic", "orders:0", "--to-latest", "--execute").stdout.splitlines()
    assert text[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"] and text[2].split() == ["my-group", "orders", "0", "10"]
    assert json.loads(kop(root, "groups", "describe", "my-group", "--output", "json").stdout)[0]["lag"] == 0

    bad = kop(root, "groups", "reset-offsets", "my-group", "--all-topics")
    assert bad.returncode == 1 and "exactly one of --to-earliest" in bad.stderr
    bad = kop(root, "groups", "reset-offsets", "my-group", "--to-latest")
    assert bad.returncode == 1 and "--topic or --all-topics" in bad.stderr
    bad = kop(root, "groups", "reset-offsets", "my-group", "--all-topics", "--by-duration", "1h")
    assert bad.returncode == 1 and "PnDTnHnMnS" in bad.stderr

    out = kop(root, "groups", "delete-offsets", "my-group", "--topic", "orders:1").stdout.splitlines()
    assert out[-1].split() == ["orders", "1", "Successful"]
    assert kop(root, "groups", "delete", "my-group").stdout.strip() == "Deletion of requested consumer groups ('my-group') was successful."
    missing = kop(root, "groups", "describe", "my-group")
    assert missing.returncode == 1 and "Consumer group 'my-group' does not exist." in missing.stderr
