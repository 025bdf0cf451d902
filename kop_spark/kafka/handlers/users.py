"""DESCRIBE_USER_SCRAM_CREDENTIALS and ALTER_USER_SCRAM_CREDENTIALS: the users ``kop users`` keeps,
managed by admin clients and ``kafka-configs --entity-type users`` as on a Kafka broker. A client
sends the salted password (RFC 5802's Hi(password, salt, i)), never the password; the server keeps
what a login needs and no more (``broker.credentials``). Describing takes Describe on the cluster,
altering takes Alter, as in Kafka; each user's alterations are applied together, or not at all."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from ...broker.credentials import MECHANISMS, ScramCredential
from ...errors import ConfigError
from ..context import ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism codes
_CODES = {name: code for code, name in SCRAM_MECHANISMS.items()}


async def describe_user_scram_credentials(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)

    def answer(code: ErrorCode, message: str | None, results: tuple[Any, ...] = ()) -> Any:
        return make(
            m.DescribeUserScramCredentialsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=code,
            error_message=message,
            results=results,
        )

    try:
        ctx.authorize(header, "Describe", "Cluster")
        users = await ctx.call(ctx.broker.users.names)
    except Exception as e:
        return answer(error_code(e, "describe SCRAM credentials"), str(e))
    asked = list(users) if request.users is None else [u.name for u in request.users]
    results = []
    for name in asked:
        code, message, infos = ErrorCode.none, None, ()
        if asked.count(name) > 1:
            code, message = ErrorCode.duplicate_resource, f"user {name!r} is asked for more than once"
        elif name not in users:
            code, message = ErrorCode.resource_not_found, f"user {name!r} has no SCRAM credentials"
        else:
            credentials = await ctx.call(ctx.broker.users.credentials, name)
            infos = tuple(
                make(m.CredentialInfo, mechanism=_CODES[c.mechanism], iterations=c.iterations) for c in credentials
            )
        results.append(
            make(
                m.DescribeUserScramCredentialsResult,
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=infos,
            )
        )
    return answer(ErrorCode.none, None, tuple(results))


async def alter_user_scram_credentials(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    deletions: dict[str, list[Any]] = defaultdict(list)
    upsertions: dict[str, list[Any]] = defaultdict(list)
    for d in request.deletions:
        deletions[d.name].append(d)
    for u in request.upsertions:
        upsertions[u.name].append(u)
    results = []
    for name in dict.fromkeys([*deletions, *upsertions]):
        try:
            ctx.authorize(header, "Alter", "Cluster")
            upsert, delete = _changes(name, deletions[name], upsertions[name])
            await ctx.call(ctx.broker.users.alter, name, upsert, delete)
            code, message = ErrorCode.none, None
        except _Refused as e:
            code, message = e.code, str(e)
        except Exception as e:
            code, message = error_code(e, f"alter SCRAM credentials of user {name!r}"), str(e)
        results.append(make(m.AlterUserScramCredentialsResult, user=name, error_code=code, error_message=message))
    return make(m.AlterUserScramCredentialsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


def _changes(name: str, deletions: list[Any], upsertions: list[Any]) -> tuple[list[ScramCredential], list[str]]:
    """A user's upsertions as credentials and its deletions as mechanisms, or Kafka's refusal."""
    changes = [*deletions, *upsertions]
    unknown = [c.mechanism for c in changes if c.mechanism not in SCRAM_MECHANISMS]
    if unknown:
        raise _Refused(
            ErrorCode.unsupported_sasl_mechanism, f"SCRAM mechanism {unknown[0]}: expected {', '.join(MECHANISMS)}"
        )
    if len({c.mechanism for c in changes}) < len(changes):
        raise _Refused(ErrorCode.duplicate_resource, f"user {name!r}: a mechanism is altered more than once")
    try:
        upsert = [
            ScramCredential.from_salted_password(SCRAM_MECHANISMS[u.mechanism], u.salt, u.iterations, u.salted_password)
            for u in upsertions
        ]
    except ConfigError as e:
        raise _Refused(ErrorCode.unacceptable_credential, f"user {name!r}: {e}") from None
    return upsert, [SCRAM_MECHANISMS[d.mechanism] for d in deletions]
