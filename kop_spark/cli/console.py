"""``kop produce`` and ``kop consume``: lines in, records out (kafka-console-producer/-consumer)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from ..broker import Broker
from ..errors import KopError
from ..record import ConsumerRecord, Record
from .common import json_bytes, key_values, open_broker, text

_PRODUCE_BATCH = 1000


def _produce(args: argparse.Namespace) -> int:
    headers = [(k, v.encode()) for k, v in key_values(args.header, "--header").items()]
    total = 0
    try:
        with open_broker(args) as b:
            # Fails before reading stdin if the topic is missing. Each send of up to _PRODUCE_BATCH
            # lines is one batch while it fits the topic's max.message.bytes.
            batch_bytes = b.topic_config(args.topic)["max.message.bytes"]
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
                    b.produce(
                        args.topic, batch, args.partition, compression=args.compression_type, batch_size=batch_bytes
                    )
                    total += len(batch)
                    batch = []
            if batch:
                b.produce(args.topic, batch, args.partition, compression=args.compression_type, batch_size=batch_bytes)
                total += len(batch)
    finally:  # also on Ctrl-C: what was acknowledged is stored, and the user should know how much
        print(f"Produced {total} records to {args.topic} (acknowledged).", file=sys.stderr)
    return 0


def _records(b: Broker, args: argparse.Namespace) -> Iterator[ConsumerRecord]:
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


def _consume(args: argparse.Namespace) -> int:
    if args.offset not in (None, "earliest", "latest"):
        try:
            int(args.offset)
        except ValueError:
            raise KopError(f"--offset must be earliest, latest or a number, got {args.offset!r}") from None
        if args.partition is None:
            raise KopError("--offset N needs --partition, as in kafka-console-consumer")
    n = 0
    try:
        with open_broker(args) as b:
            for r in _records(b, args):
                if args.max_messages is not None and n >= args.max_messages:
                    break
                sys.stdout.write(_format_record(r, args))
                n += 1
    finally:  # also on Ctrl-C, as kafka-console-consumer
        print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def _format_record(r: ConsumerRecord, args: argparse.Namespace) -> str:
    if args.format == "json":
        return (
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp_ms,
                    "timestampType": int(r.timestamp_type),
                    "key": json_bytes(r.key),
                    "value": json_bytes(r.value),
                    "headers": [{"key": k, "value": json_bytes(v)} for k, v in r.headers],
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
        parts.append(text(r.key) or "null")
    parts.append(text(r.value) or "null")
    return "\t".join(parts) + "\n"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
