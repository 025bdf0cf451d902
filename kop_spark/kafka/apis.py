"""The APIs this server implements, with the versions it advertises in API_VERSIONS (exactly
those it handles), and the handler of each."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from .context import ServerContext
from .handlers import (
    acls,
    admin,
    configs,
    consumer_groups,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    producers,
    sasl,
    share_group_admin,
    share_groups,
    transactions,
    users,
)
from .messages import RequestHeader, make, response_module

Handler = Callable[[ServerContext, RequestHeader, Any], Awaitable[Any]]

API_VERSIONS = 18


class Api(NamedTuple):
    key: int
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


async def api_versions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    return versions_response(header.api_version, ErrorCode.none)


def versions_response(version: int, code: ErrorCode) -> Any:
    """What API_VERSIONS answers; a version this server does not know gets the v0 answer with
    UNSUPPORTED_VERSION, so the client can retry with one it finds in the list (as Kafka does)."""
    m = response_module(API_VERSIONS, version)
    keys = tuple(
        make(m.ApiVersion, api_key=a.key, min_version=a.min_version, max_version=a.max_version) for a in APIS.values()
    )
    return make(m.ApiVersionsResponse, error_code=code, api_keys=keys, throttle_time=datetime.timedelta(0))


APIS: dict[int, Api] = {
    a.key: a
    for a in (
        Api(0, 3, 9, produce.handle),
        Api(1, 4, 12, fetch.handle),
        Api(2, 1, 7, list_offsets.handle),
        Api(3, 1, 12, metadata.handle),
        Api(8, 2, 9, offsets.offset_commit),
        Api(9, 1, 9, offsets.offset_fetch),
        Api(10, 0, 4, offsets.find_coordinator),
        Api(11, 0, 9, groups.join_group),
        Api(12, 0, 4, groups.heartbeat),
        Api(13, 0, 5, groups.leave_group),
        Api(14, 0, 5, groups.sync_group),
        Api(15, 0, 5, groups.describe_groups),
        Api(16, 0, 5, groups.list_groups),
        Api(17, 0, 1, sasl.sasl_handshake),
        Api(API_VERSIONS, 0, 3, api_versions),
        Api(19, 2, 7, admin.create_topics),
        Api(20, 1, 5, admin.delete_topics),
        Api(21, 0, 2, admin.delete_records),
        Api(22, 0, 4, producers.init_producer_id),
        Api(24, 0, 3, transactions.add_partitions_to_txn),
        Api(25, 0, 3, transactions.add_offsets_to_txn),
        Api(26, 0, 3, transactions.end_txn),
        Api(28, 0, 3, transactions.txn_offset_commit),
        Api(29, 1, 3, acls.describe_acls),
        Api(30, 1, 3, acls.create_acls),
        Api(31, 1, 3, acls.delete_acls),
        Api(32, 1, 4, configs.describe_configs),
        Api(33, 0, 2, configs.alter_configs),
        Api(35, 1, 4, log_dirs.describe_log_dirs),
        Api(36, 0, 2, sasl.sasl_authenticate),
        Api(37, 0, 3, admin.create_partitions),
        Api(42, 0, 2, groups.delete_groups),
        Api(44, 0, 1, configs.incremental_alter_configs),
        Api(47, 0, 0, groups.offset_delete),
        Api(50, 0, 0, users.describe_user_scram_credentials),
        Api(51, 0, 0, users.alter_user_scram_credentials),
        Api(60, 0, 1, metadata.describe_cluster),
        Api(61, 0, 0, producers.describe_producers),
        Api(65, 0, 0, transactions.describe_transactions),
        Api(66, 0, 2, transactions.list_transactions),
        Api(68, 0, 1, consumer_groups.consumer_group_heartbeat),
        Api(69, 0, 1, consumer_groups.consumer_group_describe),
        Api(76, 1, 1, share_groups.share_group_heartbeat),
        Api(77, 1, 1, share_group_admin.share_group_describe),
        Api(78, 1, 1, share_groups.share_fetch),
        Api(79, 1, 1, share_groups.share_acknowledge),
        Api(90, 0, 1, share_group_admin.describe_share_group_offsets),
        Api(91, 0, 0, share_group_admin.alter_share_group_offsets),
        Api(92, 0, 0, share_group_admin.delete_share_group_offsets),
    )
}
