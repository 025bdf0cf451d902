"""Publishes this server's consumer groups' live members to the store (``Broker.live_groups``),
so ``kop groups describe`` in another process shows who consumes what and ``kop groups
reset-offsets`` refuses an active group, as Kafka's tool does.

Changes are published as they happen, one group at a time and always its latest state (a burst
of changes is one write); groups with members are refreshed every ``REFRESH_S`` seconds, each entry
holding for ``VALID_MS``, so the entries of a server killed with kill -9 lapse on their own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..broker import GroupServer, LiveGroup, LiveMember
from .consumer_protocol import assigned_partitions
from .event_wait import wait_set
from .group import Group

log = logging.getLogger(__name__)

REFRESH_S = 10.0
VALID_MS = 30_000


class GroupPublisher:
    def __init__(
        self,
        publish: Callable[[str, LiveGroup, int], Awaitable[GroupServer | None]],
        live: Callable[[str], LiveGroup | None],
        active: Callable[[], Iterable[str]],
        save: Callable[[str], Awaitable[Any]],
        lost: Callable[[str, GroupServer], None],
    ):
        """``publish``: None, or the other server whose members hold the group (``LiveGroups``);
        ``live``: a group's members now (None: none); ``active``: the groups with members;
        ``save``: keeps a changed group's snapshot (``broker.group_snapshots``); ``lost``: gives up
        a group whose members came here while it was served by another server."""
        self._publish = publish
        self._live = live
        self._active = active
        self._save = save
        self._lost = lost
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()

    def changed(self, group_id: str) -> None:
        self._dirty.add(group_id)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await wait_set(self._wake, REFRESH_S)
            self._wake.clear()
            changed, self._dirty = self._dirty, set()
            for group_id in sorted(changed | set(self._active())):
                # A group another server serves is that server's to keep: members this one took
                # in, or restored from what that server kept, are put out unkept.
                if await self.publish(group_id) and group_id in changed:
                    await self.save(group_id)

    async def save(self, group_id: str) -> None:
        try:
            await self._save(group_id)
        except Exception as e:  # a restart will rebalance the group instead: serving goes on
            log.warning("could not keep the membership of group %r: %s", group_id, e)

    async def publish(self, group_id: str, gone: bool = False) -> bool:
        """Whether the group is this server's (published, or not published for an error)."""
        live = None if gone else self._live(group_id)
        if live is None:
            live = LiveGroup("Empty", ())
        try:
            holder = await self._publish(group_id, live, VALID_MS)
        except Exception as e:  # the view is advisory: serving goes on
            log.warning("could not publish the members of group %r: %s", group_id, e)
            return True
        if holder is None:
            return True
        if live.members:
            self._lost(group_id, holder)
        return False

    async def withdraw(self) -> None:
        """A stopping server's groups have no members any more."""
        for group_id in list(self._active()):
            await self.publish(group_id, gone=True)


def snapshot(g: Group) -> LiveGroup:
    consumer = g.protocol_type == "consumer"
    members = tuple(
        LiveMember(m.member_id, m.client_id, m.client_host, assigned_partitions(m.assignment) if consumer else ())
        for m in g.members.values()
    )
    return LiveGroup(g.state.value, members, strategy=g.protocol or "", type="classic")
