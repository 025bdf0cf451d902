"""``kop topics``: create, list, describe, alter and delete topics (kafka-topics); ``kop
delete-records``: move partitions' log start up (kafka-delete-records)."""

from __future__ import annotations

import argparse
import json
import sys

from ..broker import Broker
from ..config_changes import AlterConfigOp
from ..errors import KopError
from ..topic_name import has_collision_chars
from .common import key_values, open_broker

# kafka-topics' own words, printed before it creates such a topic.
COLLISION_WARNING = (
    "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
    "collide. To avoid issues it is best to use either, but not both."
)


def _topics(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        if args.action == "create":
            if has_collision_chars(args.topic.rpartition("/")[2]):
                print(COLLISION_WARNING)
            b.create_topic(args.topic, args.partitions, key_values(args.config, "--config"))
            print(f"Created topic {args.topic}.")
        elif args.action == "list":
            for t in b.list_topics(include_internal=not args.exclude_internal):
                print(t)
        elif args.action == "delete":
            b.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.action == "alter":
            _alter(b, args)
        elif args.action == "describe":
            names = [args.topic] if args.topic else b.list_topics(include_internal=not args.exclude_internal)
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


def _alter(b: Broker, args: argparse.Namespace) -> None:
    # kafka-topics --alter: --partitions, and the --config/--delete-config it took before Kafka
    # moved them to kafka-configs (a change of settings is one CAS, all or none).
    ops = [AlterConfigOp(k, "set", v) for k, v in key_values(args.config, "--config").items()]
    ops += [AlterConfigOp(k, "delete") for k in args.delete_config or ()]
    if ops:
        b.alter_topic_config(args.topic, ops)
        print(f"Updated config for topic {args.topic}.")
    if args.partitions is not None:
        b.create_partitions(args.topic, args.partitions)
        print(f"Topic {args.topic} now has {args.partitions} partitions.")


def _delete_records(args: argparse.Namespace) -> int:
    wanted = _offsets_file(args.offset_json_file)
    failed = False
    print("Records delete operation completed:")
    with open_broker(args) as b:
        for topic, partition, offset in wanted:
            try:
                print(f"partition: {topic}-{partition}\tlow_watermark: {b.delete_records(topic, partition, offset)}")
            except KopError as e:
                print(f"partition: {topic}-{partition}\terror: {e}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


def _offsets_file(path: str) -> list[tuple[str, int, int]]:
    """kafka-delete-records' file: {"partitions": [{"topic": T, "partition": P, "offset": O}, ...], "version": 1}."""
    try:
        with open(path) as f:
            entries = json.load(f)["partitions"]
        wanted = [(e["topic"], e["partition"], e["offset"]) for e in entries]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KopError(
            f'--offset-json-file {path}: expected {{"partitions": [{{"topic": T, "partition": P, '
            f'"offset": O}}, ...], "version": 1}} ({type(e).__name__}: {e})'
        ) from None
    for topic, partition, offset in wanted:
        if not isinstance(topic, str) or not all(type(v) is int for v in (partition, offset)):
            raise KopError(f"--offset-json-file {path}: bad entry {topic!r}, {partition!r}, {offset!r}")
    return wanted


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("topics", help="create, list, describe, alter or delete topics")
    t.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    t.add_argument("topic", nargs="?")
    t.add_argument("--partitions", type=int)
    t.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic setting, e.g. retention.ms=3600000")
    t.add_argument("--delete-config", action="append", metavar="KEY", help="alter: back to the default setting")
    # As kafka-topics: internal topics (__consumer_offsets) are listed and described unless excluded.
    t.add_argument("--exclude-internal", action="store_true", help="list: leave out internal topics")
    t.add_argument("--include-internal", action="store_true", help=argparse.SUPPRESS)  # the default; was a flag
    t.set_defaults(run=_topics)
    d = sub.add_parser("delete-records", help="move partitions' log start up (kafka-delete-records)")
    d.add_argument("--offset-json-file", required=True, help='{"partitions": [{"topic", "partition", "offset"}]}')
    d.set_defaults(run=_delete_records)
