"""Object-store URIs (``s3://``, ``gs://``, ``az://``, ``abfs[s]://``) and their obstore clients.

Endpoints and credentials come from each cloud's standard environment variables, as obstore (the
Rust ``object_store`` crate) reads them: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ... for S3,
``GOOGLE_*`` for GCS, ``AZURE_STORAGE_*`` for Azure; settings named as those variables in
lower case (``aws_endpoint_url``, ``azure_storage_account_name``, ...) override them. An
``http://`` endpoint (GCS's: ``GOOGLE_BASE_URL`` or the service account's ``gcs_base_url``) is
used as given (a local emulator). Every request gives up after the operation timeout, retries
included, so a store that is away is an error, never a hang.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

from obstore.exceptions import (
    AlreadyExistsError,
    InvalidPathError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import AzureStore, GCSStore, S3Store

from ..config import CLOUD_OPTION_PREFIXES
from ..errors import ConfigError

SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss")


class ObjectLocation(NamedTuple):
    """Where a URI points: the kind of store, its bucket (or container), and the key prefix."""

    scheme: str
    bucket: str
    prefix: str
    account: str | None = None

    @property
    def display(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")


# What a request's answer can be besides success: obstore raises a missing object as the builtin
# FileNotFoundError and a failed condition as its own errors.
MISSING = (FileNotFoundError, NotFoundError)
CONDITION_FAILED = (AlreadyExistsError, PreconditionError)
_REFUSED = (PermissionDeniedError, UnauthenticatedError, NotSupportedError, InvalidPathError)


def refused(e: Exception) -> tuple[str, bool]:
    """The first line of an obstore error, and whether the store answered it (wrong credentials,
    no such bucket: a 4xx) rather than failed to (a timeout, a refused connection, a 5xx)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text, isinstance(e, _REFUSED) or "status code: 4" in text


def is_object_store_uri(uri: str) -> bool:
    return urllib.parse.urlsplit(uri).scheme.lower() in SCHEMES


def parse_location(uri: str) -> ObjectLocation:
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or not parts.netloc:
        raise ConfigError(f"{uri!r} is not an object-store URI (s3://bucket/prefix, gs://, az://container/prefix)")
    prefix = parts.path.strip("/")
    if scheme in ("abfs", "abfss"):
        container, at, host = parts.netloc.partition("@")
        if not at or not host.split(".")[0]:
            raise ConfigError(f"{uri!r}: expected {scheme}://container@account.dfs.core.windows.net/prefix")
        return ObjectLocation("az", container, prefix, host.split(".")[0])
    return ObjectLocation("s3" if scheme == "s3a" else scheme, parts.netloc, prefix)


def open_store(location: ObjectLocation, options: Mapping[str, str], timeout_s: float) -> Any:
    """An obstore client for ``location``'s prefix; ``options`` override the environment."""
    config: Any = {k: v for k, v in options.items() if k.startswith(CLOUD_OPTION_PREFIXES)}
    timeout = timedelta(seconds=timeout_s)
    client: dict[str, Any] = {"timeout": timeout, "connect_timeout": timeout}
    retry: dict[str, Any] = {"max_retries": 3, "retry_timeout": timeout}
    endpoint = _endpoint(location.scheme, config)
    if endpoint.startswith("http://"):
        client["allow_http"] = True
    cls: Any = {"s3": S3Store, "gs": GCSStore, "az": AzureStore}[location.scheme]
    if location.account:
        config.setdefault("azure_storage_account_name", location.account)
    try:
        return cls(
            location.bucket, prefix=location.prefix or None, config=config, client_options=client, retry_config=retry
        )
    except Exception as e:  # obstore reports bad configuration as plain errors of its own
        raise ConfigError(f"cannot open {location.display}: {refused(e)[0]}") from e


def _endpoint(scheme: str, config: Mapping[str, str]) -> str:
    if scheme == "gs":
        return _gcs_base_url(config)
    names = {
        "s3": ("aws_endpoint_url", "aws_endpoint"),
        "az": ("azure_storage_endpoint", "azure_endpoint"),
    }[scheme]
    for name in names:
        value = _setting(config, name)
        if value:
            return value
    return ""


def _gcs_base_url(config: Mapping[str, str]) -> str:
    """GCS's endpoint as obstore finds it: ``google_base_url``, else the service account's
    ``gcs_base_url`` (where an emulator's is given)."""
    url = _setting(config, "google_base_url")
    key = _setting(config, "google_service_account_key")
    path = _setting(config, "google_service_account") or _setting(config, "google_service_account_path")
    if url or not (key or path):
        return url
    try:
        account = json.loads(key or Path(path).read_text())
    except (OSError, ValueError):
        return ""  # obstore names a missing or malformed service account itself
    return str(account.get("gcs_base_url", "")) if isinstance(account, dict) else ""


def _setting(config: Mapping[str, str], name: str) -> str:
    return config.get(name) or os.environ.get(name.upper(), "")
