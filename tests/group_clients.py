"""What the group tests of either rebalance protocol do with real consumers: poll them until a
condition holds (or fail after a deadline), produce, look at assignments and run ``kop groups``."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Producer

from kop_spark import Broker
from kop_spark.broker import LiveGroup

from .conftest import PYTHON, python_subprocess_env
from .kop_server import KopServer


def poll_until(
    consumers: list[Consumer], done: Any, timeout: float = 30, each_round: Any = None
) -> list[tuple[str, int, int]]:
    """Polls each consumer in turn until ``done(records so far)``; ``each_round()`` after every round."""
    got: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"not done within {timeout} s; consumed {len(got)}"
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append((c.memberid(), m.partition(), m.offset()))
        if each_round is not None:
            each_round()
    return got


def produce(server: KopServer, n: int) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(n):
        p.produce("t", key=f"{i}".encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0


def consumed_through_a_restart(server: KopServer, consumers: list[Consumer], stop: str) -> None:
    """40 records read before the server is killed (``stop`` "kill") or stopped (SIGTERM), and 40
    after it is started again: each read once, none again."""
    produce(server, 40)
    first = poll_until(consumers, lambda got: len(got) >= 40)
    if stop == "kill":
        server.kill()
    else:
        assert server.stop() == 0
    server.start()
    produce(server, 40)  # read after the restart by the partitions' same owners
    then = poll_until(consumers, lambda got: len(got) >= 40, timeout=60)
    assert len({(p, o) for _, p, o in first + then}) == 80


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def kop_groups(server: KopServer, *args: str) -> subprocess.CompletedProcess[str]:
    command = [PYTHON, "-m", "kop_spark.cli", "--root", server.root, "groups", *args]
    return subprocess.run(command, capture_output=True, text=True, env=python_subprocess_env(), timeout=120)


def until_live(server: KopServer, members: int, group: str = "g", partitions: int | None = None) -> None:
    """Until the server has published ``members`` live members of the group (holding
    ``partitions`` between them, if given)."""
    deadline = time.monotonic() + 30

    def shown(live: LiveGroup | None) -> tuple[int, int | None]:
        held = live.members if live else ()
        return len(held), None if partitions is None else sum(len(m.partitions) for m in held)

    with Broker(server.root) as b:
        while shown(b.live_groups.get(group)) != (members, partitions):
            assert time.monotonic() < deadline, f"the group never showed {members} live members ({partitions=})"


_MEMBER = textwrap.dedent(
    """
    import json, sys
    from confluent_kafka import Consumer
    c = Consumer(json.loads(sys.argv[1]))
    c.subscribe(["t"])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("assigned", flush=True)
    """
)


@contextmanager
def doomed_member(conf: dict[str, Any]) -> Iterator[threading.Event]:
    """A member of group g in another process, consuming t, killed with SIGKILL on leaving the
    block (it never says it leaves); the event is set once it has partitions."""
    proc = subprocess.Popen(
        [PYTHON, "-c", _MEMBER, json.dumps({"group.id": "g", "client.id": "doomed", **conf})],
        stdout=subprocess.PIPE,
        text=True,
        env=python_subprocess_env(),
    )
    got_some = threading.Event()
    threading.Thread(target=lambda: proc.stdout and proc.stdout.readline() and got_some.set(), daemon=True).start()
    try:
        yield got_some
    finally:
        proc.kill()
        proc.wait()
