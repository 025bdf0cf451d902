"""One setting: its name, default, parser and meaning, and the parsers settings share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError("expected true or false")


def choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        for c in choices:
            if text.strip().lower() == c.lower():
                return c
        raise ValueError(f"expected one of {', '.join(choices)}")

    return parse


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise ValueError(f"expected a whole number of at least {low}") from None
        if value < low:
            raise ValueError(f"must be at least {low}")
        return value

    return parse


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError("expected a number from 0 to 1")
    return value


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    kafka_type: str = ""  # Kafka's ConfigDef type (INT, LIST, PASSWORD) where the default does not tell it

    @property
    def config_type(self) -> str:
        """The type DescribeConfigs reports (Kafka's ``ConfigEntry.type()``)."""
        return self.kafka_type or _TYPES.get(type(self.default), "STRING")


_TYPES = {bool: "BOOLEAN", int: "LONG", float: "DOUBLE"}
