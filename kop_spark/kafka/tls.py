"""TLS for SSL and SASL_SSL listeners, configured as Kafka's KIP-651 PEM keystores are:
``ssl.keystore.location`` (private key and certificate chain in one PEM file), or the PEM text
itself in ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``; ``ssl.key.password`` for an
encrypted key; ``ssl.client.auth`` (none, requested, required) with ``ssl.truststore.location``
(PEM CA certificates) to check client certificates. A client certificate's subject becomes the
principal, in RFC 2253 form as Kafka's default principal builder writes it."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

# Short names of RFC 2253 attribute types, by the names Python's ssl module gives them.
_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def server_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context of a listener, from the ``ssl.*`` settings; a clear error naming the setting
    that is missing or wrong."""
    if config["ssl.keystore.type"] != "PEM":
        raise ConfigError(f"ssl.keystore.type={config['ssl.keystore.type']}: only PEM keystores are supported")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = config["ssl.key.password"] or None
    location = config["ssl.keystore.location"]
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif config["ssl.keystore.key"] and config["ssl.keystore.certificate.chain"]:
            _load_pem_text(context, config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"], password)
        else:
            raise ConfigError(
                "an SSL or SASL_SSL listener needs ssl.keystore.location, or ssl.keystore.key and "
                "ssl.keystore.certificate.chain"
            )
    except (OSError, ssl.SSLError) as e:
        where = f"ssl.keystore.location={location}" if location else "ssl.keystore.key / ssl.keystore.certificate.chain"
        raise ConfigError(f"{where}: cannot load the key and certificate chain: {e}") from None
    _client_auth(context, config)
    return context


def _load_pem_text(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """load_cert_chain reads files only: the PEM text goes through a private file, removed at once."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _client_auth(context: ssl.SSLContext, config: Mapping[str, Any]) -> None:
    mode = config["ssl.client.auth"]
    if mode == "none":
        return
    truststore = config["ssl.truststore.location"]
    if not truststore:
        raise ConfigError(f"ssl.client.auth={mode} needs ssl.truststore.location (PEM CA certificates)")
    try:
        context.load_verify_locations(truststore)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl.truststore.location={truststore}: cannot load it: {e}") from None
    context.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL


def certificate_principal(peercert: dict | None) -> str | None:
    """``User:CN=client,O=kop`` for a verified client certificate (RFC 2253: most specific first)."""
    if not peercert or not peercert.get("subject"):
        return None
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(parts)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
