"""Groups' own settings (Kafka's group configs, KIP-848/KIP-932: ``kafka-configs --entity-type
groups``), kept in the metadata store; a group without its own takes the server's default. Only
``share.auto.offset.reset`` is a group setting here: where a share group starts in a partition
it has not read before."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import layout
from ..config_changes import AlterConfigOp
from ..errors import ConfigError
from ..storage.metadata_store import MetadataStore, Unchanged, update

CHOICES = {"share.auto.offset.reset": ("latest", "earliest")}


class GroupConfigs:
    def __init__(self, store: MetadataStore, defaults: Mapping[str, Any]):
        self._store = store
        self._defaults = defaults

    def own(self, group: str) -> dict[str, str]:
        """The group's own settings."""
        return dict(self._store.get(layout.group_config_key(group)).value or {})

    def effective(self, group: str) -> dict[str, str]:
        """Every group setting in effect for the group: its own, else the server's."""
        return {**{name: self._defaults[name] for name in CHOICES}, **self.own(group)}

    def alter(self, group: str, ops: Iterable[AlterConfigOp], *, replace: bool, validate_only: bool) -> None:
        """Apply ``ops`` (``replace``: the group's own settings become exactly those set), all or
        none; ConfigError naming the first bad one."""
        ops = list(ops)

        def change(old: dict[str, str] | None) -> dict[str, str] | None:
            out = {} if replace else dict(old or {})
            for name, op, value in ops:
                if name not in CHOICES:
                    raise ConfigError(f"{name!r} is not a group setting (one of {', '.join(CHOICES)})")
                if op == "delete":
                    out.pop(name, None)
                elif op == "set" and str(value).lower() in CHOICES[name]:
                    out[name] = str(value).lower()
                elif op == "set":
                    raise ConfigError(f"group setting {name}={value!r}: expected one of {', '.join(CHOICES[name])}")
                else:
                    raise ConfigError(f"group setting {name!r} is not a list: {op} is not allowed")
            if validate_only or out == (old or {}):
                raise Unchanged
            return out or None

        update(self._store, layout.group_config_key(group), change)
