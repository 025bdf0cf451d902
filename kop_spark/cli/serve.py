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
    _raise_open_files_limit()
    with open_broker(args) as b:
        asyncio.run(serve(b, args.listeners, args.advertised_listeners))
    return 0


def _raise_open_files_limit() -> None:
    """Raise the soft limit on open files to the hard one, as the JVM does for a Kafka broker
    (``-XX:+MaxFDLimit``, on by default). kop serve holds each written partition's open ledger
    open, and a shell's usual 1024 refused appends past about a thousand partitions."""
    try:
        import resource
    except ImportError:  # Windows has no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # an unlimited hard limit above the kernel's nr_open
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    logging.getLogger(__name__).info("open files limit: %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve Kafka clients (kafka-server-start)")
    p.add_argument("--listeners", help="PLAINTEXT://host:port[,...] (default: kafkaListeners, loopback)")
    p.add_argument("--advertised-listeners", help="addresses told to clients (default: kafkaAdvertisedListeners)")
    p.set_defaults(run=_serve)
