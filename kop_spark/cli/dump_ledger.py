"""``kop dump-ledger``: every entry of one ledger file (kafka-dump-log)."""

from __future__ import annotations

import argparse
import os

from .. import layout
from ..broker import Broker
from ..config import CLOUD_OPTION_PREFIXES
from ..errors import KopError
from ..storage.read_plan import LedgerRecord, ReadEntry, inspect_ledger_file
from .common import key_values, shown, text


def _find_ledger(root: str | None, path: str, conf: dict[str, str]) -> tuple[str, LedgerRecord] | None:
    """The managed ledger that refers to this file and its record of it, if a store root around
    it has one."""
    if root is None:
        return None
    relative = path[len(root.rstrip("/")) + 1 :] if "://" in path else os.path.relpath(path, os.path.abspath(root))
    try:
        with Broker(root, conf) as b:
            return b.locate_ledger(relative)
    except KopError:
        return None


def _dump_ledger(args: argparse.Namespace) -> int:
    remote = "://" in args.file  # an object: s3://bucket/prefix/ledgers/.../<id>.ledger
    path = args.file if remote else os.path.abspath(args.file)
    if not remote and not os.path.isfile(path):
        raise KopError(f"ledger file {path} does not exist")
    guessed = path.split(f"/{layout.LEDGERS_DIR}/")[0] if remote else _guess_root(path)
    conf = key_values(args.conf, "--conf")
    located = _find_ledger(args.root or guessed, path, conf)
    found = located[1] if located else None
    rec = inspect_ledger_file(path, {k: v for k, v in conf.items() if k.startswith(CLOUD_OPTION_PREFIXES)})
    print(f"Dumping {path}")
    print(f"Ledger id: {rec.ledger_id:016x}  FileSize: {rec.file_length}  Sealed: {str(rec.sealed).lower()}")
    base = None
    if found:
        base = found.base_offset
        print(
            f"ManagedLedger: {located[0] if located else ''}  BaseOffset: {base}  State: {found.state}  "
            f"ConfirmedEntries: {found.entries}  ConfirmedLength: {found.length}"
        )
    else:
        print("ManagedLedger: none refers to this file (base offset unknown; offsets shown are relative)")
    base_shown = base if base is not None else 0
    for i, e in enumerate(rec.entries):
        batch = ReadEntry(base_shown + e.relative_index, e).record_batch()
        confirmed = found is None or i < found.entries
        print(
            f"position: {e.position} relativeIndex: {e.relative_index} baseOffset: {batch.base_offset} "
            f"lastOffset: {batch.last_offset} count: {e.record_count} brokerTimestamp: {e.broker_timestamp} "
            f"maxTimestamp: {batch.max_timestamp} size: {e.size} compression: {batch.compression.name.lower()} "
            f"isControl: {str(batch.is_control).lower()} crcValid: true" + ("" if confirmed else " unconfirmed: true")
        )
        if args.print_data_log:
            for r in batch.records():
                hdrs = ",".join(f"{k}:{text(v)}" for k, v in r.headers)
                print(
                    f"| offset: {r.offset} CreateTime: {r.timestamp_ms} key: {shown(r.key)} value: {shown(r.value)} headers: [{hdrs}]"
                )
    damaged = False
    if rec.error:
        # Past the confirmed length of an unsealed ledger, a torn entry is what a crashed writer
        # leaves and readers never see; anywhere else it is damage.
        confirmed_end = found.length if found and not found.sealed else rec.file_length
        damaged = rec.valid_length < confirmed_end
        print(f"corrupt or torn entry at byte {rec.valid_length}: {rec.error}")
        print(
            f"{rec.file_length - rec.valid_length} bytes from byte {rec.valid_length} are not valid entries"
            + ("" if damaged else " (an unconfirmed write after the confirmed length; readers never see it)")
        )
    if found and len(rec.entries) < found.entries:
        print(
            f"the managed ledger confirms {found.entries} entries but the file holds {len(rec.entries)} intact "
            f"ones: confirmed records are missing (`kop verify` checks the store, `kop repair` mends it)"
        )
        damaged = True
    return 1 if damaged else 0


def _guess_root(path: str) -> str | None:
    """Ledgers live at <root>/ledgers/<tenant>/<namespace>/<partition dir(s)>/<file>."""
    parts = path.split(os.sep)
    for i in layout.root_depths(parts):
        if os.path.isdir(os.sep.join([*parts[:i], layout.METADATA_DIR])):
            return os.sep.join(parts[:i])
    return None


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("dump-ledger", help="print every entry of a ledger file")
    d.add_argument("file")
    d.add_argument("--print-data-log", action="store_true", help="also print each record")
    d.set_defaults(run=_dump_ledger)
