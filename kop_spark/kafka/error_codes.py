"""Kafka's error code for each of kop's exceptions: what a Kafka broker answers in the same case."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from .. import errors
from . import authorization

log = logging.getLogger(__name__)

# Most specific first: the first class an exception is an instance of decides.
_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (authorization.TopicAuthorizationFailedError, ErrorCode.topic_authorization_failed),
    (authorization.GroupAuthorizationFailedError, ErrorCode.group_authorization_failed),
    (authorization.ClusterAuthorizationFailedError, ErrorCode.cluster_authorization_failed),
    (authorization.TransactionalIdAuthorizationFailedError, ErrorCode.transactional_id_authorization_failed),
    (errors.UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (errors.CorruptRecordError, ErrorCode.corrupt_message),
    (errors.RecordTooLargeError, ErrorCode.message_too_large),
    (errors.InvalidTimestampError, ErrorCode.invalid_timestamp),
    (errors.InvalidRecordError, ErrorCode.invalid_record),
    (errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (errors.ProducerFencedError, ErrorCode.producer_fenced),
    (errors.UnknownProducerIdError, ErrorCode.unknown_producer_id),
    (errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (errors.NotCoordinatorError, ErrorCode.not_coordinator),
    (errors.InvalidProducerIdMappingError, ErrorCode.invalid_producer_id_mapping),
    (errors.InvalidTransactionTimeoutError, ErrorCode.invalid_transaction_timeout),
    (errors.ConcurrentTransactionsError, ErrorCode.concurrent_transactions),
    (errors.TopicAlreadyExistsError, ErrorCode.topic_already_exists),
    (errors.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (errors.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (errors.OffsetMetadataTooLargeError, ErrorCode.offset_metadata_too_large),
    (errors.GroupIdNotFoundError, ErrorCode.group_id_not_found),
    (errors.ResourceNotFoundError, ErrorCode.resource_not_found),
    (errors.ConfigError, ErrorCode.invalid_config),
    (errors.MetadataStoreUnavailableError, ErrorCode.request_timed_out),
    (errors.StorageError, ErrorCode.kafka_storage_error),
)


def error_code(e: BaseException, where: str) -> ErrorCode:
    """The code for ``e``; an exception without one is logged (it is a bug or an outage) and
    answered UNKNOWN_SERVER_ERROR, as Kafka does."""
    for cls, code in _CODES:
        if isinstance(e, cls):
            if code in (ErrorCode.kafka_storage_error, ErrorCode.request_timed_out):
                log.warning("%s: %s", where, e)
            return code
    log.error("%s: unexpected error", where, exc_info=e)
    return ErrorCode.unknown_server_error
