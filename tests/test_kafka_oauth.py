"""``kop serve`` OAUTHBEARER logins (KIP-255, with tokens checked as KIP-768's validator checks
them) with real clients: librdkafka through confluent-kafka's ``oauth_cb`` and kafka-python's token
provider log in with tokens an identity provider signed, and ACLs see the token's subject as the
principal. The identity provider is a key pair made on the spot, its JWKS in a file; an
unreachable one is a loopback port nobody listens on."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kop_spark import Broker
from kop_spark.config import Config
from kop_spark.errors import ConfigError
from kop_spark.kafka.oauth_tokens import TokenValidator
from kop_spark.kafka.sasl import OAuthBearerServer, SaslAuthenticationError, client_first

from .kafka_wire import call, wire_request
from .kop_server import KopServer
from .test_cli import kop
from .test_kafka_security import authentication_failed, refusal, round_trip

ISSUER, AUDIENCE = "https://idp.example", "kafka"
SECRET = b"a secret of 32 bytes or more, as RFC 7518 asks"


class IdentityProvider:
    """Signs tokens with its keys, and publishes their public halves as a JWKS file."""

    def __init__(self, directory: Path):
        self.jwks = directory / "jwks.json"
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.rotate("k1")

    @property
    def url(self) -> str:
        return self.jwks.as_uri()

    def rotate(self, kid: str) -> None:
        """A new key, published beside the old ones."""
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        published = [
            {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(k.public_key())), "kid": i, "use": "sig"}
            for i, k in self.keys.items()
        ]
        # A shared secret published by mistake: a JWKS is public, so HMAC-signed tokens are refused.
        published.append({**json.loads(jwt.algorithms.HMACAlgorithm.to_jwk(SECRET)), "kid": "s1"})
        self.jwks.write_text(json.dumps({"keys": published}))

    def token(self, sub: str | None = "alice", kid: str = "k1", key: Any = None, **claims: Any) -> str:
        return jwt.encode(self.claims(sub, **claims), key or self.keys[kid], algorithm="RS256", headers={"kid": kid})

    def claims(self, sub: str | None = "alice", **claims: Any) -> dict[str, Any]:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "sub": sub, **claims}
        return {k: v for k, v in body.items() if v is not None}


@pytest.fixture
def idp(tmp_path: Path) -> IdentityProvider:
    return IdentityProvider(tmp_path)


@contextlib.contextmanager
def serving(idp: IdentityProvider) -> Iterator[str]:
    """The identity provider over HTTP on loopback, as an OIDC provider serves: its JWKS at
    /jwks.json, and tokens for the client credentials grant at /token (the client id is the
    subject; the secret is "secret-<client id>"). Yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(200, idp.jwks.read_bytes()) if self.path == "/jwks.json" else self._answer(404, b"{}")

        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            scheme, _, credentials = self.headers.get("Authorization", "").partition(" ")
            client, _, secret = base64.b64decode(credentials).decode().partition(":")
            if self.path != "/token" or form.get("grant_type") != ["client_credentials"] or scheme != "Basic":
                self._answer(400, b'{"error": "invalid_request"}')
            elif secret != f"secret-{client}":
                self._answer(401, b'{"error": "invalid_client"}')
            else:
                answer = {"access_token": idp.token(client), "token_type": "Bearer", "expires_in": 600}
                self._answer(200, json.dumps(answer).encode())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _settings(idp: IdentityProvider, **more: Any) -> dict[str, Any]:
    return {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": idp.url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        **more,
    }


@pytest.fixture
def idp_url(idp: IdentityProvider) -> Iterator[str]:
    with serving(idp) as url:
        yield url


@pytest.fixture(params=["file", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path, idp: IdentityProvider, idp_url: str) -> Iterator[KopServer]:
    """Authorization on: alice may write and read topic t in any group; mallory may do nothing.
    The JWKS is read from a file, or from the identity provider over HTTP (plain HTTP on loopback,
    where a real one is https: PyJWT's client reads both alike)."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    for resource in (["--topic", "t"], ["--group", "*"]):
        made = kop(root, "acls", "add", "--allow-principal", "User:alice", "--operation", "All", *resource)
        assert made.returncode == 0, made.stderr
    jwks = idp.url if request.param == "file" else f"{idp_url}/jwks.json"
    conf = _settings(idp, authorizationEnabled="true", **{"sasl.oauthbearer.jwks.endpoint.url": jwks})
    with KopServer(root, [f"{k}={v}" for k, v in conf.items()], protocols=["SASL_PLAINTEXT"]) as s:
        yield s


def _oauth(server: KopServer, token: Any) -> dict[str, Any]:
    """librdkafka's settings for an OAUTHBEARER login whose token ``token()`` gives."""
    return {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token(), time.time() + 600),
    }


class _Tokens(AbstractTokenProvider):
    def __init__(self, token: str):
        super().__init__()
        self._token = token

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return {"traceId": "abc"}  # KIP-342 extensions: sent, and not acted on


def test_tokens_of_the_identity_provider_log_in_and_acls_see_their_subject(
    server: KopServer, idp: IdentityProvider
) -> None:
    assert round_trip(_oauth(server, lambda: idp.token("alice")))
    producer = KafkaProducer(
        bootstrap_servers=server.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=_Tokens(idp.token("alice")),
    )
    sent = producer.send("t", b"from kafka-python", partition=0).get(30)
    producer.close()
    with Broker(server.root) as b:
        assert b.fetch("t", 0, sent.offset)[0].value == b"from kafka-python"
    told: list[Any] = []  # logged in as User:mallory, who may not write to t
    producer = Producer({**_oauth(server, lambda: idp.token("mallory")), "enable.idempotence": False})
    producer.produce("t", b"x", partition=0, on_delivery=lambda err, _: told.append(err))
    producer.flush(30)
    assert [e.code() for e in told] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    server.wait_for("User:mallory logged in")


def test_librdkafka_gets_its_token_from_the_identity_provider_with_oidc(server: KopServer, idp_url: str) -> None:
    """``sasl.oauthbearer.method=oidc``: librdkafka asks the token endpoint with its client
    credentials, as it does Entra ID's or Okta's."""
    oidc = {
        "bootstrap.servers": server.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "alice",
        "sasl.oauthbearer.client.secret": "secret-alice",
        "sasl.oauthbearer.token.endpoint.url": f"{idp_url}/token",
    }
    assert round_trip(oidc)


def test_keys_the_identity_provider_rotates_in_are_taken_without_a_restart(
    server: KopServer, idp: IdentityProvider
) -> None:
    idp.rotate("k2")
    assert round_trip(_oauth(server, lambda: idp.token("alice", kid="k2")))


def test_tokens_not_signed_by_the_identity_provider_or_not_for_this_server_are_refused(
    server: KopServer, idp: IdentityProvider
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = idp.token("alice", key=stranger)
    for token in (forged, idp.token("alice", exp=int(time.time()) - 3600), idp.token("alice", aud="elsewhere")):
        told = refusal(_oauth(server, lambda t=token: t))
        assert authentication_failed(told) or any(e.code() == KafkaError._AUTHENTICATION for e in told), told
    server.wait_for("failed OAUTHBEARER login from 127.0.0.1")
    log = "".join(server.log)
    assert forged not in log and forged.split(".")[2] not in log  # nor any part of a token
    assert round_trip(_oauth(server, lambda: idp.token("alice")))  # the server went on serving


def _validator(idp: IdentityProvider, **more: Any) -> TokenValidator:
    return TokenValidator(Config(_settings(idp, **more)))


def test_each_way_a_token_can_be_wrong_is_refused_with_its_reason(idp: IdentityProvider) -> None:
    check = _validator(idp)
    now = int(time.time())
    wrong = {
        "expired": (idp.token(exp=now - 3600), "expired"),
        "not yet valid": (idp.token(nbf=now + 3600), "not yet valid"),
        "another audience": (idp.token(aud="elsewhere"), "audience"),
        "another issuer": (idp.token(iss="https://other.example"), "issuer"),
        "no expiry": (idp.token(exp=None), '"exp"'),
        "no subject": (idp.token(sub=None), "'sub' claim"),
        "another key, same kid": (
            idp.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "Signature",
        ),
        "a kid unknown": (idp.token(kid="k9", key=idp.keys["k1"]), "k9"),
        "unsigned": (
            jwt.encode({"sub": "alice", "exp": now + 600}, None, algorithm="none", headers={"kid": "k1"}),
            "alg",
        ),
        "HMAC-signed (a JWKS holds public keys)": (
            jwt.encode(idp.claims(), SECRET, algorithm="HS256", headers={"kid": "s1"}),
            "alg",
        ),
        "not a token": ("not-a-jwt", "token"),
    }
    for case, (token, reason) in wrong.items():
        with pytest.raises(SaslAuthenticationError, match="(?i)" + re.escape(reason)) as refused:
            check(token)
        assert token not in str(refused.value), case
    assert check(idp.token("alice", exp=now - 10)) == ("alice", (now - 10) * 1000)  # within the skew (30 s)
    assert _validator(idp, **{"sasl.oauthbearer.sub.claim.name": "email"})(idp.token(email="a@x"))[0] == "a@x"
    anyone = _validator(idp, **{"sasl.oauthbearer.expected.audience": "", "sasl.oauthbearer.expected.issuer": ""})
    assert anyone(idp.token("bob", aud="elsewhere", iss="https://other.example"))[0] == "bob"


def test_a_login_for_another_user_than_the_tokens_is_refused(idp: IdentityProvider) -> None:
    token = idp.token("alice")
    assert OAuthBearerServer(_validator(idp)).step(f"n,a=alice,\x01auth=Bearer {token}\x01\x01".encode()) == b""
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        OAuthBearerServer(_validator(idp)).step(f"n,a=bob,\x01auth=Bearer {token}\x01\x01".encode())


def test_settings_that_cannot_work_stop_the_server_at_start_naming_them(tmp_path: Path, idp: IdentityProvider) -> None:
    with pytest.raises(ConfigError, match=re.escape("set sasl.oauthbearer.jwks.endpoint.url")):
        _validator(idp, **{"sasl.oauthbearer.jwks.endpoint.url": ""})
    missing = (tmp_path / "nowhere.json").as_uri()
    with pytest.raises(ConfigError, match=re.escape(f"sasl.oauthbearer.jwks.endpoint.url={missing}")):
        _validator(idp, **{"sasl.oauthbearer.jwks.endpoint.url": missing})
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = f"http://127.0.0.1:{port}/jwks.json"
    began = time.monotonic()
    with pytest.raises(ConfigError, match=re.escape(f"sasl.oauthbearer.jwks.endpoint.url={unreachable}")):
        _validator(idp, **{"sasl.oauthbearer.jwks.endpoint.url": unreachable})
    assert time.monotonic() - began < 30
    root = str(tmp_path / "store")
    Broker(root).close()
    conf = ["sasl.enabled.mechanisms=OAUTHBEARER"]
    with pytest.raises(RuntimeError, match=re.escape("sasl.oauthbearer.jwks.endpoint.url")):
        KopServer(root, conf, protocols=["SASL_PLAINTEXT"]).start()


_B64TOKEN = st.text("ABCXYZabcxyz0189-._~+/", min_size=1, max_size=40).map(lambda t: t + "=")
_KEYS = st.text("abcdefghijKLMNOP", min_size=1, max_size=8).filter(lambda k: k != "auth")


@settings(max_examples=300, deadline=None)
@given(
    token=_B64TOKEN,
    authzid=st.sampled_from(["", "alice", "a=2Cb"]),
    extensions=st.dictionaries(_KEYS, st.text("xyz 123=", max_size=10), max_size=3),
)
def test_the_client_message_parses_as_clients_write_it(token: str, authzid: str, extensions: dict[str, str]) -> None:
    pairs = "".join(f"\x01{k}={v}" for k, v in extensions.items())
    message = f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}{pairs}\x01\x01".encode()
    assert client_first(message) == (authzid.replace("=2C", ","), token, extensions)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_malformed_client_message_is_refused_cleanly(message: bytes) -> None:
    try:
        client_first(message)
    except SaslAuthenticationError:
        pass


def test_clients_log_in_again_before_their_login_ends_and_a_connection_that_does_not_is_closed(
    tmp_path: Path, idp: IdentityProvider
) -> None:
    """KIP-368 (``connections.max.reauth.ms``): librdkafka logs in again on its connections, with a
    fresh token, and goes on producing; a client that does not is disconnected at its next request."""
    root = str(tmp_path / "store")
    with Broker(root) as b:
        b.create_topic("t", 1)
    conf = [f"{k}={v}" for k, v in _settings(idp, **{"connections.max.reauth.ms": 1500}).items()]
    with KopServer(root, conf, protocols=["SASL_PLAINTEXT"]) as server:
        errors: list[Any] = []
        producer = Producer({**_oauth(server, lambda: idp.token("alice")), "error_cb": errors.append})
        deadline = time.monotonic() + 5  # past three logins' ends
        sent = 0
        while time.monotonic() < deadline:
            producer.produce("t", b"x", partition=0)
            sent += 1
            producer.poll(0.05)
        assert producer.flush(30) == 0 and not errors, errors
        with Broker(root) as b:
            assert b.list_offsets("t", 0, "latest") == sent
        server.wait_for("User:alice logged in again from 127.0.0.1 with OAUTHBEARER")

        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            token = idp.token("alice")
            call(sock, wire_request(SaslHandshakeRequest, 1, mechanism="OAUTHBEARER"))
            first = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
            answer = call(sock, wire_request(SaslAuthenticateRequest, 1, auth_bytes=first))
            assert answer.error_code == 0 and 0 < answer.session_lifetime_ms <= 1500
            assert call(sock, wire_request(MetadataRequest, 1, topics=None)).brokers  # within its login
            time.sleep(answer.session_lifetime_ms / 1000)  # the login's end: a time, not a wait for an event
            with pytest.raises(ConnectionError):  # closed, not answered
                call(sock, wire_request(MetadataRequest, 1, topics=None))
        server.wait_for("did not log in again")

        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            for user, code in (("alice", 0), ("alice", 0), ("mallory", 58)):  # again, as another: refused
                call(sock, wire_request(SaslHandshakeRequest, 1, mechanism="OAUTHBEARER"))
                message = f"n,,\x01auth=Bearer {idp.token(user)}\x01\x01".encode()
                answer = call(sock, wire_request(SaslAuthenticateRequest, 1, auth_bytes=message))
                assert answer.error_code == code, answer
            assert "re-authentication as User:mallory" in answer.error_message

        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            call(sock, wire_request(SaslHandshakeRequest, 1, mechanism="OAUTHBEARER"))
            soon = idp.token("alice", exp=int(time.time()) + 1)  # expiring before the login would end
            message = f"n,,\x01auth=Bearer {soon}\x01\x01".encode()
            assert call(sock, wire_request(SaslAuthenticateRequest, 1, auth_bytes=message)).session_lifetime_ms <= 1000
