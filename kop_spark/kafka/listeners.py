"""Listeners in Kafka's form (``PLAINTEXT://127.0.0.1:9092,...``), as ``kafkaListeners`` and
``kafkaAdvertisedListeners`` (KoP's names for Kafka's ``listeners`` / ``advertised.listeners``)."""

from __future__ import annotations

import urllib.parse
from typing import NamedTuple

from ..errors import ConfigError

SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class Listener(NamedTuple):
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listeners(text: str, setting: str = "kafkaListeners") -> list[Listener]:
    """Listeners from ``text``; an empty host means every interface, as in Kafka."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        scheme, sep, address = item.partition("://")
        protocol = scheme.upper()
        parts = urllib.parse.urlsplit("//" + address)  # urlsplit takes no '_' in a scheme: SASL_SSL
        if not protocol or not sep:
            raise ConfigError(f"{setting}: {item!r} is not PROTOCOL://host:port")
        if protocol not in SUPPORTED_PROTOCOLS:
            raise ConfigError(f"{setting}: {item!r}: {protocol} is not supported ({', '.join(SUPPORTED_PROTOCOLS)})")
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            raise ConfigError(f"{setting}: {item!r} needs a port between 0 and 65535")
        out.append(Listener(protocol, parts.hostname or "0.0.0.0", port))
    if not out:
        raise ConfigError(f"{setting}: no listener given (expected PLAINTEXT://host:port[,...])")
    return out
