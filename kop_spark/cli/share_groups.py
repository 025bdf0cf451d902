"""``kop share-groups``: list, describe, reset the start offsets of and delete share groups
(kafka-share-groups.sh), from the states ``kop serve`` keeps of them in the store."""

from __future__ import annotations

import argparse

from ..broker import Broker, ShareStates
from ..errors import KopError
from .common import emit, open_broker
from .groups import (
    add_describe_views,
    clamped,
    describe_members,
    describe_state,
    group_asked,
    group_partitions,
    list_groups,
)


def _share_groups(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        states = ShareStates(b.store)
        if args.action == "list":
            list_groups(b, args, states.groups(), share=True)
            return 0
        group = group_asked(args, "share-groups")
        partitions, live = states.partitions(group), b.live_groups.get(group)
        if not partitions and not live:
            raise KopError(f"Share group '{group}' does not exist.")
        if args.action == "describe":
            if args.state is not None:
                describe_state(args, group, live)
            elif args.members:
                describe_members(args, group, live, "Share")
            else:
                _describe(b, args, group, partitions, live is not None)
            return 0
        if live and (args.execute or args.action == "delete"):
            raise KopError(f"Share group '{group}' is not empty: it has {len(live.members)} active members.")
        if args.action == "delete":
            states.forget(group)
            print(f"Deletion of requested share groups ('{group}') was successful.")
        else:
            _reset(b, args, group, states, partitions)
    return 0


def _describe(b: Broker, args: argparse.Namespace, group: str, partitions: dict, active: bool) -> None:
    rows = []
    for (topic, p), state in sorted(partitions.items()):
        try:
            behind: object = ShareStates.lag(state, b.list_offsets(topic, p, "latest"))
        except KopError:  # the topic is gone
            behind = "-"
        rows.append(
            {"group": group, "topic": topic, "partition": p, "start_offset": state["start_offset"], "lag": behind}
        )
    columns = [("GROUP", "group", 15), ("TOPIC", "topic", 15), ("PARTITION", "partition", 10)]
    columns += [("START-OFFSET", "start_offset", 15), ("LAG", "lag", 0)]
    emit(args, rows, columns, preface="" if active else f"\nShare group '{group}' has no active members.")


def _reset(b: Broker, args: argparse.Namespace, group: str, states: ShareStates, partitions: dict) -> None:
    targets = [o for o in ("to_earliest", "to_latest") if getattr(args, o)] + (
        ["to_offset"] if args.to_offset is not None else []
    )
    if len(targets) != 1:
        raise KopError("kop share-groups reset-offsets: give one of --to-earliest, --to-latest, --to-offset")
    if not args.all_topics and not args.topic:
        raise KopError("kop share-groups reset-offsets: give --topic or --all-topics")
    rows = []
    for topic, p in group_partitions(b, args, partitions):
        earliest, latest = b.list_offsets(topic, p, "earliest"), b.list_offsets(topic, p, "latest")
        wanted = earliest if args.to_earliest else latest if args.to_latest else args.to_offset
        offset = clamped(topic, p, wanted, earliest, latest)
        if args.execute:
            states.save(group, topic, p, ShareStates.started_at(offset))
        rows.append({"group": group, "topic": topic, "partition": p, "new_offset": offset})
    columns = [("GROUP", "group", 15), ("TOPIC", "topic", 15), ("PARTITION", "partition", 10)]
    emit(args, rows, [*columns, ("NEW-OFFSET", "new_offset", 0)])


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = sub.add_parser("share-groups", help="share groups (KIP-932): list, describe, reset-offsets, delete")
    g.add_argument("action", choices=["list", "describe", "reset-offsets", "delete"])
    g.add_argument("group", nargs="?")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,...]", help="topic, optionally with partitions")
    g.add_argument("--all-topics", action="store_true", help="every partition the group has read")
    g.add_argument("--to-earliest", action="store_true")
    g.add_argument("--to-latest", action="store_true")
    g.add_argument("--to-offset", type=int)
    g.add_argument("--dry-run", action="store_true", help="show the new start offsets only (the default)")
    g.add_argument("--execute", action="store_true", help="set the new start offsets (the group must be inactive)")
    add_describe_views(g)
    g.add_argument("--output", choices=["text", "json"], default="text")
    g.set_defaults(run=_share_groups)
