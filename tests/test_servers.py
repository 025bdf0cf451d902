"""The test servers' ports: outside the range the kernel picks ports from, where Spark listens for
each Python worker it starts to connect back. A client of a stopped test server keeps dialling its
port, and once took Spark's place there (``servers.free_port`` says more)."""

from __future__ import annotations

from pathlib import Path

from .kop_server import KopServer
from .servers import free_port


def _ephemeral_range_start() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def test_free_ports_are_below_the_ephemeral_range_and_not_soon_taken_again() -> None:
    ports = [free_port() for _ in range(100)]
    assert max(ports) < _ephemeral_range_start()
    assert len(set(ports)) == len(ports)


def test_kop_serve_listens_on_each_protocol_below_the_ephemeral_range(tmp_path: Path) -> None:
    with KopServer(str(tmp_path / "store"), protocols=["PLAINTEXT", "SASL_PLAINTEXT"]) as server:
        ports = {int(address.rsplit(":", 1)[1]) for address in server.bootstraps.values()}
    assert len(ports) == 2 and max(ports) < _ephemeral_range_start()
