"""How settings (``settings``: their names, defaults and meanings) are loaded. ``conf/kop.conf`` is
rendered from them (``python -m kop_spark.config``) and a test keeps the two equal.

Precedence, lowest first: the defaults here; the conf file (``$KOP_CONF``, else ``./conf/kop.conf``
when present); the ``conf`` mapping given in code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .setting import parse_bool
from .settings import SENSITIVE, SETTINGS, TOPIC_SETTINGS

# Object-store settings go to obstore as they are: the clouds' environment variables in lower
# case (aws_endpoint_url, aws_access_key_id, azure_storage_account_key, google_service_account...).
CLOUD_OPTION_PREFIXES = ("aws_", "google_", "azure_")


def is_sensitive(name: str) -> bool:
    """Whether the setting may hold a credential: its value is never shown, logged or described."""
    return name.startswith(CLOUD_OPTION_PREFIXES) or name in SENSITIVE


def parse_value(name: str, value: Any, where: str = "") -> Any:
    """Parse and check one setting's value; the error names the setting, the value and where it came from."""
    if name.startswith(CLOUD_OPTION_PREFIXES):
        return str(value)
    setting = SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting {name!r}{where}; see conf/kop.conf for the settings there are")
    if isinstance(value, bool) and setting.parse is not parse_bool:
        value = str(value).lower()
    try:
        return setting.parse(value if isinstance(value, str) else str(value))
    except ValueError as e:
        raise ConfigError(f"invalid value {value!r} for setting {name!r}{where}: {e}") from None


def parse_topic_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check per-topic overrides (Kafka's topic settings only)."""
    return {topic_setting(name): parse_value(name, value) for name, value in (config or {}).items()}


def check_topic_config(topic: str, config: Mapping[str, Any]) -> None:
    """Refuse a topic's effective settings that are each valid but conflict, as Kafka's LogConfig does."""
    low, high = config["min.compaction.lag.ms"], config["max.compaction.lag.ms"]
    if low > high:
        raise ConfigError(
            f"topic {topic!r}: conflicting settings min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"
        )


def topic_setting(name: str) -> str:
    if name not in TOPIC_SETTINGS:
        raise ConfigError(f"{name!r} is not a topic setting; topic settings are {', '.join(TOPIC_SETTINGS)}")
    return name


def read_conf_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``key=value`` file (``#`` comments), as Pulsar's broker.conf."""
    values: dict[str, Any] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {line!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        values[key] = parse_value(key, value, f" ({path}:{lineno})")
    return values


class Config(Mapping[str, Any]):
    """Effective settings of a broker."""

    def __init__(self, overrides: Mapping[str, Any] | None = None, conf_file: str | None = None):
        values = {s.name: s.default for s in SETTINGS.values()}
        path = conf_file or os.environ.get("KOP_CONF") or ("conf/kop.conf" if Path("conf/kop.conf").is_file() else None)
        if path:
            if not Path(path).is_file():
                raise ConfigError(f"configuration file {path} does not exist")
            values.update(read_conf_file(path))
        for name, value in (overrides or {}).items():
            values[name] = parse_value(name, value, " (in conf)")
        self._values = values

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def cloud_options(self) -> dict[str, str]:
        """The object-store settings given (credentials among them: never log these)."""
        return {k: v for k, v in self._values.items() if k.startswith(CLOUD_OPTION_PREFIXES)}

    def topic_config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A topic's effective settings: the broker-wide defaults, then the topic's own overrides."""
        out = {name: self._values[name] for name in TOPIC_SETTINGS}
        out.update(overrides or {})
        return out


def render_conf_file() -> str:
    """The text of conf/kop.conf: every setting with its default and what it does."""
    lines = [
        "# kop-spark settings. Every setting, with its default.",
        "# Any of them can also be given in code: Broker(root, conf={...}).",
        "",
    ]
    for s in SETTINGS.values():
        if s.name == "retention.ms":
            lines += [
                "# Per-topic settings (Kafka's names): defaults for every topic; create_topic(config=...) overrides.",
                "",
            ]
        default = str(s.default).lower() if isinstance(s.default, bool) else "" if s.default is None else s.default
        lines += [f"# {s.doc}", f"{s.name}={default}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_conf_file(), end="")
