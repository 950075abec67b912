"""What a dynamic broker config change does to the running broker: one applier
per part that holds a value it read at start (and a validator where a change
could leave that part unusable).

- ``log.*`` topic defaults: every hosted partition's LogConfig is rebuilt, so
  topics without their own value follow the new default (retention, segment
  size and roll, flush, cleaner settings of compacted topics, ...).
- the log cleaner: ``log.cleaner.threads`` starts or stops cleaner tasks; its
  other keys are read at every pass.
- connection limits (``max.connections*``): new connections are counted
  against the new limits.
- TLS listeners' keystores and truststores: new connections use the new files.
- KIP-956 remote quotas: the copier and remote reads see the new rate at once.
- KIP-714 client metrics (``tierd.client.metrics.*``): a new subscription,
  with new subscription ids, that clients learn at their next push.
- ``unclean.leader.election.enable``: the controller reads it at each
  election; turned on, the acting controller elects the leaderless partitions.
- ``num.replica.fetchers``: followed partitions move to their fetcher for the
  new count (replication/fetcher_resize.py).

Concurrency: appliers run on the event loop and do not await; rebuilding log
configs walks the hosted partitions once per change (an operator action).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.client_telemetry import subscription_from_config
from broker.context import BrokerContext
from broker.dynamic_config import DynamicBrokerConfigs
from broker.security import ListenerSecurity
from broker.security.limits import ConnectionLimits
from broker.security.tls import TlsSettings, build_server_context
from config import BrokerConfig, ConfigError, TopicConfigs
from config.dynamic import (
    CLEANER_KEYS,
    CLIENT_METRICS_KEYS,
    CONNECTION_KEYS,
    LISTENER_PREFIX,
    LOG_KEYS,
    REMOTE_QUOTA_KEYS,
    split_listener,
)
from replication import fetcher_resize


def install(dynamic: DynamicBrokerConfigs, ctx: BrokerContext,
            limits: ConnectionLimits | None = None,
            securities: Sequence[ListenerSecurity] = (), tiering: Any = None) -> None:
    """Register the appliers of every part of a running broker."""
    config = ctx.config

    def topic_configs(candidate: BrokerConfig) -> None:
        if all(candidate.values.get(k) == config.values.get(k) for k in LOG_KEYS):
            return
        for name in ctx.metadata.topic_names():
            try:
                TopicConfigs(candidate, _overrides(ctx, name))
            except ConfigError as exc:
                raise ConfigError(exc.key, exc.value,
                                  f"{exc.allowed} (for topic {name})") from None

    def logs(changed: set[str]) -> None:
        if not changed & LOG_KEYS:
            return
        for part in ctx.replicas.hosted():
            overrides = _overrides(ctx, part.topic)
            ctx.replicas.update_log_config(part.tp, TopicConfigs(config, overrides).log_config())

    dynamic.on_change(logs, topic_configs)

    def cleaner(changed: set[str]) -> None:
        if "log.cleaner.threads" in changed & CLEANER_KEYS:
            ctx.replicas.logs.cleaner.resize(config["log.cleaner.threads"])

    dynamic.on_change(cleaner)

    if limits is not None:
        def connections(changed: set[str]) -> None:
            if changed & CONNECTION_KEYS or any(
                    split_listener(k)[1] in CONNECTION_KEYS for k in changed):
                limits.reconfigure(config)

        dynamic.on_change(connections)

    def client_metrics(changed: set[str]) -> None:
        if changed & CLIENT_METRICS_KEYS and ctx.client_telemetry is not None:
            ctx.client_telemetry.set_subscription(subscription_from_config(
                config["tierd.client.metrics.names"], config["tierd.client.metrics.interval.ms"]))

    dynamic.on_change(client_metrics)

    if ctx.cluster is not None:
        cluster = ctx.cluster

        def replication(changed: set[str]) -> None:
            if "unclean.leader.election.enable" in changed:
                cluster.controller.unclean_default_changed()
            if "num.replica.fetchers" in changed:
                fetcher_resize.resize(cluster.fetchers)

        dynamic.on_change(replication)

    for security in securities:
        if security.tls is not None:
            _install_tls(dynamic, security)

    if tiering is not None:
        svc = tiering.manager.svc

        def quotas(changed: set[str]) -> None:
            if changed & REMOTE_QUOTA_KEYS:
                svc.copy_quota.limit = config["remote.log.manager.copy.max.bytes.per.second"]
                svc.fetch_quota.limit = config["remote.log.manager.fetch.max.bytes.per.second"]

        dynamic.on_change(quotas)


def _overrides(ctx: BrokerContext, topic: str) -> dict[str, str]:
    """A topic's own configs (in cluster mode as this broker last read them)."""
    if ctx.cluster is not None and topic in ctx.cluster.topic_configs:
        return ctx.cluster.topic_configs[topic]
    info = ctx.metadata.topic(topic)
    return dict(info.configs) if info is not None else {}


def _install_tls(dynamic: DynamicBrokerConfigs, security: ListenerSecurity) -> None:
    tls = security.tls
    assert tls is not None
    prefix = f"{LISTENER_PREFIX}{security.listener.name.lower()}.ssl."

    def validate(candidate: BrokerConfig) -> None:
        settings = TlsSettings.of(candidate, security.listener.name)
        if settings != TlsSettings.of(dynamic.config, security.listener.name):
            build_server_context(settings)

    def apply(changed: set[str]) -> None:
        if any(k.startswith(prefix) for k in changed):
            tls.reconfigure(dynamic.config)

    dynamic.on_change(apply, validate)
