"""DESCRIBE_ACLS, CREATE_ACLS and DELETE_ACLS: the bindings ``kop acls`` keeps (``broker.acls``),
managed by Kafka's admin clients and kafka-acls as a Kafka broker's are. Creating and deleting take
Alter on the cluster, describing takes Describe, as in Kafka. kop's bindings apply to every host:
a binding for another host than ``*`` is refused by name rather than stored to mean more."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker.acls import AclBinding, AclFilter
from ...errors import ConfigError
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

ANY = 1  # Kafka's ANY, of each of the enums below
# Kafka's ResourceType, PatternType, AclOperation and AclPermissionType codes, by kop's names
RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
PATTERN_TYPES = {1: "Any", 2: "Match", 3: "Literal", 4: "Prefixed"}
OPERATIONS = {
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
}
PERMISSIONS = {2: "Deny", 3: "Allow"}
_RESOURCE_CODES, _PATTERN_CODES, _OPERATION_CODES, _PERMISSION_CODES = (
    {name: code for code, name in table.items()} for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)
)


def _code(e: Exception, where: str) -> ErrorCode:
    """A request kop's ACLs cannot take is INVALID_REQUEST, as Kafka answers one."""
    return ErrorCode.invalid_request if isinstance(e, ConfigError) else error_code(e, where)


def _name(table: dict[int, str], code: int, what: str) -> str:
    if code not in table:
        raise ConfigError(f"ACL {what} {code}: kop's ACLs take {', '.join(table.values())}")
    return table[code]


def _wanted(table: dict[int, str], code: int, what: str) -> str | None:
    """A filter's value: None for Kafka's ANY."""
    return None if code == ANY else _name(table, code, what)


def _filter(f: Any) -> AclFilter | None:
    """The filter a request gives; None when it can match nothing here (a host other than ``*``)."""
    if f.host_filter not in (None, "*"):
        return None
    return AclFilter(
        principal=f.principal_filter,
        permission=_wanted(PERMISSIONS, f.permission_type, "permission"),
        operation=_wanted(OPERATIONS, f.operation, "operation"),
        resource_type=_wanted(RESOURCE_TYPES, f.resource_type_filter, "resource type"),
        resource_name=f.resource_name_filter,
        pattern_type=_name(PATTERN_TYPES, f.pattern_type_filter, "pattern type"),
    )


def _binding(c: Any) -> AclBinding:
    if c.host != "*":
        raise ConfigError(f"ACL host {c.host!r}: kop's ACLs apply to every host, so the host must be *")
    pattern = _name(PATTERN_TYPES, c.resource_pattern_type, "pattern type")
    if pattern not in ("Literal", "Prefixed"):
        raise ConfigError(f"ACL pattern type {pattern}: a binding's is Literal or Prefixed")
    return AclBinding(
        principal=c.principal,
        permission=_name(PERMISSIONS, c.permission_type, "permission"),
        operation=_name(OPERATIONS, c.operation, "operation"),
        resource_type=_name(RESOURCE_TYPES, c.resource_type, "resource type"),
        resource_name=c.resource_name,
        pattern_type=pattern,
    ).check()


def _wire(b: AclBinding) -> dict[str, Any]:
    """A binding's fields as DeleteAcls answers them (DescribeAcls groups the first three)."""
    return {
        "resource_type": _RESOURCE_CODES[b.resource_type],
        "resource_name": b.resource_name,
        "pattern_type": _PATTERN_CODES[b.pattern_type],
        **_entry(b),
    }


def _entry(b: AclBinding) -> dict[str, Any]:
    return {
        "principal": b.principal,
        "host": "*",
        "operation": _OPERATION_CODES[b.operation],
        "permission_type": _PERMISSION_CODES[b.permission],
    }


async def describe_acls(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)

    def answer(code: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return make(
            m.DescribeAclsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=code,
            error_message=message,
            resources=resources,
        )

    try:
        ctx.authorize(header, "Describe", "Cluster")
        wanted = _filter(request)
        found = [] if wanted is None else [b for b in await ctx.call(ctx.broker.acls.bindings) if wanted.matches(b)]
    except Exception as e:
        return answer(_code(e, "describe ACLs"), str(e))
    by_resource: dict[tuple[str, str, str], list[AclBinding]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = [
        make(
            m.DescribeAclsResource,
            resource_type=_RESOURCE_CODES[resource_type],
            resource_name=name,
            pattern_type=_PATTERN_CODES[pattern],
            acls=tuple(make(m.AclDescription, **_entry(b)) for b in bindings),
        )
        for (resource_type, name, pattern), bindings in by_resource.items()
    ]
    return answer(ErrorCode.none, None, tuple(resources))


async def create_acls(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """Each creation stands alone, as in Kafka: a refused one does not stop the others."""
    m = response_module(header.api_key, header.api_version)
    results = []
    for c in request.creations:
        code, message = ErrorCode.none, None
        try:
            ctx.authorize(header, "Alter", "Cluster")
            await ctx.call(ctx.broker.acls.add, [_binding(c)])
        except Exception as e:
            code, message = _code(e, "create ACLs"), str(e)
        results.append(make(m.AclCreationResult, error_code=code, error_message=message))
    return make(m.CreateAclsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


async def delete_acls(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """Every filter's matches go in one change of the bindings; each filter is answered with them."""
    m = response_module(header.api_key, header.api_version)

    def result(code: ErrorCode, message: str | None, matched: list[AclBinding]) -> Any:
        matching = tuple(
            make(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None, **_wire(b)) for b in matched
        )
        return make(m.DeleteAclsFilterResult, error_code=code, error_message=message, matching_acls=matching)

    try:
        ctx.authorize(header, "Alter", "Cluster")
        filters = [_filter(f) for f in request.filters]
        usable = [f for f in filters if f is not None]
        removed = iter(await ctx.call(ctx.broker.acls.remove_matching, usable))
        results = [result(ErrorCode.none, None, [] if f is None else next(removed)) for f in filters]
    except Exception as e:
        results = [result(_code(e, "delete ACLs"), str(e), []) for _ in request.filters]
    return make(m.DeleteAclsResponse, throttle_time=datetime.timedelta(0), filter_results=tuple(results))
