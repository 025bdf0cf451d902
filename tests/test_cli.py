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


def test_demo_runs_end_to_end(tmp_path):
    out = subprocess.run([PYTHON, "-m", "kop_spark.demo", str(tmp_path / "demo")], capture_output=True, text=True, env=python_subprocess_env())
    assert out.returncode == 0, out.stderr
    consumed = [l for l in out.stdout.splitlines() if "\tuser-" in l]
    assert len(consumed) == 12 and {l.split("\t")[2] for l in consumed} == {f"clicked item {i}" for i in range(12)}
