"""Classic groups as ``kop serve`` last settled them (Kafka's GroupMetadata records in
``__consumer_offsets``): each group's generation, protocol and leader, and its members with their
subscriptions and assignments, kept while the group has members. A restarted server takes its
groups up from them, so their members go on where they were, without a rebalance."""

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
