"""DESCRIBE_CONFIGS of topics (their real settings: the store's defaults and the topic's own
overrides) and of the broker (node 0: every setting of conf/kop.conf in effect; object-store
settings, which may hold credentials, are reported as sensitive, without their values)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import CLOUD_OPTION_PREFIXES, SENSITIVE
from ..context import NODE_ID, ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5  # Kafka's ConfigSource


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


async def describe_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    results = [
        await _resource(ctx, header, m, r.resource_type, r.resource_name, r.configuration_keys)
        for r in request.resources
    ]
    return make(m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


async def _resource(
    ctx: ServerContext, header: RequestHeader, m: Any, kind: int, name: str, keys: tuple[str, ...] | None
) -> Any:
    def result(code: ErrorCode, message: str | None, configs: tuple[Any, ...] = ()) -> Any:
        return make(
            m.DescribeConfigsResult,
            error_code=code,
            error_message=message,
            resource_type=kind,
            resource_name=name,
            configs=configs,
        )

    defaults = ctx.broker.config
    if kind == TOPIC and not ctx.allowed(header, "DescribeConfigs", "Topic", name):
        return result(ErrorCode.topic_authorization_failed, f"may not describe the configs of topic {name!r}")
    if kind == BROKER and not ctx.allowed(header, "DescribeConfigs", "Cluster"):
        return result(ErrorCode.cluster_authorization_failed, "may not describe the broker's configs")
    if kind == TOPIC:
        try:
            values = await ctx.call(ctx.broker.topic_config, name)
        except Exception as e:
            return result(error_code(e, f"describe configs of topic {name!r}"), str(e))
        sources = {k: DEFAULT_CONFIG if v == defaults[k] else DYNAMIC_TOPIC_CONFIG for k, v in values.items()}
    elif kind == BROKER and name in ("", str(NODE_ID)):
        values = dict(defaults)
        sources = dict.fromkeys(values, STATIC_BROKER_CONFIG)
    else:
        return result(ErrorCode.invalid_request, f"no config resource of type {kind} named {name!r}")
    wanted = set(keys) if keys else set(values)
    configs = tuple(
        make(
            m.DescribeConfigsResourceResult,
            name=k,
            value=None if _sensitive(k) else _text(v),  # credentials stay here
            read_only=kind == BROKER,
            config_source=sources[k],
            is_default=sources[k] == DEFAULT_CONFIG,
            is_sensitive=_sensitive(k),
            synonyms=(),
            documentation=None,
        )
        for k, v in sorted(values.items())
        if k in wanted
    )
    return result(ErrorCode.none, None, configs)


def _sensitive(name: str) -> bool:
    return name.startswith(CLOUD_OPTION_PREFIXES) or name in SENSITIVE
