"""``kop``: the command line, shaped after Kafka's own tools.

kop [--root R] [--conf k=v ...] topics create|list|describe|alter|delete ...
kop produce TOPIC            lines from stdin (kafka-console-producer)
kop consume TOPIC            records to stdout (kafka-console-consumer)
kop groups list|describe|reset-offsets|delete|delete-offsets ...   (kafka-consumer-groups)
kop dump-ledger FILE         every entry of a ledger file (kafka-dump-log)
kop maintenance              merge small ledgers, remove files of crashed writers
kop verify                   check every ledger against its metadata (kafka-dump-log --verify)
kop repair                   truncate damaged partitions at their first damaged entry
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence

from .broker import Broker
from .errors import KopError
from .record import ConsumerRecord, Record
from .storage.fileio import FileIO
from .storage.ledger import recover
from .storage.managed_ledger import ReadEntry

_PRODUCE_BATCH = 1000


def _key_values(pairs: Sequence[str], what: str) -> dict:
    out = {}
    for p in pairs or ():
        if "=" not in p:
            raise SystemExit(f"kop: {what} {p!r} must be key=value")
        k, v = p.split("=", 1)
        out[k] = v
    return out


def _broker(args) -> Broker:
    return Broker(args.root, conf=_key_values(args.conf, "--conf"))


# -- topics ---------------------------------------------------------------------------------


def _topics(args) -> int:
    with _broker(args) as b:
        if args.action == "create":
            b.create_topic(args.topic, args.partitions, _key_values(args.config, "--config"))
            print(f"Created topic {args.topic}.")
        elif args.action == "list":
            for t in b.list_topics(include_internal=args.include_internal):
                print(t)
        elif args.action == "delete":
            b.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.action == "alter":
            b.create_partitions(args.topic, args.partitions)
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
        elif args.action == "describe":
            names = [args.topic] if args.topic else b.list_topics(include_internal=args.include_internal)
            for t in names:
                d = b.describe_topic(t)
                configs = ",".join(f"{k}={v}" for k, v in d.config.items())
                print(
                    f"Topic: {d.name}\tFullName: {d.full_name}\tPartitionCount: {len(d.partitions)}\tConfigs: {configs}"
                )
                for p in d.partitions:
                    print(
                        f"\tTopic: {d.name}\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
                        f"\tLogEndOffset: {p.log_end_offset}\tLedgers: {p.ledgers}\tSize: {p.size_bytes}"
                    )
    return 0


# -- produce --------------------------------------------------------------------------------


def _produce(args) -> int:
    headers = [(k, v.encode()) for k, v in _key_values(args.header, "--header").items()]
    total = 0
    try:
        with _broker(args) as b:
            b.partitions_for(args.topic)  # fail before reading stdin if the topic is missing
            batch: list[Record] = []
            for line in sys.stdin.buffer:
                line = line.rstrip(b"\r\n")
                key = None
                if args.key_separator is not None:
                    sep = args.key_separator.encode()
                    if sep not in line:
                        raise KopError(
                            f"line {total + len(batch) + 1} has no key separator {args.key_separator!r}: {line[:80]!r}"
                        )
                    key, line = line.split(sep, 1)
                batch.append(Record(value=line, key=key, headers=headers))
                if len(batch) >= _PRODUCE_BATCH:
                    b.produce(args.topic, batch, args.partition, compression=args.compression_type)
                    total += len(batch)
                    batch = []
            if batch:
                b.produce(args.topic, batch, args.partition, compression=args.compression_type)
                total += len(batch)
    finally:  # also on Ctrl-C: what was acknowledged is stored, and the user should know how much
        print(f"Produced {total} records to {args.topic} (acknowledged).", file=sys.stderr)
    return 0


# -- consume --------------------------------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _json_bytes(data: bytes | None):
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _records(b: Broker, args) -> Iterator[ConsumerRecord]:
    partitions = [args.partition] if args.partition is not None else range(b.partitions_for(args.topic))
    for p in partitions:
        if args.from_timestamp is not None:
            start = b.list_offsets(args.topic, p, args.from_timestamp)
            if start < 0:
                continue
        elif args.from_beginning or args.offset == "earliest":
            start = b.list_offsets(args.topic, p, "earliest")
        elif args.offset in (None, "latest"):
            start = b.list_offsets(args.topic, p, "latest")
        else:
            start = int(args.offset)
        end = b.list_offsets(args.topic, p, "latest")
        while True:
            records = b.fetch(args.topic, p, start, max_records=500)  # also checks the start offset
            records = [r for r in records if r.offset < end]  # stop at the end seen when we began
            if not records:
                break
            yield from records
            start = records[-1].offset + 1


def _maintenance(args) -> int:
    with _broker(args) as b:
        report = b.maintenance(
            args.topic,
            target_ledger_bytes=args.target_ledger_mb << 20,
            orphan_grace_ms=args.orphan_grace_minutes * 60_000,
        )
    print(f"Merged away {report.ledgers_merged} small ledgers; removed {len(report.files_removed)} orphaned files.")
    for path in report.files_removed:
        print(f"  removed {path}")
    for partition, error in report.errors:
        print(f"error: {partition}: {error}", file=sys.stderr)
    if report.errors:
        print(
            f"{len(report.errors)} partition(s) could not be tidied (see above); `kop verify` checks the store, "
            f"`kop repair` mends it",
            file=sys.stderr,
        )
        return 1
    return 0


def _verify(args) -> int:
    with _broker(args) as b:
        problems = b.verify(args.topic)
        checked = sum(
            b.partitions_for(t) for t in ([args.topic] if args.topic else b.list_topics(include_internal=True))
        )
    for partition, found in sorted(problems.items()):
        for problem in found:
            print(f"{partition}: {problem}")
    if problems:
        print(
            f"{len(problems)} of {checked} partitions are damaged; `kop repair` truncates each at its first "
            f"damaged entry",
            file=sys.stderr,
        )
        return 1
    print(f"Checked {checked} partitions: every confirmed entry is intact.")
    return 0


def _repair(args) -> int:
    with _broker(args) as b:
        report = b.repair(args.topic, dry_run=args.dry_run)
    for path in report.metadata_versions_removed:
        print(f"{'would remove' if args.dry_run else 'removed'} unreadable metadata version {path}")
    for (topic, p), (end, old_end) in sorted(report.truncated.items()):
        print(
            f"{topic}-{p}: log end offset {'would move' if args.dry_run else 'moved'} back from {old_end} to {end}: "
            f"offsets {end} to {old_end - 1} {'would be' if args.dry_run else 'are'} dropped"
        )
    for group, topic, p, offset in report.groups_past_end:
        end = report.truncated[(topic, p)][0]
        print(
            f"group {group!r}: committed offset {offset} for {topic}-{p} is past the new log end {end}; "
            f"reset it with `kop groups reset-offsets {group} --topic {topic}:{p} --to-latest --execute`"
        )
    if not report.truncated and not report.metadata_versions_removed:
        print("Nothing to repair: every confirmed entry is intact.")
    elif args.dry_run:
        print("(dry run: nothing changed; run without --dry-run to repair)", file=sys.stderr)
    else:
        print(f"Repaired {len(report.truncated)} partition(s).")
    return 0


def _consume(args) -> int:
    if args.offset not in (None, "earliest", "latest"):
        try:
            int(args.offset)
        except ValueError:
            raise KopError(f"--offset must be earliest, latest or a number, got {args.offset!r}") from None
        if args.partition is None:
            raise KopError("--offset N needs --partition, as in kafka-console-consumer")
    n = 0
    try:
        with _broker(args) as b:
            for r in _records(b, args):
                if args.max_messages is not None and n >= args.max_messages:
                    break
                sys.stdout.write(_format_record(r, args))
                n += 1
    finally:  # also on Ctrl-C, as kafka-console-consumer
        print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def _format_record(r: ConsumerRecord, args) -> str:
    if args.format == "json":
        return (
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp_ms,
                    "timestampType": int(r.timestamp_type),
                    "key": _json_bytes(r.key),
                    "value": _json_bytes(r.value),
                    "headers": [{"key": k, "value": _json_bytes(v)} for k, v in r.headers],
                }
            )
            + "\n"
        )
    parts = []
    if args.print_offset:
        parts.append(f"{r.partition}:{r.offset}")
    if args.print_timestamp:
        parts.append(f"{'CreateTime' if r.timestamp_type == 0 else 'LogAppendTime'}:{r.timestamp_ms}")
    if args.print_key:
        parts.append(_text(r.key) if r.key is not None else "null")
    parts.append(_text(r.value) if r.value is not None else "null")
    return "\t".join(parts) + "\n"


# -- groups ---------------------------------------------------------------------------------

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def _table(rows: list[dict], columns: list[tuple[str, str, int]]) -> str:
    """Kafka's tools pad each column to the wider of its minimum and its longest value."""
    widths = [max([minimum] + [len(str(r[key])) for r in rows]) for _, key, minimum in columns]
    lines = [" ".join(f"{title:<{w}}" for (title, _, _), w in zip(columns, widths, strict=False)).rstrip()]
    lines += [
        " ".join(f"{r[key]!s:<{w}}" for (_, key, _), w in zip(columns, widths, strict=False)).rstrip() for r in rows
    ]
    return "\n".join(lines)


def _emit(args, rows: list[dict], columns: list[tuple[str, str, int]], preface: str = "") -> None:
    if args.output == "json":
        print(json.dumps(rows))
        return
    if preface:
        print(preface)
    print()
    print(_table(rows, columns))


def _group_partitions(b: Broker, args, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    out = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                out += [(topic, int(p)) for p in parts.split(",")]
            except ValueError:
                raise KopError(f"--topic {spec!r}: partitions must be numbers, as in topic:0,1") from None
        else:
            out += [(topic, p) for p in range(b.partitions_for(topic))]
    return out


def _parse_datetime(text: str) -> int:
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise KopError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally with a time zone"
        ) from None
    return int(dt.timestamp() * 1000)


def _parse_duration(text: str) -> int:
    m = _DURATION.match(text)
    if not m or text in ("P", "PT"):
        raise KopError(f"--by-duration {text!r}: expected an ISO-8601 duration PnDTnHnMnS, e.g. PT1H30M")
    days, hours, minutes, seconds = (float(x) if x else 0 for x in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _groups(args) -> int:
    with _broker(args) as b:
        if args.action == "list":
            groups = b.list_groups()
            print(json.dumps(groups) if args.output == "json" else "\n".join(groups))
            return 0
        if not args.group:
            raise KopError(f"kop groups {args.action}: a group id is required")
        group = args.group
        if args.action in ("describe", "delete-offsets") and not b.fetch_offsets(group):
            raise KopError(f"Consumer group '{group}' does not exist.")
        if args.action == "describe":
            rows = []
            for (topic, p), o in sorted(b.fetch_offsets(group).items()):
                try:
                    end = b.list_offsets(topic, p, "latest")
                except KopError:
                    end = None
                rows.append(
                    {
                        "group": group,
                        "topic": topic,
                        "partition": p,
                        "current_offset": o.offset,
                        "log_end_offset": "-" if end is None else end,
                        "lag": "-" if end is None else max(end - o.offset, 0),
                        "consumer_id": "-",
                        "host": "-",
                        "client_id": "-",
                    }
                )
            _emit(
                args,
                rows,
                [
                    ("GROUP", "group", 15),
                    ("TOPIC", "topic", 15),
                    ("PARTITION", "partition", 10),
                    ("CURRENT-OFFSET", "current_offset", 15),
                    ("LOG-END-OFFSET", "log_end_offset", 15),
                    ("LAG", "lag", 15),
                    ("CONSUMER-ID", "consumer_id", 15),
                    ("HOST", "host", 15),
                    ("CLIENT-ID", "client_id", 0),
                ],
                preface=f"\nConsumer group '{group}' has no active members.",
            )
        elif args.action == "reset-offsets":
            _reset_offsets(b, args, group)
        elif args.action == "delete":
            b.delete_group(group)
            print(f"Deletion of requested consumer groups ('{group}') was successful.")
        elif args.action == "delete-offsets":
            if not args.topic:
                raise KopError("kop groups delete-offsets: --topic is required")
            asked = _group_partitions(b, args, {})
            deleted = set(b.delete_offsets(group, asked))
            rows = [
                {
                    "topic": t,
                    "partition": p,
                    "status": "Successful" if (t, p) in deleted else "Error: no committed offset",
                }
                for t, p in asked
            ]
            _emit(
                args,
                rows,
                [("TOPIC", "topic", 30), ("PARTITION", "partition", 15), ("STATUS", "status", 15)],
                preface=f"Request succeed for deleting offsets with topic {','.join(args.topic)} group {group}",
            )
    return 0


def _reset_offsets(b: Broker, args, group: str) -> None:
    scenarios = [
        o
        for o in ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")
        if getattr(args, o) not in (None, False)
    ]
    if len(scenarios) != 1:
        raise KopError(
            "reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
            "--shift-by, --to-datetime, --by-duration"
        )
    if bool(args.topic) == bool(args.all_topics):
        raise KopError("reset-offsets needs --topic or --all-topics (one of them)")
    committed = b.fetch_offsets(group)
    new = {}
    for topic, p in _group_partitions(b, args, committed):
        earliest, latest = b.list_offsets(topic, p, "earliest"), b.list_offsets(topic, p, "latest")
        current = committed.get((topic, p))
        base = current.offset if current is not None and current.offset >= 0 else latest
        if args.to_earliest:
            target = earliest
        elif args.to_latest:
            target = latest
        elif args.to_current:
            target = base
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            target = base + args.shift_by
        else:
            ts = (
                _parse_datetime(args.to_datetime)
                if args.to_datetime
                else int(time.time() * 1000) - _parse_duration(args.by_duration)
            )
            found = b.list_offsets(topic, p, ts)
            target = latest if found < 0 else found
        new[(topic, p)] = min(max(target, earliest), latest)  # clamped into the valid range, as Kafka does
    if args.execute:
        b.commit_offsets(group, new)
    rows = [{"group": group, "topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(new.items())]
    _emit(
        args,
        rows,
        [
            ("GROUP", "group", 30),
            ("TOPIC", "topic", 30),
            ("PARTITION", "partition", 10),
            ("NEW-OFFSET", "new_offset", 15),
        ],
    )
    if not args.execute and args.output != "json":
        print("\n(dry run: nothing changed; add --execute to commit these offsets)", file=sys.stderr)


# -- dump-ledger ----------------------------------------------------------------------------


def _find_ledger(root: str | None, path: str) -> dict | None:
    """The managed ledger's record of this file, if a store root around it refers to it."""
    if root is None:
        return None
    try:
        b = Broker(root)
    except KopError:
        return None
    rel = os.path.relpath(path, os.path.abspath(root))
    for key in b.store.list_keys("managed-ledgers"):
        meta = b.store.get(key).value or {}
        for l in meta.get("ledgers", []):
            if l["file"] == rel:
                return {**l, "managed_ledger": key}
    return None


def _dump_ledger(args) -> int:
    path = os.path.abspath(args.file)
    if not os.path.isfile(path):
        raise KopError(f"ledger file {path} does not exist")
    fio = FileIO(os.path.dirname(path))
    found = _find_ledger(args.root or _guess_root(path), path)
    rec = recover(fio, os.path.basename(path))
    print(f"Dumping {path}")
    print(f"Ledger id: {rec.ledger_id:016x}  FileSize: {rec.file_length}  Sealed: {str(rec.sealed).lower()}")
    base = None
    if found:
        base = found["base_offset"]
        print(
            f"ManagedLedger: {found['managed_ledger']}  BaseOffset: {base}  State: {found['state']}  "
            f"ConfirmedEntries: {found['entries']}  ConfirmedLength: {found['length']}"
        )
    else:
        print("ManagedLedger: none refers to this file (base offset unknown; offsets shown are relative)")
    base_shown = base if base is not None else 0
    for i, e in enumerate(rec.entries):
        batch = ReadEntry(base_shown + e.relative_index, e).record_batch()
        confirmed = found is None or i < found["entries"]
        print(
            f"position: {e.position} relativeIndex: {e.relative_index} baseOffset: {batch.base_offset} "
            f"lastOffset: {batch.last_offset} count: {e.record_count} brokerTimestamp: {e.broker_timestamp} "
            f"maxTimestamp: {batch.max_timestamp} size: {e.size} compression: {batch.compression.name.lower()} "
            f"isControl: {str(batch.is_control).lower()} crcValid: true" + ("" if confirmed else " unconfirmed: true")
        )
        if args.print_data_log:
            for r in batch.records():
                hdrs = ",".join(f"{k}:{_text(v)}" for k, v in r.headers)
                print(
                    f"| offset: {r.offset} CreateTime: {r.timestamp_ms} key: {_text(r.key)} value: {_text(r.value)} headers: [{hdrs}]"
                )
    damaged = False
    if rec.error:
        # Past the confirmed length of an unsealed ledger, a torn entry is what a crashed writer
        # leaves and readers never see; anywhere else it is damage.
        confirmed_end = found["length"] if found and found["state"] != "sealed" else rec.file_length
        damaged = rec.valid_length < confirmed_end
        print(f"corrupt or torn entry at byte {rec.valid_length}: {rec.error}")
        print(
            f"{rec.file_length - rec.valid_length} bytes from byte {rec.valid_length} are not valid entries"
            + ("" if damaged else " (an unconfirmed write after the confirmed length; readers never see it)")
        )
    if found and len(rec.entries) < found["entries"]:
        print(
            f"the managed ledger confirms {found['entries']} entries but the file holds {len(rec.entries)} intact "
            f"ones: confirmed records are missing (`kop verify` checks the store, `kop repair` mends it)"
        )
        damaged = True
    return 1 if damaged else 0


def _guess_root(path: str) -> str | None:
    """Ledgers live at <root>/ledgers/<tenant>/<namespace>/<partition dir(s)>/<file>."""
    parts = path.split(os.sep)
    for i in (len(parts) - 5, len(parts) - 6):
        if i > 0 and parts[i] == "ledgers" and os.path.isdir(os.sep.join([*parts[:i], "_metadata"])):
            return os.sep.join(parts[:i])
    return None


# -- entry point ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kop", description="Kafka-style topics on ledgers")
    p.add_argument("--root", help="store root (default: storageRoot of conf/kop.conf, else ./kop-data)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="override a setting of conf/kop.conf")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("topics", help="create, list, describe, alter or delete topics")
    t.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    t.add_argument("topic", nargs="?")
    t.add_argument("--partitions", type=int)
    t.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic setting, e.g. retention.ms=3600000")
    t.add_argument("--include-internal", action="store_true", help="also internal topics such as __consumer_offsets")
    t.set_defaults(run=_topics)

    pr = sub.add_parser("produce", help="produce lines from stdin, one record each")
    pr.add_argument("topic")
    pr.add_argument("--partition", type=int)
    pr.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    pr.add_argument("--header", action="append", metavar="KEY=VALUE", help="header added to every record")
    pr.add_argument("--compression-type", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    pr.set_defaults(run=_produce)

    c = sub.add_parser("consume", help="print records, then stop at the log end")
    c.add_argument("topic")
    c.add_argument("--partition", type=int)
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--offset", help="earliest, latest (the default) or an offset (needs --partition)")
    c.add_argument("--from-timestamp", type=int, metavar="MS", help="start at the first record at or after this time")
    c.add_argument("--max-messages", type=int)
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.add_argument("--print-key", action="store_true")
    c.add_argument("--print-offset", action="store_true")
    c.add_argument("--print-timestamp", action="store_true")
    c.set_defaults(run=_consume)

    g = sub.add_parser("groups", help="consumer groups: list, describe, reset-offsets, delete, delete-offsets")
    g.add_argument("action", choices=["list", "describe", "reset-offsets", "delete", "delete-offsets"])
    g.add_argument("group", nargs="?")
    g.add_argument("--group", dest="group_option", metavar="GROUP", help="the group (as kafka-consumer-groups.sh)")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,...]", help="topic, optionally with partitions")
    g.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    g.add_argument("--to-earliest", action="store_true")
    g.add_argument("--to-latest", action="store_true")
    g.add_argument("--to-current", action="store_true")
    g.add_argument("--to-offset", type=int)
    g.add_argument("--shift-by", type=int)
    g.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    g.add_argument("--by-duration", metavar="PnDTnHnMnS")
    g.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    g.add_argument("--execute", action="store_true", help="commit the new offsets")
    g.add_argument("--output", choices=["text", "json"], default="text")
    g.set_defaults(run=_groups)

    m = sub.add_parser("maintenance", help="merge small ledgers and remove orphaned files (offsets never change)")
    m.add_argument("--topic", help="only this topic (default: every topic, and staged files of crashed jobs)")
    m.add_argument("--target-ledger-mb", type=int, default=64, help="merge small ledgers into ledgers up to this size")
    m.add_argument(
        "--orphan-grace-minutes", type=int, default=60, help="remove unreferenced files only once they are this old"
    )
    m.set_defaults(run=_maintenance)

    v = sub.add_parser("verify", help="check every ledger against its metadata and every entry's checksums")
    v.add_argument("--topic", help="only this topic (default: every topic, internal ones included)")
    v.set_defaults(run=_verify)

    r = sub.add_parser(
        "repair", help="truncate damaged partitions at their first damaged entry, as Kafka's log recovery"
    )
    r.add_argument("--topic", help="only this topic (default: every topic, internal ones included)")
    r.add_argument("--dry-run", action="store_true", help="only say what would be dropped")
    r.set_defaults(run=_repair)

    d = sub.add_parser("dump-ledger", help="print every entry of a ledger file")
    d.add_argument("file")
    d.add_argument("--print-data-log", action="store_true", help="also print each record")
    d.set_defaults(run=_dump_ledger)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "group_option", None):
        args.group = args.group_option
    if args.command == "topics" and args.action in ("create", "delete", "alter") and not args.topic:
        print(f"kop topics {args.action}: a topic name is required", file=sys.stderr)
        return 2
    if args.command == "topics" and args.action == "alter" and args.partitions is None:
        print("kop topics alter: --partitions is required", file=sys.stderr)
        return 2
    try:
        return args.run(args)
    except KopError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: what was acknowledged is stored; the command said how much
        return 130


if __name__ == "__main__":
    sys.exit(main())
