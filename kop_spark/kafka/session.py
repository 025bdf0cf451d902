"""What a server knows of one connection's client: the listener it came in on, who it is (Kafka's
principal: ``User:NAME`` after a SASL login or from a TLS client certificate, else
``User:ANONYMOUS``), where its SASL login stands, and when it ends unless the client logs in
again on the connection (KIP-368, ``connections.max.reauth.ms``)."""

from __future__ import annotations

from dataclasses import dataclass

from .sasl import SaslAuthenticationError, SaslServer

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
    mechanism: str | None = None  # of the login that made the principal
    expires_ms: int = 0  # when the login ends unless the client logs in again (KIP-368); 0: never

    @property
    def needs_login(self) -> bool:
        return self.protocol.startswith("SASL_") and self.principal == ANONYMOUS

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expires_ms <= now_ms

    def logged_in(self, user: str, mechanism: str, expires_ms: int) -> None:
        """A login completed: the first, or one again (KIP-368), which must be the same principal's
        with the same mechanism."""
        principal = f"User:{user}"
        if self.mechanism is not None and (principal, mechanism) != (self.principal, self.mechanism):
            raise SaslAuthenticationError(
                f"re-authentication as {principal} with {mechanism} on a connection of {self.principal} "
                f"with {self.mechanism}"
            )
        self.principal, self.mechanism, self.expires_ms = principal, mechanism, expires_ms
        self.sasl, self.raw_tokens = None, False
