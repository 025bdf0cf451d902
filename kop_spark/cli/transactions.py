"""``kop transactions list``: the transactional ids Kafka producers use on this store, as
kafka-transactions.sh lists them, with each one's producer, epoch and state."""

from __future__ import annotations

import argparse

from .common import open_broker

_COLUMNS = ("TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS", "LAST-CHANGE-MS")


def _list(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        rows = [
            (s.transactional_id, s.producer_id, s.epoch, s.state, s.timeout_ms, s.updated_ms)
            for s in b.transactions.states()
        ]
    for row in [_COLUMNS, *rows]:
        print("\t".join(map(str, row)))
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("transactions", help="Kafka producers' transactional ids (kafka-transactions list)")
    t.add_argument("action", choices=["list"])
    t.set_defaults(run=_list)
