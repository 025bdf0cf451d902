"""``kop produce`` and ``kop consume``: lines in, records out (kafka-console-producer/-consumer)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator

from ..broker import Broker
from ..broker.producer_batches import estimated_size
from ..errors import KopError
from ..record import ConsumerRecord, Record, build_record_batch
from ..record.default_record_batch import HEADER_SIZE
from .common import json_bytes, key_values, open_broker, shown

_PRODUCE_BATCH = 1000
_POLL_RECORDS = 500  # per partition and round, as a consumer's max.poll.records
_POLL_INTERVAL_S = 0.2
_COMMIT_EVERY = 1000  # records between a --group's commits, besides the one at the end


class _NoSeparator(KopError):
    """A line without the key separator: it stops the run, unless ``ignore.error=true``."""


class _TooLarge(KopError):
    """A line too large for the topic: it alone is rejected."""


def _properties(args: argparse.Namespace) -> dict[str, str]:
    return key_values(getattr(args, "property", None), "--property")


def _flag(props: dict[str, str], name: str) -> bool:
    value = props.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise KopError(f"--property {name}={props[name]!r}: expected true or false")
    return value == "true"


def _key_separator(args: argparse.Namespace, props: dict[str, str]) -> bytes | None:
    """The separator of key and value in each line, as kafka-console-producer's ``parse.key`` and
    ``key.separator`` (``--key-separator`` turns parsing on too)."""
    sep = args.key_separator if args.key_separator is not None else props.get("key.separator")
    if args.key_separator is None and not _flag(props, "parse.key"):
        return None
    if sep is None:
        sep = "\t"
    if sep == "":
        raise KopError("the key separator is empty: give one or more characters, e.g. --key-separator :")
    return sep.encode()


def _record(line: bytes, n: int, sep: bytes | None, headers: list[tuple[str, bytes]], max_bytes: int) -> Record:
    key = None
    if sep is not None:
        if sep not in line:
            raise _NoSeparator(f"line {n} has no key separator {sep.decode()!r}: {line[:80]!r}")
        key, line = line.split(sep, 1)
    record = Record(value=line, key=key, headers=headers)
    if estimated_size(record) + HEADER_SIZE > max_bytes:
        size = len(build_record_batch([record]))
        if size > max_bytes:
            raise _TooLarge(f"line {n}: a record of {size} bytes is larger than max.message.bytes={max_bytes}")
    return record


def _produce(args: argparse.Namespace) -> int:
    topic = _topic(args)
    props = _properties(args)
    headers = [(k, v.encode()) for k, v in key_values(args.header, "--header").items()]
    skip_bad = _flag(props, "ignore.error")
    acked = rejected = 0
    try:
        with open_broker(args) as b:
            # Fails before reading stdin if the topic is missing. Each send of up to _PRODUCE_BATCH
            # lines is one batch while it fits the topic's max.message.bytes.
            max_bytes = b.topic_config(topic)["max.message.bytes"]
            sep = _key_separator(args, props)
            chunk: list[Record] = []

            def send() -> None:
                nonlocal acked, chunk
                if chunk:
                    b.produce(topic, chunk, args.partition, compression=args.compression_type, batch_size=max_bytes)
                    acked, chunk = acked + len(chunk), []

            for n, line in enumerate(sys.stdin.buffer, 1):
                try:
                    chunk.append(_record(line.rstrip(b"\r\n"), n, sep, headers, max_bytes))
                except (_NoSeparator, _TooLarge) as e:
                    send()  # every line before a bad one is produced
                    rejected += 1
                    if isinstance(e, _NoSeparator) and not skip_bad:
                        raise
                    print(f"error: {e}", file=sys.stderr)
                    continue
                if len(chunk) >= _PRODUCE_BATCH:
                    send()
            send()
    finally:  # also on Ctrl-C: what was acknowledged is stored, and the user should know how much
        print(f"Produced {acked} records to {topic} (acknowledged); {rejected} rejected.", file=sys.stderr)
    return 1 if rejected else 0


def _topic(args: argparse.Namespace) -> str:
    topic: str | None = args.topic_option or args.topic
    if not topic:
        raise KopError(f"kop {args.command}: a topic is required (TOPIC or --topic TOPIC)")
    if args.topic_option and args.topic and args.topic_option != args.topic:
        raise KopError(f"kop {args.command}: two topics given ({args.topic!r} and --topic {args.topic_option!r})")
    return topic


def _start(b: Broker, topic: str, p: int, args: argparse.Namespace, committed: dict[int, int]) -> int:
    if args.offset is None and args.from_timestamp is None and p in committed:
        return committed[p]  # a group resumes where it left off, as kafka-console-consumer --group
    if args.from_timestamp is not None:
        found = b.list_offsets(topic, p, args.from_timestamp)
        return found if found >= 0 else b.list_offsets(topic, p, "latest")  # none that late: the end
    if args.from_beginning or args.offset == "earliest":
        return b.list_offsets(topic, p, "earliest")
    if args.offset in (None, "latest"):
        return b.list_offsets(topic, p, "latest")
    return int(args.offset)


def _records(b: Broker, topic: str, args: argparse.Namespace, committed: dict[int, int]) -> Iterator[ConsumerRecord]:
    """Records of every partition, a round at a time from each in turn, as a consumer's polls
    interleave them; then new ones as they come, until ``--timeout-ms`` passes without any."""
    partitions = [args.partition] if args.partition is not None else range(b.partitions_for(topic))
    positions = {p: _start(b, topic, p, args, committed) for p in partitions}
    last_record = time.monotonic()
    while True:
        fetched = False
        for p, position in positions.items():
            records = b.fetch(topic, p, position, max_records=_POLL_RECORDS)  # also checks the offset
            if records:
                fetched = True
                positions[p] = records[-1].offset + 1
                yield from records
        if fetched:
            last_record = time.monotonic()
        elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
            return
        else:
            time.sleep(_POLL_INTERVAL_S)  # nothing new: poll again, as a consumer does


def _consume(args: argparse.Namespace) -> int:
    topic = _topic(args)
    if args.offset not in (None, "earliest", "latest"):
        try:
            int(args.offset)
        except ValueError:
            raise KopError(f"--offset must be earliest, latest or a number, got {args.offset!r}") from None
        if args.partition is None:
            raise KopError("--offset N needs --partition, as in kafka-console-consumer")
    if args.from_beginning and args.offset is not None:
        raise KopError("--from-beginning and --offset cannot be given together, as in kafka-console-consumer")
    limit = None if args.max_messages is None or args.max_messages < 0 else args.max_messages
    layout = _OutputLayout.of(args)
    n = 0
    try:
        with open_broker(args) as b:
            committed = _group_offsets(b, topic, args.group)
            done: dict[int, int] = {}  # partition -> the offset after the last record printed
            try:
                for r in _records(b, topic, args, committed):
                    if limit is not None and n >= limit:
                        break
                    sys.stdout.write(layout.format(r))
                    sys.stdout.flush()
                    done[r.partition] = r.offset + 1
                    n += 1
                    if args.group and n % _COMMIT_EVERY == 0:
                        b.commit_offsets(args.group, {(topic, p): o for p, o in done.items()})
            finally:  # what was printed is what the group consumed, also on Ctrl-C
                if args.group and done:
                    b.commit_offsets(args.group, {(topic, p): o for p, o in done.items()})
    finally:  # also on Ctrl-C, as kafka-console-consumer
        print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def _group_offsets(b: Broker, topic: str, group: str | None) -> dict[int, int]:
    if not group:
        return {}
    return {p: o.offset for (t, p), o in b.fetch_offsets(group).items() if t == topic and o.offset >= 0}


class _OutputLayout:
    """How a record is printed: JSON, or kafka-console-consumer's text layout (``--property
    print.timestamp/print.partition/print.offset/print.key=true``, ``key.separator``)."""

    def __init__(self, as_json: bool, props: dict[str, str], legacy: argparse.Namespace):
        self.as_json = as_json
        self.timestamp = _flag(props, "print.timestamp") or legacy.print_timestamp
        self.partition = _flag(props, "print.partition")
        self.offset = _flag(props, "print.offset")
        self.key = _flag(props, "print.key") or legacy.print_key
        self.legacy_offset = legacy.print_offset  # the older --print-offset: partition:offset
        self.separator = props.get("key.separator", "\t")

    @classmethod
    def of(cls, args: argparse.Namespace) -> _OutputLayout:
        return cls(args.format == "json", _properties(args), args)

    def format(self, r: ConsumerRecord) -> str:
        if self.as_json:
            return _json_record(r)
        parts = []
        if self.legacy_offset:
            parts.append(f"{r.partition}:{r.offset}")
        if self.timestamp:
            parts.append(f"{'CreateTime' if r.timestamp_type == 0 else 'LogAppendTime'}:{r.timestamp_ms}")
        if self.partition:
            parts.append(f"Partition:{r.partition}")
        if self.offset:
            parts.append(f"Offset:{r.offset}")
        value = shown(r.value)
        if self.key:
            value = f"{shown(r.key)}{self.separator}{value}"
        return "\t".join([*parts, value]) + "\n"


def _json_record(r: ConsumerRecord) -> str:
    record = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp_ms,
        "timestampType": int(r.timestamp_type),
        "key": json_bytes(r.key),
        "value": json_bytes(r.value),
        "headers": [{"key": k, "value": json_bytes(v)} for k, v in r.headers],
    }
    return json.dumps(record) + "\n"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pr = sub.add_parser("produce", help="produce lines from stdin, one record each")
    pr.add_argument("topic", nargs="?")
    pr.add_argument("--topic", dest="topic_option", metavar="TOPIC", help="the topic (as kafka-console-producer)")
    pr.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="parse.key=true, key.separator=SEP (default a tab), ignore.error=true (skip lines without one)",
    )
    pr.add_argument("--partition", type=int)
    pr.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    pr.add_argument("--header", action="append", metavar="KEY=VALUE", help="header added to every record")
    pr.add_argument("--compression-type", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    pr.set_defaults(run=_produce)

    c = sub.add_parser("consume", help="print records as they come (until Ctrl-C or --timeout-ms)")
    c.add_argument("topic", nargs="?")
    c.add_argument("--topic", dest="topic_option", metavar="TOPIC", help="the topic (as kafka-console-consumer)")
    c.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        help="stop once no record has come for this long (0: at the end of what is there now)",
    )
    c.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="print.timestamp, print.partition, print.offset, print.key (true/false); key.separator",
    )
    c.add_argument("--partition", type=int)
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--offset", help="earliest, latest (the default) or an offset (needs --partition)")
    c.add_argument("--from-timestamp", type=int, metavar="MS", help="start at the first record at or after this time")
    c.add_argument("--group", help="consume as this consumer group: resume from its offsets and commit them")
    c.add_argument("--max-messages", type=int, help="stop after this many (absent or -1: no limit)")
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.add_argument("--print-key", action="store_true")
    c.add_argument("--print-offset", action="store_true")
    c.add_argument("--print-timestamp", action="store_true")
    c.set_defaults(run=_consume)
