"""``kop groups``: list, describe, reset offsets of and delete consumer groups (kafka-consumer-groups)."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Iterable, Mapping

from ..broker import SPARK_COMMIT, Broker, LiveGroup
from ..clock import now_ms
from ..errors import KopError
from .common import emit, open_broker

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def group_partitions(
    b: Broker, args: argparse.Namespace, committed: Mapping[tuple[str, int], object]
) -> list[tuple[str, int]]:
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


def _groups(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        if args.action == "list":
            list_groups(b, args, b.list_groups(), share=False)
            return 0
        group = group_asked(args, "groups")
        live = b.live_groups.get(group)
        if args.action in ("describe", "delete-offsets") and not b.fetch_offsets(group) and not live:
            raise KopError(f"Consumer group '{group}' does not exist.")
        if args.action == "describe":
            if args.state is not None:
                describe_state(args, group, live)
            elif args.members:
                describe_members(args, group, live)
            else:
                _describe(b, args, group, live)
        elif args.action == "reset-offsets":
            if live and args.execute:
                raise KopError(
                    f"Assignments can only be reset if the group '{group}' is inactive, but the current state is "
                    f"{live.state}."
                )
            _reset_offsets(b, args, group)
        elif args.action == "delete":
            if live:
                raise KopError(
                    f"Group '{group}' could not be deleted due to: NON_EMPTY_GROUP ({len(live.members)} active members)"
                )
            b.delete_group(group)
            print(f"Deletion of requested consumer groups ('{group}') was successful.")
        elif args.action == "delete-offsets":
            if not args.topic:
                raise KopError("kop groups delete-offsets: --topic is required")
            asked = group_partitions(b, args, {})
            deleted = set(b.delete_offsets(group, asked))
            rows = [
                {
                    "topic": t,
                    "partition": p,
                    "status": "Successful" if (t, p) in deleted else "Error: no committed offset",
                }
                for t, p in asked
            ]
            emit(
                args,
                rows,
                [("TOPIC", "topic", 30), ("PARTITION", "partition", 15), ("STATUS", "status", 15)],
                preface=f"Request succeed for deleting offsets with topic {','.join(args.topic)} group {group}",
            )
    return 0


def group_asked(args: argparse.Namespace, tool: str) -> str:
    if not args.group and args.state:  # ``describe --state g``: --state takes a value only for list
        args.group, args.state = args.state, ""
    if not args.group:
        raise KopError(f"kop {tool} {args.action}: a group id is required")
    return str(args.group)


def list_groups(b: Broker, args: argparse.Namespace, kept: Iterable[str], share: bool) -> None:
    """Every group kept (``kept``) or with live members, of share groups or of the others; with
    ``--state``, each one's state, and only those in the states it names (as kafka-consumer-groups
    --list --state Stable,Empty)."""
    live = {group: g for group, g in b.live_groups.all().items() if (g.type == "share") == share}
    states = {group: live[group].state if group in live else "Empty" for group in {*kept, *live}}
    if args.state is None:
        groups = sorted(states)
        print(json.dumps(groups) if args.output == "json" else "\n".join(groups))
        return
    wanted = {state.strip().lower() for state in args.state.split(",") if state.strip()}
    rows = [{"group": g, "state": st} for g, st in sorted(states.items()) if not wanted or st.lower() in wanted]
    emit(args, rows, [("GROUP", "group", 15), ("STATE", "state", 0)])


def describe_state(args: argparse.Namespace, group: str, live: LiveGroup | None) -> None:
    """``--describe --state``, as kafka-consumer-groups prints it; the coordinator is the ``kop
    serve`` the group's members are on (none while it has no members: any server takes it up)."""
    server = live.server if live else None
    row = {
        "group": group,
        "coordinator": f"{server.address} ({server.id})" if server else "-",
        "strategy": live.strategy if live else "",
        "state": live.state if live else "Empty",
        "members": len(live.members) if live else 0,
    }
    columns = [
        ("GROUP", "group", 15),
        ("COORDINATOR (ID)", "coordinator", 25),
        ("ASSIGNMENT-STRATEGY", "strategy", 20),
        ("STATE", "state", 15),
        ("#MEMBERS", "members", 0),
    ]
    emit(args, [row], columns)


def describe_members(args: argparse.Namespace, group: str, live: LiveGroup | None, kind: str = "Consumer") -> None:
    """``--describe --members`` (``--verbose``: with each member's partitions)."""
    rows = [
        {
            "group": group,
            "consumer_id": m.member_id,
            "host": f"/{m.host}",
            "client_id": m.client_id,
            "partitions": len(m.partitions),
            "assignment": _assignment(m.partitions),
        }
        for m in (live.members if live else ())
    ]
    columns = [
        ("GROUP", "group", 15),
        ("CONSUMER-ID", "consumer_id", 15),
        ("HOST", "host", 15),
        ("CLIENT-ID", "client_id", 15),
        ("#PARTITIONS", "partitions", 0),
    ]
    columns += [("ASSIGNMENT", "assignment", 0)] if args.verbose else []
    emit(args, rows, columns, preface="" if live else f"\n{kind} group '{group}' has no active members.")


def _assignment(partitions: tuple[tuple[str, int], ...]) -> str:
    """As Kafka prints a member's partitions: ``t1(0,1),t2(0)``, or ``-`` for none."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"


def _describe(b: Broker, args: argparse.Namespace, group: str, live: LiveGroup | None) -> None:
    """Each partition the group has an offset for or a member consumes, with its lag."""
    rows = []
    offsets: dict[tuple[str, int], int | str] = {tp: o.offset for tp, o in b.fetch_offsets(group).items()}
    for m in live.members if live else ():
        offsets.update({tp: "-" for tp in m.partitions if tp not in offsets})
    for (topic, p), o in sorted(offsets.items()):
        owner = live.owner(topic, p) if live else None
        try:
            end = b.list_offsets(topic, p, "latest")
        except KopError:
            end = None
        rows.append(
            {
                "group": group,
                "topic": topic,
                "partition": p,
                "current_offset": o,
                "log_end_offset": "-" if end is None else end,
                "lag": "-" if end is None or isinstance(o, str) else max(end - o, 0),
                "consumer_id": owner.member_id if owner else "-",
                "host": f"/{owner.host}" if owner else "-",
                "client_id": owner.client_id if owner else "-",
            }
        )
    emit(
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
        preface="" if live else f"\nConsumer group '{group}' has no active members.",
    )


def clamped(topic: str, p: int, target: int, earliest: int, latest: int) -> int:
    """The offset moved into the log's range, with Kafka's warning when it had to be."""
    if target > latest:
        print(f"WARN: New offset ({target}) is higher than latest offset for topic partition {topic}-{p}. "
              f"Value will be set to {latest}", file=sys.stderr)  # fmt: skip
        return latest
    if target < earliest:
        print(f"WARN: New offset ({target}) is lower than earliest offset for topic partition {topic}-{p}. "
              f"Value will be set to {earliest}", file=sys.stderr)  # fmt: skip
        return earliest
    return target


def _reset_offsets(b: Broker, args: argparse.Namespace, group: str) -> None:
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
    if args.dry_run and args.execute:
        raise KopError("reset-offsets takes --dry-run or --execute, not both")
    committed = b.fetch_offsets(group)
    new = {}
    for topic, p in group_partitions(b, args, committed):
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
            ts = _parse_datetime(args.to_datetime) if args.to_datetime else now_ms() - _parse_duration(args.by_duration)
            found = b.list_offsets(topic, p, ts)
            target = latest if found < 0 else found
        new[(topic, p)] = clamped(topic, p, target, earliest, latest)
    if args.execute:
        b.commit_offsets(group, new)
    dry_run = not args.execute
    rows = [
        {"group": group, "topic": t, "partition": p, "new_offset": o, "dry_run": dry_run}
        for (t, p), o in sorted(new.items())
    ]
    emit(
        args,
        rows,
        [
            ("GROUP", "group", 30),
            ("TOPIC", "topic", 30),
            ("PARTITION", "partition", 10),
            ("NEW-OFFSET", "new_offset", 15),
        ],
    )
    if any(o.metadata == SPARK_COMMIT for o in committed.values()) and args.output != "json":
        print(
            f"\nNote: group {group!r} was last committed by a kop Spark streaming query. A running or restarted "
            "query goes on from its checkpoint, not from these offsets; to rewind it, start it with a new "
            "checkpointLocation and startingOffsets=group (see the README, Spark).",
            file=sys.stderr,
        )
    if not args.execute and args.output != "json":
        print("\n(dry run: nothing changed; add --execute to commit these offsets)", file=sys.stderr)


def add_describe_views(g: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups' and kafka-share-groups' views of ``--describe``."""
    view = g.add_mutually_exclusive_group()
    view.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATE,...",
        help="describe: the group's coordinator, state and members; list: each group's state, only those named",
    )
    view.add_argument("--members", action="store_true", help="describe: the group's members")
    view.add_argument("--offsets", action="store_true", help="describe: each partition's offsets and lag (the default)")
    g.add_argument("--verbose", action="store_true", help="describe --members: with each member's partitions")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_describe_views(g)
    g.add_argument("--output", choices=["text", "json"], default="text")
    g.set_defaults(run=_groups)
