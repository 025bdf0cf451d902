"""OAUTHBEARER tokens checked as Kafka's ``OAuthBearerValidatorCallbackHandler`` checks them
(KIP-768): a JWT signed by one of the identity provider's keys, published as a JWKS at
``sasl.oauthbearer.jwks.endpoint.url`` (https://, or file:// for keys kept on the server), read at
start-up and again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` or when a token names a key
not yet seen (the provider rotated its keys). The token must not have expired (allowing
``sasl.oauthbearer.clock.skew.seconds``), and must name the expected audience and issuer where
those are set; its ``sasl.oauthbearer.sub.claim.name`` claim is the user (principal User:<sub>).

Unsigned tokens ("alg": "none"), which Kafka's unsecured default handler accepts, are refused,
and so are symmetric algorithms: a JWKS holds public keys."""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol

from ..errors import ConfigError
from .sasl import SaslAuthenticationError

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
JWKS_TIMEOUT_S = 10  # an identity provider that does not answer fails a login, never hangs it
# A token naming a key not seen reads the JWKS again, at most once a second: a rotated key is taken
# at once, and tokens naming made-up keys cannot make the server hammer the identity provider.
JWKS_COOLDOWN_S = 1.0


class TokenValidator:
    def __init__(self, config: Mapping[str, Any]):
        """Reads the JWKS once, so a wrong URL stops the server at start-up (as Kafka's broker)."""
        try:
            import jwt
        except ImportError:
            raise ConfigError(
                "sasl.enabled.mechanisms includes OAUTHBEARER, which needs PyJWT: pip install 'kop-spark[oauth]'"
            ) from None
        self._jwt = jwt
        self._url = config["sasl.oauthbearer.jwks.endpoint.url"]
        if not self._url:
            raise ConfigError(
                "sasl.enabled.mechanisms includes OAUTHBEARER: set sasl.oauthbearer.jwks.endpoint.url to the "
                "identity provider's JWKS (https:// or file://)"
            )
        audience = [a.strip() for a in config["sasl.oauthbearer.expected.audience"].split(",") if a.strip()]
        self._audience = audience or None
        self._issuer = config["sasl.oauthbearer.expected.issuer"] or None
        self._skew_s = config["sasl.oauthbearer.clock.skew.seconds"]
        self._sub = config["sasl.oauthbearer.sub.claim.name"]
        lifespan_s = config["sasl.oauthbearer.jwks.endpoint.refresh.ms"] / 1000
        try:
            if urllib.parse.urlparse(self._url).scheme == "file":
                self._keys: _Keys = _FileKeys(self._url)
            else:
                self._keys = jwt.PyJWKClient(
                    self._url, lifespan=lifespan_s, timeout=JWKS_TIMEOUT_S, cooldown_duration=JWKS_COOLDOWN_S
                )
                self._keys.get_jwk_set()
        except (OSError, jwt.PyJWTError) as e:
            raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url={self._url}: cannot read a JWKS there: {e}") from e

    def __call__(self, token: str) -> tuple[str, int]:
        """The user ``token`` was issued for and when it expires (ms); SaslAuthenticationError,
        with the reason, if refused."""
        jwt = self._jwt
        try:
            key = self._keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._skew_s,
                options={"require": ["exp"], "verify_aud": self._audience is not None},
            )
        except (OSError, jwt.PyJWKClientConnectionError) as e:
            raise SaslAuthenticationError(f"OAUTHBEARER: cannot read the JWKS at {self._url}: {e}") from None
        except jwt.PyJWTError as e:
            raise SaslAuthenticationError(f"OAUTHBEARER: token refused: {e}") from None
        user = claims.get(self._sub)
        if not isinstance(user, str) or not user:
            raise SaslAuthenticationError(f"OAUTHBEARER: token refused: no {self._sub!r} claim naming its user")
        return user, int(claims["exp"]) * 1000


class _Keys(Protocol):
    def get_signing_key_from_jwt(self, token: str) -> Any: ...


class _FileKeys:
    """A JWKS kept in a file on the server, read again whenever the file changes (PyJWT's client
    reads https:// only)."""

    def __init__(self, url: str):
        import jwt

        self._jwt = jwt
        self._path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str | None, Any] = {}
        self._load()

    def _load(self) -> None:
        stat = os.stat(self._path)
        if (stat.st_mtime_ns, stat.st_size) != self._stamp:
            with open(self._path, encoding="utf-8") as f:
                keys = self._jwt.PyJWKSet.from_json(f.read()).keys
            self._keys, self._stamp = {k.key_id: k for k in keys}, (stat.st_mtime_ns, stat.st_size)

    def get_signing_key_from_jwt(self, token: str) -> Any:
        self._load()
        kid = self._jwt.get_unverified_header(token).get("kid")
        if kid not in self._keys:
            raise self._jwt.PyJWKClientError(f'Unable to find a signing key that matches: "{kid}"')
        return self._keys[kid]
