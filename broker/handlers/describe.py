"""Describing configs with Kafka's sources and synonyms (shared by several APIs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.context import BrokerContext
from broker.group_configs import GROUP_KEYS
from config import TopicConfigs
from config.broker import DEFS as BROKER_DEFS
from config.dynamic import LISTENER_PREFIX, ConfigSource, DynamicLayers, definition, is_live
from config.topic import SYNONYMS, topic_def, topic_keys


@dataclass(slots=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: int
    doc: str
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


def layers_of(ctx: BrokerContext) -> DynamicLayers:
    """This broker's config layers (static only when nothing dynamic is set up)."""
    return ctx.dynamic.layers if ctx.dynamic is not None else DynamicLayers.of(ctx.config)


def describe_topic_configs(ctx: BrokerContext, configs: TopicConfigs,
                           keys: list[str] | None) -> list[DescribedConfig]:
    layers = layers_of(ctx)
    out = []
    for key in keys if keys is not None else topic_keys():
        d = topic_def(key)
        if d is None:
            continue
        synonyms: list[tuple[str, str | None, int]] = []
        if key in configs.overrides:
            synonyms.append((key, configs.overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_key = SYNONYMS.get(key)
        if broker_key is not None:
            synonyms += layers.synonyms(broker_key)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(DescribedConfig(key, d.render(configs.get(key)), source, False, d.sensitive,
                                   int(d.type), d.doc, synonyms))
    return out


def describe_broker_configs(ctx: BrokerContext, keys: list[str] | None,
                            per_broker: bool = True) -> list[DescribedConfig]:
    """This broker's configs (``per_broker``), or the cluster default entry's."""
    layers = layers_of(ctx)
    if not per_broker:
        names = sorted(layers.default)
    else:
        names = sorted(BROKER_DEFS) + sorted(k for k in ctx.config.values
                                             if k.startswith(LISTENER_PREFIX))
    out = []
    for key in names if keys is None else [k for k in keys if k in names]:
        d = definition(key)
        if d is None:
            continue
        synonyms = layers.synonyms(key, per_broker)
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        if per_broker:
            value = d.render(ctx.config.values.get(key))
        else:
            value = layers.default[key]
        out.append(DescribedConfig(key, None if d.sensitive else value, source,
                                   not is_live(key), d.sensitive, int(d.type), d.doc,
                                   synonyms))
    return out


def describe_group_configs(ctx: BrokerContext, group: str,
                           keys: list[str] | None) -> list[DescribedConfig]:
    """A group's configs (KIP-848): its overrides, else the broker's values."""
    overrides = ctx.group_configs.overrides.get(group, {}) if ctx.group_configs else {}
    out = []
    for key in sorted(GROUP_KEYS) if keys is None else [k for k in keys if k in GROUP_KEYS]:
        broker_key = GROUP_KEYS[key][0]
        d = BROKER_DEFS[broker_key]
        value: str | None = overrides.get(key)
        source = ConfigSource.GROUP_CONFIG
        if value is None:
            value, source = d.render(ctx.config[broker_key]), ConfigSource.DEFAULT_CONFIG
        out.append(DescribedConfig(key, value, source, False, False, int(d.type), d.doc,
                                   [(key, value, source)]))
    return out
