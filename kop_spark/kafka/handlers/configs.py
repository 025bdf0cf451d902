"""DESCRIBE_CONFIGS of topics (their real settings: the store's defaults and the topic's own
overrides) and of the broker (node 0: every setting of conf/kop.conf in effect; object-store
settings, which may hold credentials, are reported as sensitive, without their values), each
setting with its type as Kafka's ConfigDef gives it and, when asked, its synonyms and documentation.
A setting conf/kop.conf gives a value other than kop's own default is STATIC_BROKER_CONFIG, as one
set in a Kafka broker's server.properties is; the generated conf/kop.conf names every setting, so
naming it tells nothing, but changing it is what an operator did.

ALTER_CONFIGS and INCREMENTAL_ALTER_CONFIGS change topics' settings (``Broker.alter_topic_config``),
each topic's all or none, and groups' (``GroupConfigs``: ``kafka-configs --entity-type groups``). The broker's settings are conf/kop.conf's, read at start: a request to
change them is refused, as Kafka refuses a change to a static broker setting."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import is_sensitive
from ...config_changes import ALTER_OPS, AlterConfigOp
from ...errors import ConfigError
from ...settings import SETTINGS
from ..context import NODE_ID, ServerContext
from ..error_codes import error_code
from ..messages import RequestHeader, make, response_module

TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource.Type
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8  # Kafka's ConfigSource
# Kafka's ConfigType
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


async def describe_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    results = [await _resource(ctx, header, m, r, request) for r in request.resources]
    return make(m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0), results=tuple(results))


async def _resource(ctx: ServerContext, header: RequestHeader, m: Any, resource: Any, request: Any) -> Any:
    kind, name, keys = resource.resource_type, resource.resource_name, resource.configuration_keys

    def result(code: ErrorCode, message: str | None, configs: tuple[Any, ...] = ()) -> Any:
        return make(
            m.DescribeConfigsResult,
            error_code=code,
            error_message=message,
            resource_type=kind,
            resource_name=name,
            configs=configs,
        )

    if kind == TOPIC and not ctx.allowed(header, "DescribeConfigs", "Topic", name):
        return result(ErrorCode.topic_authorization_failed, f"may not describe the configs of topic {name!r}")
    if kind == BROKER and not ctx.allowed(header, "DescribeConfigs", "Cluster"):
        return result(ErrorCode.cluster_authorization_failed, "may not describe the broker's configs")
    if kind == GROUP and not ctx.allowed(header, "DescribeConfigs", "Group", name):
        return result(ErrorCode.group_authorization_failed, f"may not describe the configs of group {name!r}")
    if kind not in (TOPIC, GROUP) and not (kind == BROKER and name in ("", str(NODE_ID))):
        return result(ErrorCode.invalid_request, f"no config resource of type {kind} named {name!r}")
    try:
        values, own = await _settings(ctx, kind, name)
    except Exception as e:
        return result(error_code(e, f"describe configs of {name!r}"), str(e))
    described = _Described(m, kind, own, ctx.broker.config, request)
    return result(
        ErrorCode.none, None, tuple(described.entry(k, v) for k, v in sorted(values.items()) if not keys or k in keys)
    )


async def _settings(ctx: ServerContext, kind: int, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A resource's settings in effect, and those of them set for it (all of the broker's are)."""
    if kind == TOPIC:
        own = await ctx.call(ctx.broker.topic_config, name, own=True)
        return ctx.broker.config.topic_config(own), own
    if kind == GROUP:
        return await ctx.call(ctx.group_configs.effective, name), await ctx.call(ctx.group_configs.own, name)
    values = dict(ctx.broker.config)
    return values, {k: v for k, v in values.items() if _set_by_broker(k, v)}


def _set_by_broker(name: str, value: Any) -> bool:
    """Whether conf/kop.conf (or ``--conf``) changed the setting from kop's own default."""
    setting = SETTINGS.get(name)
    return setting is None or value != setting.default


class _Described:
    """The entries of one resource's settings, as the request asks for them."""

    def __init__(self, m: Any, kind: int, own: dict[str, Any], defaults: Mapping[str, Any], request: Any):
        self._m, self._kind, self._own, self._defaults = m, kind, own, defaults
        self._own_source = {TOPIC: DYNAMIC_TOPIC_CONFIG, GROUP: GROUP_CONFIG}.get(kind, STATIC_BROKER_CONFIG)
        self._synonyms = getattr(request, "include_synonyms", False)
        self._documented = getattr(request, "include_documentation", False)

    def entry(self, k: str, value: Any) -> Any:
        setting, source = SETTINGS.get(k), self._source(k)
        return make(
            self._m.DescribeConfigsResourceResult,
            name=k,
            value=_shown(k, value),  # credentials stay here
            read_only=self._kind == BROKER,
            config_source=source,
            is_default=source == DEFAULT_CONFIG,
            is_sensitive=is_sensitive(k),
            synonyms=self._synonyms_of(k) if self._synonyms else (),
            config_type=CONFIG_TYPES[setting.config_type] if setting else 0,
            documentation=setting.doc if setting and self._documented else None,
        )

    def _source(self, k: str) -> int:
        if k in self._own:
            return self._own_source
        return STATIC_BROKER_CONFIG if _set_by_broker(k, self._defaults[k]) else DEFAULT_CONFIG

    def _synonyms_of(self, k: str) -> tuple[Any, ...]:
        """Where the value comes from, first what decides it, as Kafka lists a topic's own
        setting, then the broker's it overrides, then the default."""
        chain = [(self._own[k], self._own_source)] if k in self._own else []
        if self._kind != BROKER and _set_by_broker(k, self._defaults[k]):
            chain.append((self._defaults[k], STATIC_BROKER_CONFIG))
        if k in SETTINGS:
            chain.append((SETTINGS[k].default, DEFAULT_CONFIG))
        return tuple(make(self._m.DescribeConfigsSynonym, name=k, value=_shown(k, v), source=s) for v, s in chain)


def _shown(name: str, value: Any) -> str | None:
    return None if is_sensitive(name) else _text(value)


async def alter_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """The legacy AlterConfigs: a topic's own settings become exactly those given."""
    return await _alter(ctx, header, request, replace=True)


async def incremental_alter_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    return await _alter(ctx, header, request, replace=False)


async def _alter(ctx: ServerContext, header: RequestHeader, request: Any, *, replace: bool) -> Any:
    m = response_module(header.api_key, header.api_version)
    responses = []
    for r in request.resources:
        code, message = await _alter_resource(ctx, header, r, replace=replace, validate_only=request.validate_only)
        responses.append(
            make(
                m.AlterConfigsResourceResponse,
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    response = m.AlterConfigsResponse if replace else m.IncrementalAlterConfigsResponse
    return make(response, throttle_time=datetime.timedelta(0), responses=tuple(responses))


async def _alter_resource(
    ctx: ServerContext, header: RequestHeader, r: Any, *, replace: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    name = r.resource_name
    if r.resource_type == BROKER:
        if not ctx.allowed(header, "AlterConfigs", "Cluster"):
            return ErrorCode.cluster_authorization_failed, "may not alter the broker's configs"
        return ErrorCode.invalid_request, "the broker's settings come from conf/kop.conf, read when kop serve starts"
    alterable: dict[int, tuple[str, ErrorCode, Callable[..., Any]]] = {
        TOPIC: ("Topic", ErrorCode.topic_authorization_failed, ctx.broker.alter_topic_config),
        GROUP: ("Group", ErrorCode.group_authorization_failed, ctx.group_configs.alter),
    }
    if r.resource_type not in alterable:
        return ErrorCode.invalid_request, f"no config resource of type {r.resource_type} named {name!r}"
    resource, refused, alter = alterable[r.resource_type]
    if not ctx.allowed(header, "AlterConfigs", resource, name):
        return refused, f"may not alter the configs of {resource.lower()} {name!r}"
    try:
        ops = [_op(c, replace) for c in r.configs]
        await ctx.call(alter, name, ops, replace=replace, validate_only=validate_only)
    except Exception as e:
        return error_code(e, f"alter configs of {resource.lower()} {name!r}"), str(e)
    return ErrorCode.none, None


def _op(config: Any, replace: bool) -> AlterConfigOp:
    if replace:  # AlterConfigs: a null value is a setting given no value, which Kafka refuses
        if config.value is None:
            raise ConfigError(f"setting {config.name!r} is given no value")
        return AlterConfigOp(config.name, "set", config.value)
    if not 0 <= config.config_operation < len(ALTER_OPS):
        raise ConfigError(f"setting {config.name!r}: unknown operation {config.config_operation}")
    return AlterConfigOp(config.name, ALTER_OPS[config.config_operation], config.value)
