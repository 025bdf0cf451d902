"""The Broker: Kafka request semantics over managed ledgers (``Broker`` is the facade)."""

from ..group.coordinator import OffsetAndMetadata
from ..storage.staging import StagedLedger
from .admin import PartitionInfo, TopicDescription, TopicInfo
from .broker import Broker
from .fetch import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchedBatches,
    OffsetLookup,
    OffsetSpec,
    PartitionFetch,
)
from .group_configs import GroupConfigs
from .group_offsets import SPARK_COMMIT
from .group_snapshots import GroupSnapshots, Snapshot
from .live_groups import GroupServer, LiveGroup, LiveMember
from .maintenance import MaintenanceReport, RepairReport
from .partition_views import PartitionViews
from .share_states import SHARE_DONE, ShareRecordState, ShareStates
from .sink_commits import SINK_HEARTBEAT_MS, SINK_LEASE_MS, SinkCommits, StagingTopic
from .validation import PartitionBatches, Produced, StagedPartition

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "SHARE_DONE",
    "SINK_HEARTBEAT_MS",
    "SINK_LEASE_MS",
    "SPARK_COMMIT",
    "Broker",
    "FetchedBatches",
    "GroupConfigs",
    "GroupServer",
    "GroupSnapshots",
    "LiveGroup",
    "LiveMember",
    "MaintenanceReport",
    "OffsetAndMetadata",
    "OffsetLookup",
    "OffsetSpec",
    "PartitionBatches",
    "PartitionFetch",
    "PartitionInfo",
    "PartitionViews",
    "Produced",
    "RepairReport",
    "ShareRecordState",
    "ShareStates",
    "SinkCommits",
    "Snapshot",
    "StagedLedger",
    "StagedPartition",
    "StagingTopic",
    "TopicDescription",
    "TopicInfo",
]
