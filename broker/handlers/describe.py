"""Describing configs with Kafka's sources and synonyms (shared by several APIs)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from broker.context import BrokerContext
from config import TopicConfigs
from config.broker import DEFS as BROKER_DEFS
from config.topic import SYNONYMS, topic_def, topic_keys


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource numbers."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


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


def describe_topic_configs(ctx: BrokerContext, configs: TopicConfigs,
                           keys: list[str] | None) -> list[DescribedConfig]:
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
            bdef = BROKER_DEFS[broker_key]
            if broker_key in ctx.config.explicit:
                synonyms.append((broker_key, bdef.render(ctx.config[broker_key]),
                                 ConfigSource.STATIC_BROKER_CONFIG))
            synonyms.append((broker_key, bdef.render(ctx.config[broker_key]),
                             ConfigSource.DEFAULT_CONFIG))
        source = {"topic": ConfigSource.DYNAMIC_TOPIC_CONFIG,
                  "broker": ConfigSource.STATIC_BROKER_CONFIG,
                  "default": ConfigSource.DEFAULT_CONFIG}[configs.source(key)]
        out.append(DescribedConfig(key, d.render(configs.get(key)), source, False, d.sensitive,
                                   int(d.type), d.doc, synonyms))
    return out


def describe_broker_configs(ctx: BrokerContext, keys: list[str] | None) -> list[DescribedConfig]:
    out = []
    for key in keys if keys is not None else sorted(BROKER_DEFS):
        d = BROKER_DEFS.get(key)
        if d is None:
            continue
        source = (ConfigSource.STATIC_BROKER_CONFIG if key in ctx.config.explicit
                  else ConfigSource.DEFAULT_CONFIG)
        value = None if d.sensitive else d.render(ctx.config[key])
        out.append(DescribedConfig(key, value, source, True, d.sensitive, int(d.type), d.doc,
                                   [(key, value, source)]))
    return out
