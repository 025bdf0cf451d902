"""Records to batches, as a Kafka producer's accumulator makes them: each record goes to its
partition (the one given, else murmur2 of its key, else the call's sticky partition), and each
partition's records fill batches of up to ``batch.size`` bytes in order. A record bigger than
``batch.size`` gets a batch of its own, which the topic's ``max.message.bytes`` then judges."""

from __future__ import annotations

from .. import layout
from ..errors import ConfigError
from ..partitioner import partition_for_key
from ..record import Record, build_record_batch
from ..record.compression import CompressionType
from ..record.default_record_batch import HEADER_SIZE
from ..storage.metadata_store import MetadataStore, update

# A record's worst-case framing (length, attributes, timestamp and offset deltas, key and value
# lengths, header count) as Kafka's producer estimates it.
_RECORD_OVERHEAD = 21


def estimated_size(r: Record) -> int:
    headers = sum(len(k.encode()) + len(v or b"") + 10 for k, v in r.headers)
    return _RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"") + headers


class ProducerBatches:
    def __init__(
        self,
        topic: str,
        partitions: int,
        partition: int | None,
        sticky: int,
        compression: str | CompressionType,
        batch_size: int,
    ):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"produce to {topic}: batch.size must be a positive number of bytes, got {batch_size!r}")
        self._partitions = partitions
        self._partition = partition
        self._sticky = sticky
        self._codec = CompressionType.from_name(compression) if isinstance(compression, str) else compression
        self._batch_size = batch_size
        self._open: dict[int, tuple[list[Record], int]] = {}  # partition -> (records, estimated bytes)
        self._done: dict[int, list[bytes]] = {}
        self._counts: dict[int, int] = {}

    def add(self, r: Record) -> None:
        p = self._partition
        if p is None:
            p = partition_for_key(r.key, self._partitions) if r.key is not None else self._sticky
        records, size = self._open.get(p, ([], HEADER_SIZE))
        grown = size + estimated_size(r)
        if records and grown > self._batch_size:
            self._close(p, records)
            records, grown = [], HEADER_SIZE + estimated_size(r)
        records.append(r)
        self._open[p] = (records, grown)
        self._counts[p] = self._counts.get(p, 0) + 1

    def _close(self, p: int, records: list[Record]) -> None:
        self._done.setdefault(p, []).append(build_record_batch(records, compression=self._codec))

    def by_partition(self) -> dict[int, tuple[list[bytes], int]]:
        """Each partition's batches, in order, and its record count; partitions in order."""
        for p, (records, _) in self._open.items():
            self._close(p, records)
        self._open = {}
        return {p: (self._done[p], self._counts[p]) for p in sorted(self._done)}


def next_producer_id(store: MetadataStore) -> int:
    """An idempotent producer id: ids come from one key changed by compare-and-set, so no two
    producers of any process on the store get the same one."""
    taken = update(store, layout.PRODUCER_IDS_KEY, lambda v: {"next": (v or {"next": 0})["next"] + 1})
    return int((taken.value or {"next": 0})["next"])
