"""The kop command line, run as a user runs it: a real subprocess."""

import datetime
import json
import os
import subprocess
import time

from .conftest import PYTHON, python_subprocess_env


def kop(root, *args, stdin=None):
    if "consume" in args and "--timeout-ms" not in args:
        args = (*args, "--timeout-ms", "0")  # stop at the end of what is there, instead of following
    return subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "--root", root, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=python_subprocess_env(),
    )


def test_topics_produce_consume(root):
    assert kop(root, "topics", "create", "events", "--partitions", "2", "--config", "retention.ms=-1").returncode == 0
    assert kop(root, "topics", "list").stdout.split() == ["events"]
    out = kop(
        root, "produce", "events", "--key-separator", ":", "--header", "source=test", stdin="a:one\nb:two\na:three\n"
    )
    assert out.returncode == 0 and "Produced 3 records" in out.stderr
    out = kop(root, "consume", "events", "--from-beginning", "--print-key", "--print-offset")
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 3 and {l.split("\t")[1] + ":" + l.split("\t")[2] for l in lines} == {
        "a:one",
        "b:two",
        "a:three",
    }
    assert "Processed a total of 3 messages" in out.stderr
    recs = [
        json.loads(l)
        for l in kop(root, "consume", "events", "--from-beginning", "--format", "json").stdout.splitlines()
    ]
    assert {r["value"] for r in recs} == {"one", "two", "three"}
    assert all(r["headers"] == [{"key": "source", "value": "test"}] for r in recs)
    three = next(r for r in recs if r["value"] == "three")
    out = kop(root, "consume", "events", "--partition", str(three["partition"]), "--offset", str(three["offset"]))
    assert out.stdout == "three\n"
    out = kop(
        root,
        "consume",
        "events",
        "--partition",
        str(three["partition"]),
        "--from-timestamp",
        str(three["timestamp"]),
        "--format",
        "json",
    )
    same_partition = sorted((r for r in recs if r["partition"] == three["partition"]), key=lambda r: r["offset"])
    assert [json.loads(l)["value"] for l in out.stdout.splitlines()] == [
        r["value"] for r in same_partition if r["timestamp"] >= three["timestamp"]
    ]
    assert kop(root, "consume", "events").stdout == ""  # default start is latest, as in Kafka

    desc = kop(root, "topics", "describe", "events").stdout.splitlines()
    assert desc[0].startswith("Topic: events\tFullName: persistent://public/default/events\tPartitionCount: 2")
    assert "retention.ms=-1" in desc[0]
    assert sum(int(l.split("LogEndOffset: ")[1].split("\t")[0]) for l in desc[1:]) == 3

    assert kop(root, "topics", "alter", "events", "--partitions", "3").returncode == 0
    assert "PartitionCount: 3" in kop(root, "topics", "describe", "events").stdout
    assert kop(root, "topics", "delete", "events").returncode == 0
    assert kop(root, "topics", "list").stdout == ""


def test_topics_list_shows_internal_topics_unless_excluded_as_kafka_topics_does(root):
    from kop_spark import Broker

    with Broker(root) as b:
        b.create_topic("events", 1)
        b.commit_offsets("g", {("events", 0): 1})
    assert kop(root, "topics", "list").stdout.split() == ["__consumer_offsets", "events"]
    assert kop(root, "topics", "list", "--exclude-internal").stdout.split() == ["events"]
    described = kop(root, "topics", "describe").stdout
    assert "Topic: __consumer_offsets\tFullName: persistent://public/__kafka/__consumer_offsets" in described
    assert "__consumer_offsets" not in kop(root, "topics", "describe", "--exclude-internal").stdout


def test_topics_alter_changes_settings_as_kafka_topics_did(root):
    assert kop(root, "topics", "create", "t", "--config", "retention.ms=60000").returncode == 0
    done = kop(root, "topics", "alter", "t", "--config", "max.message.bytes=2000", "--config",
               "cleanup.policy=delete,compact", "--delete-config", "retention.ms", "--partitions", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    described = kop(root, "topics", "describe", "t").stdout
    assert "PartitionCount: 2" in described and "max.message.bytes=2000" in described
    assert "cleanup.policy=compact,delete" in described and "retention.ms=604800000" in described
    for args, message in (
        ((), "give --partitions N, --config KEY=VALUE or --delete-config KEY"),
        (("--config", "retention.ms=soon", "--partitions", "3"), "invalid value 'soon' for setting 'retention.ms'"),
        (("--config", "retention"), "--config 'retention' must be key=value"),
    ):
        refused = kop(root, "topics", "alter", "t", *args)
        assert refused.returncode != 0 and message in refused.stderr
    # a refused change changes nothing, the partitions it came with included
    assert kop(root, "topics", "describe", "t").stdout == described
    refused = kop(root, "topics", "create", "u", "--delete-config", "retention.ms")
    assert refused.returncode == 2 and "--delete-config is for alter" in refused.stderr


def test_delete_records_takes_kafkas_offset_file(root, tmp_path):
    assert kop(root, "topics", "create", "t", "--partitions", "2").returncode == 0
    kop(root, "produce", "t", "--partition", "0", stdin="".join(f"r{i}\n" for i in range(10)))
    offsets = tmp_path / "offsets.json"
    entries = [{"topic": "t", "partition": 0, "offset": 4}, {"topic": "t", "partition": 1, "offset": 5}]
    offsets.write_text(json.dumps({"partitions": entries, "version": 1}))
    done = kop(root, "delete-records", "--offset-json-file", str(offsets))
    # partition 1 is empty: 5 is past its end, and only that partition says so
    assert done.returncode == 1 and "partition: t-0\tlow_watermark: 4" in done.stdout
    assert "partition: t-1\terror: offset 5 is out of range for t-1" in done.stderr
    out = kop(root, "consume", "t", "--partition", "0", "--from-beginning")
    assert out.stdout.split() == [f"r{i}" for i in range(4, 10)]
    offsets.write_text(json.dumps({"partitions": [{"topic": "t", "partition": "0"}]}))
    refused = kop(root, "delete-records", "--offset-json-file", str(offsets))
    assert refused.returncode == 1 and f"--offset-json-file {offsets}: expected" in refused.stderr


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
    assert (
        "corrupt or torn entry" in out.stdout
        and len([l for l in out.stdout.splitlines() if l.startswith("position:")]) == 1
    )
    assert out.returncode == 1  # confirmed data is damaged


def test_errors_are_clear_and_exit_1(root):
    out = kop(root, "topics", "list")
    assert out.returncode == 1 and f"store root {root} does not exist" in out.stderr
    kop(root, "topics", "create", "other")
    out = kop(root, "consume", "missing")
    assert out.returncode == 1 and "error: topic 'missing' does not exist" in out.stderr and root in out.stderr
    out = kop(root, "topics", "create", "bad name!")
    assert out.returncode == 1 and "'bad name!'" in out.stderr
    warning = (  # kafka-topics' words
        "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
        "collide. To avoid issues it is best to use either, but not both."
    )
    out = kop(root, "topics", "create", "public/default/orders.eu")
    assert out.returncode == 0 and out.stdout.splitlines() == [warning, "Created topic public/default/orders.eu."]
    out = kop(root, "topics", "create", "orders_eu")
    assert out.returncode == 1 and "Topic 'orders_eu' collides with existing topic: orders.eu" in out.stderr
    assert out.stdout.splitlines() == [warning]
    assert warning not in kop(root, "topics", "create", "orders-us").stdout
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
    t0 = (int(time.time()) - 60) * 1000  # a minute ago: within retention, an hour and the broker's bounds
    for p in range(2):
        b.produce("orders", [Record(f"{p}-{i}".encode(), timestamp_ms=t0 + i) for i in range(10)], partition=p)
    b.commit_offsets("my-group", {("orders", 0): 4, ("orders", 1): 10})
    b.close()

    assert kop(root, "groups", "list").stdout.split() == ["my-group"]
    out = kop(root, "groups", "describe", "my-group").stdout.splitlines()
    assert out[1] == "Consumer group 'my-group' has no active members."
    assert out[3].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert out[4].split() == ["my-group", "orders", "0", "4", "10", "6", "-", "-", "-"]
    assert out[5].split() == ["my-group", "orders", "1", "10", "10", "0", "-", "-", "-"]
    assert out[3].index("TOPIC") == out[4].index("orders")  # columns line up

    def reset(*args):
        got = kop(root, "groups", "reset-offsets", "my-group", *args, "--output", "json")
        assert got.returncode == 0, got.stderr
        return {(r["topic"], r["partition"]): r["new_offset"] for r in json.loads(got.stdout)}

    assert reset("--all-topics", "--to-earliest") == {("orders", 0): 0, ("orders", 1): 0}
    assert reset("--topic", "orders:1", "--shift-by", "5") == {("orders", 1): 10}  # clamped to the log end
    assert reset("--topic", "orders", "--shift-by", "-7") == {
        ("orders", 0): 0,
        ("orders", 1): 3,
    }  # clamped to the start
    assert reset("--topic", "orders:0", "--to-offset", "99") == {("orders", 0): 10}
    assert reset("--topic", "orders:0", "--to-current") == {("orders", 0): 4}
    third = datetime.datetime.fromtimestamp((t0 + 3) / 1000, datetime.UTC)
    third_text = third.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert reset("--topic", "orders:0", "--to-datetime", third_text) == {("orders", 0): 3}
    assert reset("--topic", "orders:0", "--by-duration", "PT1H") == {
        ("orders", 0): 0
    }  # all records are newer than an hour ago
    assert (
        json.loads(kop(root, "groups", "describe", "my-group", "--output", "json").stdout)[0]["current_offset"] == 4
    )  # dry run
    text = kop(
        root, "groups", "reset-offsets", "my-group", "--topic", "orders:0", "--to-latest", "--execute"
    ).stdout.splitlines()
    assert text[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"] and text[2].split() == [
        "my-group",
        "orders",
        "0",
        "10",
    ]
    assert json.loads(kop(root, "groups", "describe", "my-group", "--output", "json").stdout)[0]["lag"] == 0

    bad = kop(root, "groups", "reset-offsets", "my-group", "--all-topics")
    assert bad.returncode == 1 and "exactly one of --to-earliest" in bad.stderr
    bad = kop(root, "groups", "reset-offsets", "my-group", "--to-latest")
    assert bad.returncode == 1 and "--topic or --all-topics" in bad.stderr
    bad = kop(root, "groups", "reset-offsets", "my-group", "--all-topics", "--by-duration", "1h")
    assert bad.returncode == 1 and "PnDTnHnMnS" in bad.stderr

    out = kop(root, "groups", "delete-offsets", "my-group", "--topic", "orders:1").stdout.splitlines()
    assert out[-1].split() == ["orders", "1", "Successful"]
    assert (
        kop(root, "groups", "delete", "my-group").stdout.strip()
        == "Deletion of requested consumer groups ('my-group') was successful."
    )
    missing = kop(root, "groups", "describe", "my-group")
    assert missing.returncode == 1 and "Consumer group 'my-group' does not exist." in missing.stderr


def _interrupted(root, *args, stdin_path=None, after_s=0.0, started=None, feed=None):
    """Run kop, send SIGINT (Ctrl-C) ``after_s`` seconds after it has started its work (``started``
    says so; else its first line of output), and return (rc, stderr). With ``feed`` (chunks of
    bytes) its stdin is a pipe written by a thread as the process reads it, so the process is
    still at work when the interrupt comes, however fast it is."""
    import signal
    import threading
    import time

    with open(stdin_path or os.devnull, "rb") as stdin:
        p = subprocess.Popen(
            [PYTHON, "-m", "kop_spark.cli", "--root", root, *args],
            stdin=subprocess.PIPE if feed is not None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=python_subprocess_env(),
            # A foreground command gets Ctrl-C even when the tests run in the background, where
            # the shell has them ignore SIGINT (and children inherit that).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        if feed is not None:

            def write() -> None:
                try:
                    for chunk in feed:
                        p.stdin.write(chunk)
                    p.stdin.close()
                except (BrokenPipeError, ValueError):
                    pass  # interrupted: it reads no more

            threading.Thread(target=write, daemon=True).start()
        if started is None:
            p.stdout.readline()
        else:
            while not started() and p.poll() is None:
                time.sleep(0.01)  # polls what the process has done; the interrupt's moment comes next
        # Not synchronisation: a random moment puts the interrupt anywhere in the work.
        time.sleep(after_s)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    return p.returncode, err.decode()


def test_ctrl_c_during_produce_keeps_every_acknowledged_record(root, tmp_path):
    import random
    import re

    lines = [f"k{i % 7}:{i}\n".encode() for i in range(100_000)]
    assert kop(root, "topics", "create", "big", "--partitions", "3").returncode == 0
    rng = random.Random(11)
    acknowledged = interrupted = 0

    for _ in range(6):
        fed, cut = [0], rng.randrange(5_000, 80_000)

        def feed(fed=fed):
            for start in range(0, len(lines), 1000):
                yield b"".join(lines[start : start + 1000])
                fed[0] = start + 1000

        rc, err = _interrupted(
            root,
            "--conf",
            "managedLedgerMaxEntriesPerLedger=3",
            "produce",
            "big",
            "--key-separator",
            ":",
            feed=feed(),
            after_s=rng.uniform(0, 0.05),
            started=lambda fed=fed, cut=cut: fed[0] >= cut,  # the producer has read this far
        )
        if rc == 0:  # the run finished before the interrupt: fine, but not what we are here for
            acknowledged += len(lines)
            continue
        interrupted += 1
        assert rc == 130, err
        assert "Traceback" not in err, err
        acknowledged += int(re.search(r"Produced (\d+) records to big \(acknowledged\)", err).group(1))
        check = kop(root, "verify")
        assert check.returncode == 0, check.stdout + check.stderr
    assert interrupted >= 3, "the interrupts came too late to test anything"
    desc = kop(root, "topics", "describe", "big").stdout
    stored = sum(int(l.split("LogEndOffset: ")[1].split("\t")[0]) for l in desc.splitlines()[1:])
    assert stored >= acknowledged, "acknowledged records were lost"
    assert stored - acknowledged < 6 * 3000, "more stored than acknowledged plus what was in flight"
    out = kop(root, "consume", "big", "--from-beginning")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == stored

    rc, err = _interrupted(root, "consume", "big", "--from-beginning", after_s=0.2)
    assert rc == 130 and "Traceback" not in err, err
    assert re.search(r"Processed a total of \d+ messages", err)


def test_damage_is_reported_and_repaired(root):
    from .test_storage_faults import damaged_store

    b, path = damaged_store(root)
    b.commit_offsets("readers", {("bad", 0): 3})
    dump = kop(root, "dump-ledger", path)
    assert dump.returncode == 1 and "confirms 3 entries but the file holds 2" in dump.stdout
    verify = kop(root, "verify")
    assert verify.returncode == 1 and verify.stdout.startswith("bad-0: ")
    maintenance = kop(root, "maintenance")
    assert maintenance.returncode == 1 and "error: bad-0:" in maintenance.stderr
    dry = kop(root, "repair", "--dry-run")
    assert "bad-0: log end offset would move back from 5 to 2" in dry.stdout
    assert kop(root, "verify").returncode == 1, "a dry run changed the store"
    repaired = kop(root, "repair")
    assert repaired.returncode == 0
    assert "bad-0: log end offset moved back from 5 to 2: offsets 2 to 4 are dropped" in repaired.stdout
    assert "group 'readers': committed offset 3 for bad-0 is past the new log end 2" in repaired.stdout
    assert kop(root, "verify").returncode == 0
    assert kop(root, "consume", "bad", "--from-beginning").stdout == "b0\nb1\n"
    assert kop(root, "consume", "good", "--from-beginning").stdout == "g0\ng1\ng2\ng3\n"


def test_console_producer_names_bad_lines_and_keeps_the_rest(root):
    kop(root, "topics", "create", "t", "--partitions", "1", "--config", "max.message.bytes=2000")
    big = "k:" + "x" * 3000
    out = kop(root, "produce", "--topic", "t", "--property", "parse.key=true", "--property", "key.separator=:",
              stdin=f"a:1\n{big}\nb:2\n")  # fmt: skip
    assert out.returncode == 1 and "line 2: a record of" in out.stderr and "max.message.bytes=2000" in out.stderr
    assert "Produced 2 records to t (acknowledged); 1 rejected." in out.stderr
    out = kop(root, "produce", "t", "--key-separator", ":", stdin="c:3\nno separator\nd:4\n")
    assert out.returncode == 1 and "line 2 has no key separator ':'" in out.stderr
    assert "Produced 1 records" in out.stderr  # the line before the bad one went
    out = kop(root, "produce", "t", "--key-separator", ":", "--property", "ignore.error=true",
              stdin="e:5\nno separator\nf:6\n")  # fmt: skip
    assert "Produced 2 records to t (acknowledged); 1 rejected." in out.stderr
    got = kop(root, "consume", "t", "--from-beginning", "--property", "print.key=true").stdout.splitlines()
    assert got == ["a\t1", "b\t2", "c\t3", "e\t5", "f\t6"]
    out = kop(root, "produce", "t", "--key-separator", "", stdin="x\n")
    assert out.returncode == 1 and "key separator is empty" in out.stderr and "Traceback" not in out.stderr


def test_console_consumer_as_kafkas(root):
    kop(root, "topics", "create", "t", "--partitions", "2")
    from kop_spark import Broker, Record

    with Broker(root) as b:
        for p in (0, 1):
            b.produce("t", [Record(f"p{p}-{i}".encode(), key=b"k") for i in range(600)], partition=p)
    first = kop(root, "consume", "t", "--from-beginning", "--max-messages", "600").stdout.splitlines()
    assert {l[:2] for l in first} == {"p0", "p1"}, "partitions are read in turn, not one after the other"
    assert len(kop(root, "consume", "t", "--from-beginning", "--max-messages", "-1").stdout.splitlines()) == 1200
    out = kop(root, "consume", "--topic", "t", "--partition", "1", "--offset", "599",
              "--property", "print.partition=true", "--property", "print.offset=true", "--property", "print.key=true")  # fmt: skip
    assert out.stdout == "Partition:1\tOffset:599\tk\tp1-599\n"
    out = kop(root, "consume", "t", "--partition", "0", "--offset", "3", "--from-beginning")
    assert out.returncode == 1 and "--from-beginning and --offset" in out.stderr


def test_console_consumer_follows_the_topic(root):
    from kop_spark import Broker, Record

    kop(root, "topics", "create", "t", "--partitions", "1")
    with Broker(root) as b:
        b.produce("t", [Record(b"before")], partition=0)
        p = subprocess.Popen(
            [PYTHON, "-m", "kop_spark.cli", "--root", root, "consume", "t", "--from-beginning", "--timeout-ms", "2000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=python_subprocess_env(),
        )
        assert p.stdout.readline() == "before\n"
        b.produce("t", [Record(b"after")], partition=0)  # while the consumer waits for more
        assert p.stdout.readline() == "after\n"
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "Processed a total of 2 messages" in err


def test_keyless_lines_of_separate_producers_spread_over_partitions(root):
    kop(root, "topics", "create", "t", "--partitions", "4")
    for i in range(8):
        assert kop(root, "produce", "t", stdin=f"line{i}\n").returncode == 0
    out = kop(root, "consume", "t", "--from-beginning", "--property", "print.partition=true").stdout
    partitions = {l.split("\t")[0] for l in out.splitlines()}
    # Each process starts its sticky partition at random: all eight on one partition is a 1 in 16,384 chance.
    assert len(partitions) > 1, out


def test_root_and_conf_anywhere_and_from_the_environment(root):
    assert kop(root, "topics", "create", "t").returncode == 0
    after = subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "topics", "list", "--root", root], capture_output=True, text=True,
        env=python_subprocess_env(),
    )  # fmt: skip
    assert after.stdout.split() == ["t"]
    env = {**python_subprocess_env(), "KOP_ROOT": root}
    from_env = subprocess.run(
        [PYTHON, "-m", "kop_spark.cli", "topics", "list"], capture_output=True, text=True, env=env
    )
    assert from_env.stdout.split() == ["t"]
    bad = kop(root, "topics", "list", "--conf", "noSuchSetting=1")
    assert bad.returncode == 1 and "--conf" in bad.stderr and "kop config" in bad.stderr
    settings = kop(root, "config", "--conf", "retention.ms=5", "--conf", "ssl.key.password=s3cret!").stdout
    assert "retention.ms=5\t(default 604800000; topic)" in settings and "storageRoot=" in settings
    assert "ssl.key.password=[hidden]\t" in settings and "s3cret!" not in settings, "credentials never in clear"


def test_group_resets_warn_refuse_and_mark_dry_runs(root):
    from kop_spark import Broker, Record

    with Broker(root) as b:
        b.create_topic("orders", 1)
        b.produce("orders", [Record(b"v")] * 10, partition=0)
        b.commit_offsets("g", {("orders", 0): 4})
    out = kop(root, "groups", "reset-offsets", "g", "--topic", "orders:0", "--to-offset", "99", "--output", "json")
    assert json.loads(out.stdout) == [
        {"group": "g", "topic": "orders", "partition": 0, "new_offset": 10, "dry_run": True}
    ]
    assert (
        "New offset (99) is higher than latest offset for topic partition orders-0. Value will be set to 10"
        in out.stderr
    )
    both = kop(root, "groups", "reset-offsets", "g", "--topic", "orders", "--to-latest", "--dry-run", "--execute")
    assert both.returncode == 1 and "--dry-run or --execute, not both" in both.stderr


def test_deleting_a_topic_deletes_its_group_offsets(root):
    from kop_spark import Broker, Record

    with Broker(root) as b:
        for t in ("orders", "other"):
            b.create_topic(t, 1)
            b.produce(t, [Record(b"v")] * 5, partition=0)
        b.commit_offsets("g", {("orders", 0): 5, ("other", 0): 3})
        b.delete_topic("orders")
        b.create_topic("orders", 1)  # the name again: a new topic, no history
        assert b.fetch_offsets("g") == {("other", 0): b.fetch_offsets("g")[("other", 0)]}
    described = json.loads(kop(root, "groups", "describe", "g", "--output", "json").stdout)
    assert [(r["topic"], r["current_offset"]) for r in described] == [("other", 3)]


def test_null_and_empty_are_told_apart_by_consume_and_dump_ledger(root):
    from kop_spark import Broker, Record

    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", [Record(None, key=b""), Record(b"", key=None)], partition=0)
    out = kop(root, "consume", "t", "--from-beginning", "--property", "print.key=true").stdout
    assert out == "\tnull\nnull\t\n"
    (ledger,) = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".ledger")]
    dump = kop(root, "dump-ledger", ledger, "--print-data-log").stdout
    assert "key:  value: null " in dump and "key: null value:  " in dump


def test_console_consumer_with_a_group_resumes_and_commits(root):
    from kop_spark import Broker, Record

    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", [Record(f"v{i}".encode()) for i in range(5)], partition=0)
    first = kop(root, "consume", "t", "--group", "g", "--from-beginning", "--max-messages", "3").stdout
    assert first == "v0\nv1\nv2\n"
    again = kop(root, "consume", "t", "--group", "g", "--from-beginning").stdout
    assert again == "v3\nv4\n"  # the group's offset wins over --from-beginning, as in Kafka
    lag = json.loads(kop(root, "groups", "describe", "g", "--output", "json").stdout)
    assert [(r["current_offset"], r["lag"]) for r in lag] == [(5, 0)]


def test_resetting_a_group_a_spark_query_commits_to_says_the_checkpoint_wins(root):
    from kop_spark import Broker, Record
    from kop_spark.broker import SPARK_COMMIT, OffsetAndMetadata

    with Broker(root) as b:
        b.create_topic("t", 1)
        b.produce("t", [Record(b"v")] * 3, partition=0)
        b.commit_offsets("by-hand", {("t", 0): 1})
        b.commit_offsets("by-query", {("t", 0): OffsetAndMetadata(2, SPARK_COMMIT)})
    args = ("--topic", "t", "--to-earliest")
    assert "checkpoint" not in kop(root, "groups", "reset-offsets", "by-hand", *args).stderr
    note = kop(root, "groups", "reset-offsets", "by-query", *args).stderr
    assert "last committed by a kop Spark streaming query" in note and "new checkpointLocation" in note


def test_corruption_errors_name_the_entry_position_dump_ledger_lists(root):
    from kop_spark import Broker, Record

    with Broker(root) as b:
        b.create_topic("t", 1)
        for i in range(3):  # three entries, so the damaged one is not at the start of the file
            b.produce("t", [Record(f"v{i}".encode())], partition=0)
    (ledger,) = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".ledger")]
    positions = [
        int(l.split()[1]) for l in kop(root, "dump-ledger", ledger).stdout.splitlines() if l.startswith("position:")
    ]
    from kop_spark.storage.ledger import FILE_HEADER

    assert positions[0] == FILE_HEADER.size  # bytes of the file: the first entry follows its header
    with open(ledger, "r+b") as f:  # a byte of the last entry's batch body
        f.seek(positions[2] + 70)
        byte = f.read(1)[0]
        f.seek(positions[2] + 70)
        f.write(bytes([byte ^ 0xFF]))
    err = kop(root, "consume", "t", "--from-beginning").stderr
    assert f"entry at byte {positions[2]} " in err, err
    assert f"corrupt or torn entry at byte {positions[2]}:" in kop(root, "dump-ledger", ledger).stdout
    cli_max = kop(root, "topics", "create", "u", "--config", "max.message.bytes=10")
    assert cli_max.returncode == 1 and "'max.message.bytes': must be at least 70" in cli_max.stderr
    grace = kop(root, "maintenance", "--orphan-grace-minutes", "-5")
    assert grace.returncode == 2 and "--orphan-grace-minutes: must be at least 0" in grace.stderr
