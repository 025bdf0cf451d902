"""Certificates for the TLS tests, made on the spot with the ``cryptography`` package: a CA, a
server certificate for 127.0.0.1 and localhost, and a client certificate, all signed by the CA."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    ca: Path  # the CA certificate (a truststore)
    server: Path  # the server's key and certificate chain in one PEM (a KIP-651 keystore)
    server_key_pem: str
    server_chain_pem: str
    client_cert: Path
    client_key: Path
    client_principal: str  # what Kafka's default principal builder makes of the client's subject


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts.items()])


def _certificate(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer, ca: bool, sans=()):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki(d: Path) -> Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(CN="kop test CA")
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    server = _certificate(_name(CN="localhost"), server_key, ca_name, ca_key, False, sans)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate(_name(O="kop", CN="client"), client_key, ca_name, ca_key, False)
    pem = serialization.Encoding.PEM
    chain = server.public_bytes(pem) + ca.public_bytes(pem)
    files = {
        "ca.pem": ca.public_bytes(pem),
        "server.pem": _pem(server_key) + chain,
        "client.pem": client.public_bytes(pem),
        "client.key": _pem(client_key),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        _pem(server_key).decode(),
        chain.decode(),
        d / "client.pem",
        d / "client.key",
        "User:CN=client,O=kop",
    )
