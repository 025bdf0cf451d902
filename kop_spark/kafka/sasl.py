"""The server side of SASL logins: SCRAM-SHA-256/512 (RFC 5802, RFC 7677, as Kafka implements
them) and PLAIN, both checked against the store's users (``broker.credentials``), and OAUTHBEARER
(RFC 7628, KIP-255), whose token an identity provider signed (``oauth_tokens``).

Each mechanism is a small state machine fed the client's tokens in order; ``step`` answers a
token or raises ``SaslAuthenticationError``, whose message is what the client is told (never a
password, nor whether the user exists: an unknown user and a wrong password read the same)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from typing import Protocol

from ..broker.credentials import MECHANISMS, ScramCredential

Lookup = Callable[[str, str], "ScramCredential | None"]  # (user, mechanism) -> its credential
# An OAuth bearer token -> the user it was issued for and when it expires (ms), or SaslAuthenticationError
Validate = Callable[[str], tuple[str, int]]


class SaslAuthenticationError(Exception):
    """Kafka's SASL_AUTHENTICATION_FAILED: the login is refused and the connection closed."""


class SaslServer(Protocol):
    mechanism: str
    user: str | None  # set once the login is complete
    expires_ms: int  # when the credential the login used expires (a token's); 0: never

    def step(self, token: bytes) -> bytes: ...


def sasl_server(mechanism: str, lookup: Lookup, validate: Validate | None = None) -> SaslServer:
    """``validate``: checks OAUTHBEARER tokens (given when that mechanism is enabled)."""
    if mechanism == "PLAIN":
        return PlainServer(lookup)
    if mechanism == "OAUTHBEARER":
        assert validate is not None, "OAUTHBEARER enabled without a token validator"
        return OAuthBearerServer(validate)
    return ScramServer(mechanism, lookup)


def _invalid(mechanism: str) -> SaslAuthenticationError:
    return SaslAuthenticationError(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )


class PlainServer:
    """``[authzid] NUL authcid NUL password`` (RFC 4616), checked against the user's SCRAM
    credentials by salting and hashing the password again."""

    mechanism = "PLAIN"
    expires_ms = 0

    def __init__(self, lookup: Lookup):
        self._lookup = lookup
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if self.user is not None or len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN request: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        for mechanism in MECHANISMS:
            credential = self._lookup(user, mechanism)
            if credential is not None:
                if credential.verify_password(password):
                    self.user = user
                    return b""
                break
        raise _invalid(self.mechanism)


class OAuthBearerServer:
    """One message from the client, ``gs2-header 0x01 auth=Bearer <token> 0x01 [key=value 0x01]...
    0x01`` (RFC 7628 §3.1); its token checked, the login completes with an empty answer. A token
    refused fails the login at once, the reason (never the token) in the error, where RFC 7628
    would first send a JSON challenge for the client to acknowledge."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validate: Validate):
        self._validate = validate
        self.user: str | None = None
        self.expires_ms = 0

    def step(self, token: bytes) -> bytes:
        if self.user is not None:
            raise SaslAuthenticationError("OAUTHBEARER: unexpected message after the login completed")
        authzid, bearer, _extensions = client_first(token)
        user, expires_ms = self._validate(bearer)
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.user, self.expires_ms = user, expires_ms
        return b""


_GS2_HEADER = re.compile(r"[ny],(?:a=([^,]*))?,")
_KEY = re.compile(r"[A-Za-z]+")
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] ([A-Za-z0-9\-._~+/]+=*)")


def client_first(message: bytes) -> tuple[str, str, dict[str, str]]:
    """An OAUTHBEARER client's message: its authorization id ("" if none), bearer token and
    extensions (KIP-342's, which are not acted on)."""
    try:
        header, *pairs, end, last = message.decode("utf-8").split("\x01")
    except (UnicodeDecodeError, ValueError):
        raise SaslAuthenticationError("OAUTHBEARER: invalid client message") from None
    gs2 = _GS2_HEADER.fullmatch(header)
    fields = dict(p.partition("=")[::2] for p in pairs)
    well_formed = len(fields) == len(pairs) and all("=" in p for p in pairs) and all(map(_KEY.fullmatch, fields))
    if gs2 is None or end or last or not well_formed:
        raise SaslAuthenticationError("OAUTHBEARER: invalid client message")
    bearer = _BEARER.fullmatch(fields.pop("auth", ""))
    if bearer is None:
        raise SaslAuthenticationError("OAUTHBEARER: the client message has no auth=Bearer <token>")
    return _saslname(gs2.group(1) or ""), bearer.group(1), fields


class ScramServer:
    """client-first -> server-first -> client-final -> server-final."""

    expires_ms = 0

    def __init__(self, mechanism: str, lookup: Lookup):
        self.mechanism = mechanism
        self._lookup = lookup
        self.user: str | None = None
        self._user_pending = ""
        self._step = 0
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""

    def step(self, token: bytes) -> bytes:
        self._step += 1
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError(f"{self.mechanism}: the client's message is not UTF-8") from None
        if self._step == 1:
            return self._first(text).encode()
        if self._step == 2:
            return self._final(text).encode()
        raise SaslAuthenticationError(f"{self.mechanism}: unexpected message after the login completed")

    def _first(self, text: str) -> str:
        cbind, authzid, bare = [*text.split(",", 2), "", ""][:3]
        if cbind not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise SaslAuthenticationError(
                f"{self.mechanism}: invalid client-first message (channel binding not supported)"
            )
        fields = _fields(bare)
        user = _saslname(fields.get("n", ""))
        if not user or "r" not in fields or "m" in fields:
            raise SaslAuthenticationError(f"{self.mechanism}: invalid client-first message")
        if authzid and _saslname(authzid[2:]) != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            raise _invalid(self.mechanism)
        self._credential, self._gs2_header, self._client_first_bare = credential, f"{cbind},{authzid},", bare
        self._nonce = fields["r"] + base64.b64encode(os.urandom(18)).decode()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._user_pending = user
        return self._server_first

    def _final(self, text: str) -> str:
        credential = self._credential
        assert credential is not None
        without_proof, _, proof_field = text.rpartition(",p=")
        fields = _fields(without_proof)
        if fields.get("r") != self._nonce:
            raise SaslAuthenticationError(f"{self.mechanism}: invalid server nonce in the client-final message")
        if fields.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise SaslAuthenticationError(f"{self.mechanism}: invalid channel binding in the client-final message")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        h = credential.hash_name
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError:
            raise _invalid(self.mechanism) from None
        signature = hmac.digest(credential.stored_key, auth_message, h)
        if len(proof) != len(signature):
            raise _invalid(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key):
            raise _invalid(self.mechanism)
        self.user = self._user_pending
        return "v=" + base64.b64encode(hmac.digest(credential.server_key, auth_message, h)).decode()


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        if eq and len(name) == 1:
            out.setdefault(name, value)
    return out


def _saslname(text: str) -> str:
    return text.replace("=2C", ",").replace("=3D", "=")
