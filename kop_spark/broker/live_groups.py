"""Consumer groups' live members as ``kop serve`` sees them, published in the metadata store so
that every process on the store (``kop groups``, another server) sees who consumes what.

A server rewrites a group's entry when its membership changes and refreshes it while the group
has members, and deletes it once it has none; the entry says until when it holds (``expires_ms``),
so one left by a server that was killed stops counting once that time has passed, as its members'
sessions would have. It
names the server (``server``: an id, and the address it tells clients), so that another server
over the same store can tell that the group is served there."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import layout
from ..clock import Clock
from ..storage.metadata_store import MetadataStore, Unchanged, update


class LiveMember(NamedTuple):
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


class GroupServer(NamedTuple):
    """The ``kop serve`` a group's members are on: an id of its own, and the address it tells clients."""

    id: str
    address: str


class LiveGroup(NamedTuple):
    state: str
    members: tuple[LiveMember, ...]
    server: GroupServer | None = None  # None: published by a kop that did not name it
    strategy: str = ""  # the assignor (classic: the protocol its members chose), as Kafka's ASSIGNMENT-STRATEGY
    type: str = ""  # Kafka's group type: classic, consumer or share ("": published by a kop that did not say)

    def owner(self, topic: str, partition: int) -> LiveMember | None:
        return next((m for m in self.members if (topic, partition) in m.partitions), None)


class LiveGroups:
    def __init__(self, store: MetadataStore, clock: Clock):
        self._store = store
        self._clock = clock

    def publish(self, group: str, live: LiveGroup, valid_ms: int) -> GroupServer | None:
        """Publish what a server sees of the group, unless another server's members hold it: that
        server, which then serves the group alone (None: published)."""
        value: dict[str, Any] = {
            "state": live.state,
            "expires_ms": self._clock.now_ms() + valid_ms,
            "members": [{**m._asdict(), "partitions": [list(tp) for tp in m.partitions]} for m in live.members],
        }
        if live.server is not None:
            value["server"] = live.server._asdict()
        value.update({name: getattr(live, name) for name in ("strategy", "type") if getattr(live, name)})
        holder: list[GroupServer] = []

        def change(current: dict[str, Any] | None) -> dict[str, Any] | None:
            held = self._live(current)
            if held is not None and held.server is not None and held.server.id != getattr(live.server, "id", None):
                holder.append(held.server)
                raise Unchanged
            if not live.members and current is None:
                raise Unchanged
            # A group with no members leaves no entry: every group a server ever saw (consumers
            # with a random group id each) would otherwise be read at each ``all``.
            return value if live.members else None

        update(self._store, layout.live_group_key(group), change)
        return holder[-1] if holder else None

    def all(self) -> dict[str, LiveGroup]:
        """Every group with live members, by id: a read of each group a server ever published."""
        found = {
            layout.name_of_segment(key.rsplit("/", 1)[1]): key for key in self._store.list_keys(layout.LIVE_GROUPS)
        }
        live = {group: self._live(self._store.get(key).value) for group, key in found.items()}
        return {group: g for group, g in live.items() if g is not None}

    def get(self, group: str) -> LiveGroup | None:
        """The group's live members, if a server has published them and they still hold."""
        return self._live(self._store.get(layout.live_group_key(group)).value)

    def _live(self, value: dict[str, Any] | None) -> LiveGroup | None:
        if not value or value["expires_ms"] < self._clock.now_ms() or not value["members"]:
            return None
        members = tuple(
            LiveMember(m["member_id"], m["client_id"], m["host"], tuple((t, p) for t, p in m["partitions"]))
            for m in value["members"]
        )
        server = GroupServer(**value["server"]) if "server" in value else None
        return LiveGroup(value["state"], members, server, value.get("strategy", ""), value.get("type", ""))
