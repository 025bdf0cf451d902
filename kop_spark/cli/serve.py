"""``kop serve``: speak the Kafka protocol over the store, so Kafka clients produce and consume."""

from __future__ import annotations

import argparse
import asyncio
import logging

from .common import open_broker


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the wire server (kio's schemas) takes longer to import than the rest of the
    # command line, and every other command would pay for it at each start.
    from ..kafka.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open_broker(args) as b:
        asyncio.run(serve(b, args.listeners, args.advertised_listeners))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve Kafka clients (kafka-server-start)")
    p.add_argument("--listeners", help="PLAINTEXT://host:port[,...] (default: kafkaListeners, loopback)")
    p.add_argument("--advertised-listeners", help="addresses told to clients (default: kafkaAdvertisedListeners)")
    p.set_defaults(run=_serve)
