"""What the commands share: the store they open, key=value options, and Kafka tools' output."""

from __future__ import annotations

import argparse
import base64
import json
import os
from collections.abc import Callable, Sequence

from ..broker import Broker
from ..errors import ConfigError, KopError


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``low``; argparse names the option in its error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def key_values(pairs: Sequence[str] | None, what: str) -> dict:
    out = {}
    for p in pairs or ():
        if "=" not in p:
            raise SystemExit(f"kop: {what} {p!r} must be key=value")
        k, v = p.split("=", 1)
        out[k] = v
    return out


def open_broker(args: argparse.Namespace) -> Broker:
    """The store of ``--root`` (else ``$KOP_ROOT``, else conf/kop.conf's storageRoot). Only
    ``topics create`` may make a root; every other command refuses one that is not there."""
    root = args.root or os.environ.get("KOP_ROOT") or None
    conf = key_values(args.conf, "--conf")
    try:
        broker = Broker(root, conf=conf)
    except ConfigError as e:
        raise ConfigError(f"--conf: {e}; `kop config` lists every setting") from None
    creating = args.command == "serve" or (args.command == "topics" and args.action == "create")
    if not creating and not broker.root_exists():
        broker.close()
        raise KopError(
            f"store root {broker.root} does not exist: give the store with --root or KOP_ROOT "
            f"(`kop topics create` makes a new one)"
        )
    return broker


def text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def shown(data: bytes | None) -> str:
    """Bytes as the console tools print them: text, or ``null`` for none."""
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _table(rows: list[dict], columns: list[tuple[str, str, int]]) -> str:
    """Kafka's tools pad each column to the wider of its minimum and its longest value."""
    widths = [max([minimum] + [len(str(r[key])) for r in rows]) for _, key, minimum in columns]
    lines = [" ".join(f"{title:<{w}}" for (title, _, _), w in zip(columns, widths, strict=False)).rstrip()]
    lines += [
        " ".join(f"{r[key]!s:<{w}}" for (_, key, _), w in zip(columns, widths, strict=False)).rstrip() for r in rows
    ]
    return "\n".join(lines)


def emit(args: argparse.Namespace, rows: list[dict], columns: list[tuple[str, str, int]], preface: str = "") -> None:
    if args.output == "json":
        print(json.dumps(rows))
        return
    if preface:
        print(preface)
    print()
    print(_table(rows, columns))
