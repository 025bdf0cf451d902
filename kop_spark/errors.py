"""Exceptions, one class per meaning.

The names follow Kafka's error codes where one exists (``OffsetOutOfRange``,
``CorruptRecord``, ``UnknownTopicOrPartition``, ``InvalidTopic``...), so that a
user who knows Kafka knows what went wrong. Every message names the offending
topic, partition, offset, option or file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class KopError(Exception):
    """Base class of every error raised by kop-spark."""


class ConfigError(KopError, ValueError):
    """An unknown setting, or a setting whose value is malformed."""


class StorageError(KopError, OSError):
    """The store root (or a file under it) cannot be read or written."""


class FileMissingError(StorageError):
    """A file that was planned on is gone: deleted after the metadata stopped referring to it.
    Readers re-read the metadata and find the same offsets elsewhere, or learn they are gone."""


class CorruptMetadataError(StorageError):
    """A metadata value that cannot be parsed (written whole by this version, so only damage
    or an earlier version's torn write leaves one). ``kop repair`` restores the store."""


class InvalidTopicError(KopError, ValueError):
    """A topic name that breaks Kafka's naming rules (Kafka: INVALID_TOPIC_EXCEPTION)."""


class TopicAlreadyExistsError(KopError):
    """Kafka: TOPIC_ALREADY_EXISTS."""


class UnknownTopicOrPartitionError(KopError, LookupError):
    """Kafka: UNKNOWN_TOPIC_OR_PARTITION."""


class TopicNotFoundError(UnknownTopicOrPartitionError):
    """The topic does not exist."""


class PartitionNotFoundError(UnknownTopicOrPartitionError):
    """The topic exists but has no such partition."""


class InvalidPartitionsError(KopError, ValueError):
    """A partition count that is not allowed (Kafka: INVALID_PARTITIONS)."""


class OffsetOutOfRangeError(KopError, IndexError):
    """An offset outside ``[log_start_offset, log_end_offset]`` (Kafka: OFFSET_OUT_OF_RANGE).

    Never answered by silently jumping to a valid offset: the caller decides.
    """

    def __init__(self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition}: "
            f"valid offsets are {log_start_offset} (log start) to {log_end_offset} (log end)"
        )


class DataLossError(KopError):
    """Offsets a reader was to read are gone: trimmed by retention, or their topic deleted.
    Spark's ``failOnDataLoss=false`` skips them instead of raising this."""


class CorruptRecordError(KopError):
    """Bytes that fail their checksum or cannot be parsed (Kafka: CORRUPT_MESSAGE).

    Raised instead of returning data: corrupt bytes are never handed out.
    """


class RecordError(NamedTuple):
    """One record a produce was refused for (Kafka's ``RecordError``, KIP-467)."""

    batch_index: int  # the record's place in its batch
    message: str


class InvalidRecordError(KopError, ValueError):
    """A well-formed batch that Kafka would refuse (Kafka: INVALID_RECORD). ``record_errors``
    names the records it was refused for, where they are known."""

    def __init__(self, message: str, record_errors: Sequence[RecordError] = ()):
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class InvalidTimestampError(InvalidRecordError):
    """A record stamped further from the broker's time than the topic's
    ``message.timestamp.before.max.ms`` or ``message.timestamp.after.max.ms`` allows (Kafka:
    INVALID_TIMESTAMP)."""


class OutOfOrderSequenceError(KopError):
    """An idempotent producer's batch whose sequence does not follow its last one (Kafka:
    OUT_OF_ORDER_SEQUENCE_NUMBER): a batch in between was lost, so this one is refused."""


class InvalidProducerEpochError(KopError):
    """A batch from an idempotent producer's older epoch, fenced by a newer one (Kafka:
    INVALID_PRODUCER_EPOCH)."""


class ProducerFencedError(KopError):
    """A transactional producer whose epoch is not its transactional id's current one: a newer
    instance took the id over, or its transaction was aborted on timeout (Kafka: PRODUCER_FENCED)."""


class UnknownProducerIdError(KopError):
    """A transactional producer whose transaction under way a restarted server could not take up
    (Kafka: UNKNOWN_PRODUCER_ID). Unlike a fencing, the client may go on: it aborts the transaction, which
    bumps its epoch with InitProducerId (KIP-360), and begins the next."""


class NotCoordinatorError(KopError):
    """A request to a server that no longer coordinates its transaction: another server took it up
    (Kafka: NOT_COORDINATOR). Retriable: the client finds the coordinator again and resends."""


class InvalidTxnStateError(KopError):
    """A transactional request that its transaction's state does not allow, such as a produce to a
    partition not added to it (Kafka: INVALID_TXN_STATE)."""


class ConcurrentTransactionsError(KopError):
    """A transactional id changed by another process in the middle of a request; retriable (Kafka:
    CONCURRENT_TRANSACTIONS)."""


class InvalidProducerIdMappingError(KopError):
    """A producer id that is not its transactional id's (Kafka: INVALID_PRODUCER_ID_MAPPING)."""


class InvalidTransactionTimeoutError(KopError, ValueError):
    """A transaction timeout above ``transaction.max.timeout.ms`` (Kafka: INVALID_TRANSACTION_TIMEOUT)."""


class RecordTooLargeError(KopError, ValueError):
    """A batch larger than the topic's ``max.message.bytes`` (Kafka: MESSAGE_TOO_LARGE)."""


class OffsetMetadataTooLargeError(KopError, ValueError):
    """Metadata of a committed offset longer than ``offsetMetadataMaxSize`` (Kafka: OFFSET_METADATA_TOO_LARGE)."""


class GroupIdNotFoundError(KopError, LookupError):
    """Kafka: GROUP_ID_NOT_FOUND."""


class ResourceNotFoundError(KopError, LookupError):
    """A thing to change that is not there, such as a user's credential (Kafka: RESOURCE_NOT_FOUND)."""


class BadVersionError(KopError):
    """A metadata compare-and-set lost against a concurrent update."""


class MetadataStoreUnavailableError(StorageError):
    """The metadata store's service (ZooKeeper, etcd, the object store) did not answer within
    ``metadataStoreOperationTimeoutSeconds``. Nothing was acknowledged; a write may still land, so
    callers read again before retrying."""


class LogEndMovedError(KopError):
    """A conditional append found the log end past the offset its decision was made at."""


class OrphanRemovedError(StorageError):
    """A file written for a change was condemned as an orphan (by maintenance with a short grace)
    before the change could refer to it. Nothing was applied; the operation can be run again."""


class WriteAbortedError(KopError):
    """Spark aborted a batch write job (another of its tasks failed) while this task was still
    writing: the task's output was discarded, as the abort discarded the rest of the job's."""


class LogCleaningError(KopError):
    """A compaction failed in a way no KopError names (a bug, memory exhausted): as Kafka's log
    cleaner does, the partition is left uncleanable until the server restarts, and the others are
    compacted meanwhile. Nothing is lost: the pass under way swapped nothing in."""


class ManagedLedgerDeletedError(Exception):
    """The managed ledger does not exist (never created, or deleted). Internal to the store: the
    Broker turns it into ``TopicNotFoundError`` or ``PartitionNotFoundError``."""


class HousekeepingStoppedError(Exception):
    """Housekeeping (compaction, merging, a maintenance pass) was asked to stop, as a Kafka broker's
    log cleaner is at shutdown: what it was rewriting was abandoned, and nothing it left is referred
    to. Not a ``KopError``, so that a pass over many partitions ends at once rather than record it
    against each."""
