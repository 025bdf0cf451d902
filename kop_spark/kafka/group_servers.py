"""Which ``kop serve`` a group is served by, where several serve one store.

Each server is a coordinator of its own: a group whose members came to two servers would be two
groups, each given every partition, so every record would be consumed twice and their commits
would interleave. A group is so served by one server at a time: the one whose members hold its
entry in the store (``Broker.live_groups``, published by CAS). Another server answers
FindCoordinator and joins for it NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, naming that
server, until the group has no members there (its entry withdrawn by a stop, or lapsed after a
kill), as Kafka answers while a group's coordinator is elsewhere: the clients ask again, and take
the group up once it is free. Members two servers took in at once are found at the publishing of
the second, which gives its members up (``lost``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from ..broker import GroupServer, LiveGroup
from .error_codes import error_code

log = logging.getLogger(__name__)

WARN_EVERY_S = 60.0  # clients ask again every second or so: one log line a group a minute


class GroupServers:
    def __init__(
        self,
        me: GroupServer,
        published: Callable[[str], Awaitable[LiveGroup | None]],
        give_up: Callable[[str], None],
        monotonic: Callable[[], float] = time.monotonic,
    ):
        """``published``: a group's entry in the store, if it holds and has members;
        ``give_up``: puts every member of a group here out."""
        self.me = me
        self._published = published
        self._give_up = give_up
        self._monotonic = monotonic
        self._warned: dict[str, float] = {}

    async def refusal(self, group_id: str) -> str | None:
        """Why the group is not served here: the other server its members are on, or that the
        store cannot tell (the clients ask again, as while a Kafka coordinator loads); None: none."""
        try:
            live = await self._published(group_id)
        except Exception as e:
            error_code(e, f"reading which server serves group {group_id!r}")  # logged as any answer's error
            return f"cannot tell which server serves group {group_id!r}: {e}"
        if live is None or live.server is None or live.server.id == self.me.id:
            return None
        self._warn(group_id, live.server)
        return f"group {group_id!r} is served by the kop serve at {live.server.address}"

    def lost(self, group_id: str, there: GroupServer) -> None:
        """Members came here while ``there`` served the group: they are put out, to join there."""
        self._warn(group_id, there)
        self._give_up(group_id)

    def _warn(self, group_id: str, there: GroupServer) -> None:
        now = self._monotonic()
        if now - self._warned.get(group_id, -WARN_EVERY_S) < WARN_EVERY_S:
            return
        for gone in [g for g, at in self._warned.items() if now - at >= WARN_EVERY_S]:
            del self._warned[gone]
        self._warned[group_id] = now
        log.warning(
            "group %r has members on the kop serve at %s (over the same store): its clients that come "
            "here are refused until it has none there; connect them to that server",
            group_id,
            there.address,
        )
