"""Consumer groups' membership as ``kop serve`` last kept it (Kafka's group records in
``__consumer_offsets``), while a group has members: a classic group's settled generation, a
consumer-protocol group's epochs, target and each member's partitions. A restarted server takes
its groups up from them, so their members go on where they were, without a rebalance. Each
snapshot names its group's ``type`` (``classic`` or ``consumer``, as ListGroups does)."""

from __future__ import annotations

from typing import Any

from .. import layout
from ..storage.metadata_store import MetadataStore, Unchanged, update

Snapshot = dict[str, Any]  # a group's, in the form ``kafka.group`` writes and reads


class GroupSnapshots:
    def __init__(self, store: MetadataStore):
        self._store = store

    def save(self, group: str, snapshot: Snapshot | None) -> None:
        """Keep ``snapshot`` as the group's; None: the group has no members, and nothing is kept."""

        def change(old: Snapshot | None) -> Snapshot | None:
            if old == snapshot:
                raise Unchanged
            return snapshot

        update(self._store, layout.group_snapshot_key(group), change)

    def load(self) -> dict[str, Snapshot]:
        """Every group's snapshot, by group id."""
        values = (self._store.get(key).value for key in self._store.list_keys(layout.GROUP_SNAPSHOTS))
        return {v["group_id"]: v for v in values if v is not None}
