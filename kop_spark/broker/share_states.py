"""Share groups' partition states (Kafka's share-group state records, which its share coordinator
keeps): for each group and partition, the share-partition start offset (SPSO), the first offset
never delivered, and the state and delivery count of each record in flight between them; kept as
each acknowledgement is answered (``kafka.share_partition`` changes them)."""

from __future__ import annotations

import enum
from typing import Any

from .. import layout
from ..storage.metadata_store import MetadataStore, Unchanged, update

TopicPartition = tuple[str, int]


class ShareRecordState(enum.IntEnum):
    """A record in flight, as the states are stored."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


SHARE_DONE = (ShareRecordState.ACKNOWLEDGED, ShareRecordState.ARCHIVED)


class ShareStates:
    def __init__(self, store: MetadataStore):
        self._store = store

    def load(self, group: str, topic: str, partition: int) -> dict[str, Any] | None:
        return self._store.get(layout.share_partition_key(group, topic, partition)).value

    def save(self, group: str, topic: str, partition: int, state: dict[str, Any] | None) -> None:
        """Keep ``state`` (None: forget the partition)."""

        def change(old: dict[str, Any] | None) -> dict[str, Any] | None:
            if old == state:
                raise Unchanged
            return state

        update(self._store, layout.share_partition_key(group, topic, partition), change)

    def forget(self, group: str) -> bool:
        """Forget every partition's state of the group (it is deleted); whether it had any."""
        partitions = self.partitions(group)
        for tp in partitions:
            self.save(group, *tp, None)
        return bool(partitions)

    def groups(self) -> list[str]:
        """The share groups with a state of some partition."""
        live: set[str] = set()
        for group, tp in self._keys(layout.SHARE_GROUPS):
            if group not in live and self.load(group, *tp) is not None:
                live.add(group)
        return sorted(live)

    def partitions(self, group: str) -> dict[TopicPartition, dict[str, Any]]:
        """The group's state of each partition it has read."""
        out = {}
        for _, tp in self._keys(layout.share_group_prefix(group)):
            state = self.load(group, *tp)
            if state is not None:
                out[tp] = state
        return out

    @staticmethod
    def lag(state: dict[str, Any], log_end: int) -> int:
        """Records from the SPSO to the log's end not yet done (acknowledged or given up)."""
        done = sum(1 for _, kind, _ in state["records"] if kind in SHARE_DONE)
        return max(log_end - state["start_offset"] - done, 0)

    @staticmethod
    def started_at(offset: int) -> dict[str, Any]:
        """A partition's state starting afresh at ``offset`` (a reset)."""
        return {"start_offset": offset, "next_offset": offset, "records": []}

    def _keys(self, prefix: str) -> list[tuple[str, TopicPartition]]:
        """The (group, partition) of each state ever kept under ``prefix``; listing is by whole
        path segments on every backend, so a group's prefix never takes another group's keys."""
        out = []
        for key in self._store.list_keys(prefix):
            group, topic, partition = key.removeprefix(layout.SHARE_GROUPS + "/").split("/")
            out.append((layout.name_of_segment(group), (layout.name_of_segment(topic), int(partition))))
        return out
