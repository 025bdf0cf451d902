"""Share groups' partition states (Kafka's share-group state records, which its share coordinator
keeps): for each group and partition, the share-partition start offset and the states and
delivery counts of the records in flight, kept as each acknowledgement is answered."""

from __future__ import annotations

from typing import Any

from .. import layout
from ..storage.metadata_store import MetadataStore, Unchanged, update


class ShareStates:
    def __init__(self, store: MetadataStore):
        self._store = store

    def load(self, group: str, topic: str, partition: int) -> dict[str, Any] | None:
        return self._store.get(layout.share_partition_key(group, topic, partition)).value

    def save(self, group: str, topic: str, partition: int, state: dict[str, Any]) -> None:
        def change(old: dict[str, Any] | None) -> dict[str, Any]:
            if old == state:
                raise Unchanged
            return state

        update(self._store, layout.share_partition_key(group, topic, partition), change)
