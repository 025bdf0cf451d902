"""Consumer groups' live members as ``kop serve`` sees them, published in the metadata store so
that every process on the store (``kop groups``, another server) sees who consumes what.

A server rewrites a group's entry when its membership changes and refreshes it while the group
has members; the entry says until when it holds (``expires_ms``), so one left by a server that
was killed stops counting once that time has passed, as its members' sessions would have."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import layout
from ..clock import Clock
from ..storage.metadata_store import MetadataStore, update


class LiveMember(NamedTuple):
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


class LiveGroup(NamedTuple):
    state: str
    members: tuple[LiveMember, ...]

    def owner(self, topic: str, partition: int) -> LiveMember | None:
        return next((m for m in self.members if (topic, partition) in m.partitions), None)


class LiveGroups:
    def __init__(self, store: MetadataStore, clock: Clock):
        self._store = store
        self._clock = clock

    def publish(self, group: str, live: LiveGroup, valid_ms: int) -> None:
        value = {
            "state": live.state,
            "expires_ms": self._clock.now_ms() + valid_ms,
            "members": [{**m._asdict(), "partitions": [list(tp) for tp in m.partitions]} for m in live.members],
        }
        update(self._store, layout.live_group_key(group), lambda _: value)

    def get(self, group: str) -> LiveGroup | None:
        """The group's live members, if a server has published them and they still hold."""
        value: Any = self._store.get(layout.live_group_key(group)).value
        if not value or value["expires_ms"] < self._clock.now_ms() or not value["members"]:
            return None
        members = tuple(
            LiveMember(m["member_id"], m["client_id"], m["host"], tuple((t, p) for t, p in m["partitions"]))
            for m in value["members"]
        )
        return LiveGroup(value["state"], members)
