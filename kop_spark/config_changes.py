"""Changes to settings, as Kafka's ``AlterConfigOp`` makes them (AlterConfigs and
IncrementalAlterConfigs, ``kafka-configs --alter``): a topic's own settings after a list of changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .config import parse_value, topic_setting
from .errors import ConfigError


class AlterConfigOp(NamedTuple):
    """One change to a topic's settings, as Kafka's ``AlterConfigOp``: ``set`` a value, ``delete``
    the topic's own (back to the default), ``append`` to or ``subtract`` from a list setting."""

    name: str
    op: str  # set | delete | append | subtract
    value: Any = None


ALTER_OPS = ("set", "delete", "append", "subtract")
_LIST_SETTINGS = frozenset({"cleanup.policy"})


def alter_topic_config(
    overrides: Mapping[str, Any], defaults: Mapping[str, Any], ops: Iterable[AlterConfigOp]
) -> dict[str, Any]:
    """A topic's overrides after ``ops``, applied in order; the first bad one raises ``ConfigError``
    naming it. An override equal to the default is kept: Kafka reports it as the topic's own."""
    out = dict(overrides)
    for name, op, value in ops:
        topic_setting(name)
        if op == "delete":
            out.pop(name, None)
        elif op == "set":
            out[name] = parse_value(name, value)
        elif op in ("append", "subtract") and name in _LIST_SETTINGS:
            current = set(str(out.get(name, defaults[name])).split(","))
            change = {v.strip().lower() for v in str(value).split(",") if v.strip()}
            items = current | change if op == "append" else current - change
            out[name] = parse_value(name, ",".join(sorted(items)))
        elif op in ("append", "subtract"):
            raise ConfigError(f"setting {name!r} is not a list: {op} is allowed only for {', '.join(_LIST_SETTINGS)}")
        else:
            raise ConfigError(f"setting {name!r}: unknown operation {op!r}; expected one of {', '.join(ALTER_OPS)}")
    return out
