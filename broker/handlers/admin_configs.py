"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Topic configs are dynamic: changes are validated as a whole, persisted in the
metadata store (so they survive restart) and applied to the live logs.
Broker configs: a resource named with a broker id is that broker's dynamic
entry, an empty name the cluster-wide default (Kafka's ``<default>``); what
may change and how it reaches the running broker is broker/dynamic_config.py.
Group configs (resource type 32, KIP-848; DescribeConfigs and
IncrementalAlterConfigs only, as Kafka): broker/group_configs.py.
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from broker.context import BrokerContext, Session
from broker.group_configs import group_def
from broker.handlers.describe import (
    describe_broker_configs,
    describe_group_configs,
    describe_topic_configs,
)
from config import ConfigError, TopicConfigs
from config.defs import ConfigDef, ConfigType
from config.dynamic import ConfigSource, DynamicConfigRefused, definition
from config.topic import topic_def
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError

log = structlog.get_logger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _check_broker_name(ctx: BrokerContext, name: str) -> None:
    if name not in ("", str(ctx.node_id)):
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected "
                            f"{ctx.node_id}, but received {name}")


def _check_group_name(name: str) -> None:
    if not name:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")


async def handle_describe_configs(ctx: BrokerContext, header: RequestHeader,
                                  req: Any, session: Session) -> Any:
    v = header.api_version
    resp = DescribeConfigsResponse[v]
    result_cls = resp.DescribeConfigsResult
    entry_cls = result_cls.DescribeConfigsResourceResult
    syn_cls = entry_cls.DescribeConfigsSynonym
    results = []
    for r in req.resources:
        keys = list(r.configuration_keys) if r.configuration_keys is not None else None
        try:
            if r.resource_type == RESOURCE_TOPIC:
                info = ctx.metadata.topic(r.resource_name)
                if info is None:
                    raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"Topic {r.resource_name!r} does not exist")
                described = describe_topic_configs(ctx, TopicConfigs(ctx.config, info.configs),
                                                   keys)
            elif r.resource_type == RESOURCE_BROKER:
                _check_broker_name(ctx, r.resource_name)
                described = describe_broker_configs(ctx, keys, r.resource_name != "")
            elif r.resource_type == RESOURCE_GROUP:
                _check_group_name(r.resource_name)
                described = describe_group_configs(ctx, r.resource_name, keys)
            else:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                    f"Unsupported resource type {r.resource_type}")
        except KafkaApiError as exc:
            ctx.metrics.error("DescribeConfigs", exc.code)
            results.append(result_cls(error_code=exc.code, error_message=exc.message,
                                      resource_type=r.resource_type,
                                      resource_name=r.resource_name, configs=[]))
            continue
        entries = [entry_cls(
            name=d.name, value=d.value, read_only=d.read_only, config_source=d.source,
            is_default=d.source == ConfigSource.DEFAULT_CONFIG, is_sensitive=d.sensitive,
            synonyms=[syn_cls(name=n, value=val, source=s) for n, val, s in d.synonyms]
            if req.include_synonyms else [],
            config_type=d.type,
            documentation=d.doc if getattr(req, "include_documentation", False) else None)
            for d in described]
        results.append(result_cls(error_code=0, error_message=None, resource_type=r.resource_type,
                                  resource_name=r.resource_name, configs=entries))
    return resp(throttle_time_ms=0, results=results)


async def _apply(ctx: BrokerContext, api: str, r: Any, validate_only: bool,
                 build: Any, build_broker: Any, build_group: Any = None
                 ) -> tuple[int, str | None]:
    """Validate and apply one resource's change; returns (error code, message).

    ``build(TopicConfigs)`` gives a topic's new overrides, ``build_broker(entry)``
    a broker entry's new configs, ``build_group(overrides)`` a group's (None:
    the API does not alter groups)."""
    try:
        if r.resource_type == RESOURCE_GROUP and build_group is not None:
            _check_group_name(r.resource_name)
            if ctx.group_configs is None:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                    "Group configs are not available on this broker")
            await ctx.group_configs.alter(r.resource_name, build_group, validate_only)
            return 0, None
        if r.resource_type == RESOURCE_BROKER:
            if ctx.dynamic is None:
                raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                    "Dynamic broker configs are not available on this broker")
            await ctx.dynamic.alter(ctx.dynamic.entity(r.resource_name), build_broker,
                                    [b.name for b in ctx.config.listeners.bind], validate_only)
            return 0, None
        if r.resource_type != RESOURCE_TOPIC:
            raise KafkaApiError(ErrorCode.INVALID_REQUEST,
                                f"Unsupported resource type {r.resource_type}")
        info = ctx.metadata.topic(r.resource_name)
        current = TopicConfigs(ctx.config, info.configs) if info is not None else None
        if current is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Topic {r.resource_name!r} does not exist")
        new = TopicConfigs(ctx.config, build(current))
        _check_tiering_change(current, new)
        if not validate_only:
            await ctx.admin.alter_configs(r.resource_name, new)
            log.info("topic configs altered", topic=r.resource_name, configs=new.overrides)
        return 0, None
    except ConfigError as exc:
        ctx.metrics.error(api, ErrorCode.INVALID_CONFIG)
        return ErrorCode.INVALID_CONFIG, str(exc)
    except DynamicConfigRefused as exc:
        ctx.metrics.error(api, ErrorCode.INVALID_REQUEST)
        return ErrorCode.INVALID_REQUEST, str(exc)
    except KafkaApiError as exc:
        ctx.metrics.error(api, exc.code)
        return exc.code, exc.message


def _check_tiering_change(current: TopicConfigs, new: TopicConfigs) -> None:
    """KIP-950: tiering may only be turned off together with deleting remote data.

    Raises:
        ConfigError: remote.storage.enable true -> false without
            remote.log.delete.on.disable=true.
    """
    if (current.get("remote.storage.enable") and not new.get("remote.storage.enable")
            and not new.get("remote.log.delete.on.disable")):
        raise ConfigError(
            "remote.storage.enable", "false",
            "It is invalid to disable remote storage without deleting remote data. To keep "
            "the remote data read-only set remote.storage.enable=true,remote.log.copy.disable="
            "true; to disable it and delete all remote data set remote.storage.enable=false,"
            "remote.log.delete.on.disable=true")


async def handle_alter_configs(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = AlterConfigsResponse[header.api_version]
    result_cls = resp.AlterConfigsResourceResponse
    results = []
    for r in req.resources:
        def build(current: object, r: Any = r) -> dict[str, str]:
            return {c.name: c.value for c in r.configs if c.value is not None}
        code, message = await _apply(ctx, "AlterConfigs", r, req.validate_only, build, build)
        results.append(result_cls(error_code=code, error_message=message,
                                  resource_type=r.resource_type, resource_name=r.resource_name))
    return resp(throttle_time_ms=0, responses=results)


def _incremental(overrides: dict[str, str], configs: Any, def_of: Any,
                 current: Any) -> dict[str, str]:
    """New entries after SET/DELETE/APPEND/SUBTRACT operations.

    Args:
        def_of: the ConfigDef of a key (None: unknown).
        current: a list key's effective value (what APPEND/SUBTRACT start from).

    Raises:
        ConfigError: unknown key, bad op, or APPEND/SUBTRACT on a non-list key.
    """
    for c in configs:
        d: ConfigDef | None = def_of(c.name)
        if d is None:
            raise ConfigError(c.name, c.value, "unknown config")
        if c.config_operation == OP_SET:
            overrides[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            overrides.pop(c.name, None)
        elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
            if d.type is not ConfigType.LIST:
                raise ConfigError(c.name, c.value, "APPEND/SUBTRACT need a list config")
            items = list(d.parse(overrides[c.name]) if c.name in overrides
                         else current(c.name) or [])
            change = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if c.config_operation == OP_APPEND:
                items += [x for x in change if x not in items]
            else:
                items = [x for x in items if x not in change]
            overrides[c.name] = ",".join(items)
        else:
            raise ConfigError(c.name, c.config_operation, "unknown config operation")
    return overrides


async def handle_incremental_alter_configs(ctx: BrokerContext, header: RequestHeader,
                                           req: Any, session: Session) -> Any:
    resp = IncrementalAlterConfigsResponse[header.api_version]
    result_cls = resp.AlterConfigsResourceResponse
    results = []
    for r in req.resources:
        def build(current: TopicConfigs, r: Any = r) -> dict[str, str]:
            return _incremental(dict(current.overrides), r.configs, topic_def, current.get)

        def build_broker(entry: dict[str, str], r: Any = r) -> dict[str, str]:
            return _incremental(entry, r.configs, definition, ctx.config.values.get)

        def build_group(entry: dict[str, str], r: Any = r) -> dict[str, str]:
            return _incremental(entry, r.configs, group_def, lambda _key: None)
        code, message = await _apply(ctx, "IncrementalAlterConfigs", r, req.validate_only,
                                     build, build_broker, build_group)
        results.append(result_cls(error_code=code, error_message=message,
                                  resource_type=r.resource_type, resource_name=r.resource_name))
    return resp(throttle_time_ms=0, responses=results)


HANDLERS = {
    DescribeConfigsRequest.API_KEY: handle_describe_configs,
    AlterConfigsRequest.API_KEY: handle_alter_configs,
    IncrementalAlterConfigsRequest.API_KEY: handle_incremental_alter_configs,
}
