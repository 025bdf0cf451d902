"""What a server knows of one connection's client: the listener it came in on, who it is (Kafka's
principal: ``User:NAME`` after a SASL login or from a TLS client certificate, else
``User:ANONYMOUS``), and where its SASL login stands."""

from __future__ import annotations

from dataclasses import dataclass

from .sasl import SaslServer

ANONYMOUS = "User:ANONYMOUS"
SASL_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate: all a client may send first


@dataclass
class Session:
    protocol: str  # the listener's: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    host: str
    principal: str = ANONYMOUS
    sasl: SaslServer | None = None  # the login under way, after a SaslHandshake
    raw_tokens: bool = False  # after a v0 SaslHandshake, tokens come without Kafka's framing
    close_after_answer: bool = False  # a refused login: answer, then close

    @property
    def needs_login(self) -> bool:
        return self.protocol.startswith("SASL_") and self.principal == ANONYMOUS

    def logged_in(self, user: str) -> None:
        self.principal, self.sasl, self.raw_tokens = f"User:{user}", None, False
