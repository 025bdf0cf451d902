"""``kop``: the command line, shaped after Kafka's own tools; one module per command family.

kop [--root R] [--conf k=v ...] topics create|list|describe|alter|delete ...
kop delete-records --offset-json-file F   move partitions' log start up (kafka-delete-records)
kop produce TOPIC            lines from stdin (kafka-console-producer)
kop consume TOPIC            records to stdout (kafka-console-consumer)
kop groups list|describe|reset-offsets|delete|delete-offsets ...   (kafka-consumer-groups)
kop share-groups list|describe|reset-offsets|delete ...            (kafka-share-groups)
kop dump-ledger FILE         every entry of a ledger file (kafka-dump-log)
kop maintenance              merge small ledgers, remove files of crashed writers
kop verify                   check every ledger against its metadata (kafka-dump-log --verify)
kop repair                   truncate damaged partitions at their first damaged entry
kop serve                    speak the Kafka protocol to Kafka clients (kafka-server-start)
kop users add|list|delete    SASL/SCRAM users of kop serve (kafka-configs --entity-type users)
kop acls add|remove|list     ACLs kop serve enforces (kafka-acls)
kop transactions list        Kafka producers' transactional ids and their states (kafka-transactions)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import KopError
from . import console, dump_ledger, groups, security, serve, settings, share_groups, store, topics, transactions


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kop", description="Kafka-style topics on ledgers")
    p.add_argument("--root", help="store root (default: $KOP_ROOT, else storageRoot of conf/kop.conf, else ./kop-data)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="override a setting of conf/kop.conf")
    sub = p.add_subparsers(dest="command", required=True)
    for family in (topics, console, groups, share_groups, store, dump_ledger, settings, serve, security, transactions):
        family.add_parsers(sub)
    for command in sub.choices.values():  # also after the command, as Kafka's tools take them anywhere
        command.add_argument("--root", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_argument("--conf", action="append", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "group_option", None):
        args.group = args.group_option
    if args.command == "topics" and args.action in ("create", "delete", "alter") and not args.topic:
        print(f"kop topics {args.action}: a topic name is required", file=sys.stderr)
        return 2
    if (
        args.command == "topics"
        and args.action == "alter"
        and not (args.partitions or args.config or args.delete_config)
    ):
        print("kop topics alter: give --partitions N, --config KEY=VALUE or --delete-config KEY", file=sys.stderr)
        return 2
    if args.command == "topics" and args.action != "alter" and args.delete_config:
        print("kop topics: --delete-config is for alter", file=sys.stderr)
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
