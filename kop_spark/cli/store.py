"""``kop maintenance``, ``kop verify`` and ``kop repair``: looking after a store."""

from __future__ import annotations

import argparse
import sys

from .common import at_least, open_broker


def _maintenance(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        report = b.maintenance(
            args.topic,
            target_ledger_bytes=None if args.target_ledger_mb is None else args.target_ledger_mb << 20,
            orphan_grace_ms=None if args.orphan_grace_minutes is None else args.orphan_grace_minutes * 60_000,
        )
    print(
        f"Merged away {report.ledgers_merged} small ledgers; compacted {len(report.partitions_compacted)} "
        f"partitions; removed {len(report.files_removed)} orphaned files."
    )
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


def _verify(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
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


def _repair(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
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


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("maintenance", help="merge small ledgers and remove orphaned files (offsets never change)")
    m.add_argument("--topic", help="only this topic (default: every topic, and staged files of crashed jobs)")
    m.add_argument(
        "--target-ledger-mb",
        type=at_least(1),
        help="merge small ledgers into ledgers up to this size (default: maintenanceTargetLedgerMbytes, 64)",
    )
    m.add_argument(
        "--orphan-grace-minutes",
        type=at_least(0),
        help="remove unreferenced files only once they are this old (default: maintenanceOrphanGraceMinutes, 60)",
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
