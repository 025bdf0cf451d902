"""The topics as the consumer-group coordinator last read them: names, ids and partition counts,
read at most every ``refresh_s`` seconds (so topics created, grown or deleted by any process reach
assignments within that time), and translating the partitions that consumer-protocol requests
name by topic id. A snapshot's ``version`` changes only when the topics do, so what is worked
out from them (a group's subscribed topics, regexes matched against every name) is worked out
again only then, not at every heartbeat."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..broker import TopicInfo

TopicPartition = tuple[str, int]
IdPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True)
class TopicSnapshot:
    version: int
    infos: tuple[TopicInfo, ...]
    by_name: dict[str, TopicInfo] = field(init=False)
    by_id: dict[uuid.UUID, TopicInfo] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {t.name: t for t in self.infos})
        object.__setattr__(self, "by_id", {t.topic_id: t for t in self.infos})

    def names(self, owned: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> frozenset[TopicPartition]:
        """Partitions named by topic id, by topic name (those of topics not known left out)."""
        return frozenset((self.by_id[i].name, p) for i, ps in owned if i in self.by_id for p in ps)

    def ids(self, assigned: Iterable[TopicPartition]) -> IdPartitions:
        """Partitions by topic id, each topic's in order (those of topics not known left out)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(assigned):
            by_topic.setdefault(topic, []).append(p)
        return tuple((self.by_name[t].topic_id, tuple(ps)) for t, ps in by_topic.items() if t in self.by_name)


class TopicSnapshots:
    def __init__(self, read: Callable[[], Awaitable[list[TopicInfo]]], refresh_s: float):
        self._read = read
        self._refresh_s = refresh_s
        self._read_at = float("-inf")
        self._current = TopicSnapshot(0, ())

    async def current(self) -> TopicSnapshot:
        now = asyncio.get_running_loop().time()
        if now - self._read_at >= self._refresh_s:
            infos, self._read_at = tuple(await self._read()), now
            if infos != self._current.infos:
                self._current = TopicSnapshot(self._current.version + 1, infos)
        return self._current
