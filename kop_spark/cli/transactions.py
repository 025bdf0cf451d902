"""``kop transactions list`` and ``kop transactions describe --transactional-id ID``: the
transactional ids Kafka producers use on this store, as kafka-transactions.sh shows them: each
one's producer, epoch and state, and the transaction under way (when it began, its partitions)."""

from __future__ import annotations

import argparse

from ..errors import KopError, ResourceNotFoundError
from .common import open_broker

_LIST = ("TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS", "LAST-CHANGE-MS")
# kafka-transactions.sh describe's columns, the coordinator being the one node (0)
_DESCRIBE = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def _print(rows: list[tuple[object, ...]]) -> None:
    for row in rows:
        print("\t".join(map(str, row)))


def _list(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        rows = [
            (s.transactional_id, s.producer_id, s.epoch, s.state, s.timeout_ms, s.updated_ms)
            for s in b.transactions.states()
        ]
    _print([_LIST, *rows])
    return 0


def _describe(args: argparse.Namespace) -> int:
    if args.transactional_id is None:
        raise KopError("kop transactions describe: --transactional-id is required")
    with open_broker(args) as b:
        s = b.transactions.get(args.transactional_id)
        now = b.clock.now_ms()
    if s is None:
        raise ResourceNotFoundError(f"transactional id {args.transactional_id!r} is not known to this store")
    began = s.began_ms >= 0
    start, duration = (s.began_ms, now - s.began_ms) if began else ("None", "None")
    partitions = ",".join(f"{t}-{p}" for t, p in sorted(s.partitions))
    _print(
        [_DESCRIBE, (0, s.transactional_id, s.producer_id, s.epoch, s.state, s.timeout_ms, start, duration, partitions)]
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("transactions", help="Kafka producers' transactional ids (kafka-transactions list, describe)")
    t.add_argument("action", choices=["list", "describe"])
    t.add_argument("--transactional-id", help="the id to describe (describe)")
    t.set_defaults(run=lambda args: _describe(args) if args.action == "describe" else _list(args))
