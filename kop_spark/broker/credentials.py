"""SASL users: salted SCRAM credentials (RFC 5802, RFC 7677), as Kafka keeps them in ZooKeeper.

A user is stored at ``kafka/users/<name>`` as one credential per mechanism: salt, iteration
count, StoredKey = H(ClientKey) and ServerKey, in base64. Nothing stored lets anyone recover the
password or log in with what they read: a login needs the ClientKey, which only the password
gives. SASL/PLAIN is checked against the same credentials (the password is salted and hashed
again and compared with StoredKey)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import NamedTuple

from .. import layout
from ..errors import ConfigError, ResourceNotFoundError
from ..retry import retry_cas
from ..storage.metadata_store import MetadataStore

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM


class ScramCredential(NamedTuple):
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @property
    def hash_name(self) -> str:
        return MECHANISMS[self.mechanism]

    @staticmethod
    def from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
        check_mechanism(mechanism)
        salt = os.urandom(32)
        return ScramCredential.from_salted_password(
            mechanism, salt, iterations, salted_password(MECHANISMS[mechanism], password, salt, iterations)
        )

    @staticmethod
    def from_salted_password(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
        """The credential of SaltedPassword = Hi(password, salt, iterations), which is what a
        client sends in AlterUserScramCredentials: the password itself never reaches the server."""
        check_mechanism(mechanism)
        if iterations < MIN_ITERATIONS:
            raise ConfigError(f"SCRAM iterations must be at least {MIN_ITERATIONS}, got {iterations}")
        if not salt or not salted:
            raise ConfigError(f"a {mechanism} credential needs a salt and a salted password")
        hash_name = MECHANISMS[mechanism]
        client_key, server_key = scram_keys(hash_name, salted)
        return ScramCredential(mechanism, salt, iterations, hashlib.new(hash_name, client_key).digest(), server_key)

    def verify_password(self, password: str) -> bool:
        salted = salted_password(self.hash_name, password, self.salt, self.iterations)
        client_key, _ = scram_keys(self.hash_name, salted)
        return hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), self.stored_key)

    def to_json(self) -> dict[str, object]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
        }

    @staticmethod
    def from_json(mechanism: str, d: dict) -> ScramCredential:
        raw = base64.b64decode
        return ScramCredential(
            mechanism, raw(d["salt"]), int(d["iterations"]), raw(d["stored_key"]), raw(d["server_key"])
        )


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, iterations) (RFC 5802 §3)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def scram_keys(hash_name: str, salted: bytes) -> tuple[bytes, bytes]:
    """ClientKey and ServerKey of a salted password (RFC 5802 §3)."""
    return hmac.digest(salted, b"Client Key", hash_name), hmac.digest(salted, b"Server Key", hash_name)


def check_mechanism(mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        raise ConfigError(f"SASL mechanism {mechanism!r} has no stored credentials (use {' or '.join(MECHANISMS)})")


def check_user_name(name: str) -> None:
    if not name or any(c in name for c in "/,=") or not name.isprintable():
        raise ConfigError(f"user name {name!r}: must be printable, not empty, without '/', ',' or '='")
    if name == "ANONYMOUS":  # the principal of a client that has not logged in
        raise ConfigError("user name 'ANONYMOUS' is reserved for clients that have not logged in")
    try:
        layout.user_key(name)
    except ValueError as e:
        raise ConfigError(f"user name {name!r}: {e}") from None


class Users:
    """The users SASL logins are checked against, in the metadata store (every server on the store
    sees the same users; a change needs no restart)."""

    def __init__(self, store: MetadataStore):
        self._store = store

    def add(self, name: str, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> None:
        """Add ``name`` or replace its credential for ``mechanism`` (its others stay)."""
        check_user_name(name)
        if not password:
            raise ConfigError(f"user {name!r}: the password is empty")
        self.alter(name, [ScramCredential.from_password(mechanism, password, iterations)], [])

    def alter(self, name: str, upsert: Sequence[ScramCredential], delete: Sequence[str]) -> None:
        """Set ``upsert`` and remove the credentials of the ``delete`` mechanisms, in one change (a
        user left with none is gone); deleting a credential the user does not have is refused."""
        check_user_name(name)
        key = layout.user_key(name)

        def attempt() -> None:
            current = self._store.get(key)
            value = dict(current.value or {})
            for mechanism in delete:
                if value.pop(mechanism, None) is None:
                    raise ResourceNotFoundError(f"user {name!r} has no {mechanism} credential to delete")
            value |= {c.mechanism: c.to_json() for c in upsert}
            self._store.put(key, value or None, current.version)

        retry_cas(f"user {name}", attempt)

    def delete(self, name: str) -> bool:
        """Remove a user; whether there was one."""
        check_user_name(name)
        current = self._store.get(layout.user_key(name))
        if current.value is None:
            return False
        self._store.put(layout.user_key(name), None, current.version)
        return True

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        try:
            check_user_name(name)
        except ConfigError:
            return None
        value = self._store.get(layout.user_key(name)).value
        if not value or mechanism not in value:
            return None
        return ScramCredential.from_json(mechanism, value[mechanism])

    def credentials(self, name: str) -> list[ScramCredential]:
        check_user_name(name)
        value = self._store.get(layout.user_key(name)).value or {}
        return [ScramCredential.from_json(m, value[m]) for m in sorted(value)]

    def names(self) -> dict[str, list[str]]:
        """Each user and the mechanisms it has credentials for."""
        out = {}
        for key in self._store.list_keys(layout.USERS):
            value = self._store.get(key).value
            if value:
                out[layout.name_of_segment(key.rsplit("/", 1)[1])] = sorted(value)
        return dict(sorted(out.items()))
