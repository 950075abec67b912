"""Assembles the broker from its parts and runs it until a signal arrives.

Startup order: metadata store (cluster id, topics) -> logs (recovery) and
leadership of every partition -> metrics endpoint -> tiering (replays
__remote_log_metadata) -> group coordinator (replays __consumer_offsets) ->
transaction coordinator (replays __transaction_state) -> TCP listener. In
cluster mode the coordinators start empty and load the partitions of their
internal topics as LeaderAndIsr makes this broker their leader.
Shutdown on SIGTERM/SIGINT: stop accepting, cancel connections, flush and
checkpoint every log, write the clean-shutdown marker.
"""

from __future__ import annotations

import gc
import signal
import sys

import structlog
import trio

from broker import dynamic_apply, gc_freeze, loop_monitor
from broker.client_telemetry import ClientTelemetry, subscription_from_config
from broker.context import BrokerContext
from broker.coordinator import GroupCoordinator
from broker.dynamic_config import (
    DynamicBrokerConfigs,
    LocalDynamicConfigStore,
    ZkDynamicConfigStore,
)
from broker.features import ClusterFeatures, LocalFeatureStore
from broker.group_configs import GroupConfigs, LocalGroupConfigStore, ZkGroupConfigStore
from broker.metrics import BrokerMetrics
from broker.security import build_listener_security
from broker.security.acl_store import build_acl_store
from broker.security.client import build_peer_connector
from broker.security.limits import ConnectionLimits
from broker.security.quotas import ClientQuotas, LocalQuotaStore, ZkQuotaStore
from broker.security.scram import LocalCredentialStore, ZkCredentialStore
from broker.server import serve
from broker.tiering import build_tiering, wire_cluster
from broker.transactions import TransactionCoordinator
from broker.transactions.markers import MarkerWriter
from broker.transactions.verifier import PartitionVerifier
from config import BrokerConfig
from replication.cluster import controlled_shutdown, open_cluster_node
from replication.local_admin import SingleNode, open_single_node
from replication.metadata_cache import BrokerEndpoint
from replication.peer import Connector
from replication.replica_manager import ReplicaManager
from replication.zk_features import ZkFeatureStore

log = structlog.get_logger(__name__)


class ListenError(Exception):
    """The listener address cannot be bound (in use, not local, no permission)."""


def _metrics(replicas: ReplicaManager) -> BrokerMetrics:
    metrics = BrokerMetrics()
    metrics.add_log_sizes(lambda: [(part.topic, part.index, part.log.size)
                                   for part in replicas.hosted()])
    metrics.registry.register(replicas.logs.cleaner)
    return metrics


def build(config: BrokerConfig) -> tuple[BrokerContext, SingleNode]:
    """Open the metadata store and every log (recovery happens here)."""
    node = open_single_node(config)
    replicas = node.replicas
    groups = GroupCoordinator(config, node.internal.offsets)
    markers = MarkerWriter(config["node.id"], replicas, node.metadata,
                           config["request.timeout.ms"])
    transactions = TransactionCoordinator(config, node.internal.transactions, groups, markers,
                                          node.admin.allocate_producer_id)
    ctx = BrokerContext(config, node.metadata, replicas, node.admin, _metrics(replicas),
                        config["node.id"], groups, transactions,
                        txn_verifier=PartitionVerifier(config["node.id"], transactions,
                                                       node.metadata,
                                                       config["request.timeout.ms"]))
    return ctx, node


async def build_cluster(config: BrokerConfig, connector: Connector | None) -> BrokerContext:
    """Connect to ZooKeeper and open the logs of the topics it knows; the
    coordinators follow the leadership of their internal topics' partitions.
    ``connector`` secures every connection to another broker (None: plain TCP)."""
    node = await open_cluster_node(config, connector)
    groups = GroupCoordinator(config, node.internal.offsets, follow_leadership=True)
    markers = MarkerWriter(config["node.id"], node.replicas, node.metadata,
                           config["request.timeout.ms"], connector)
    transactions = TransactionCoordinator(config, node.internal.transactions, groups, markers,
                                          node.admin.allocate_producer_id,
                                          follow_leadership=True)
    node.on_leadership.extend([groups.on_leadership, transactions.on_leadership])
    verifier = PartitionVerifier(config["node.id"], transactions, node.metadata,
                                 config["request.timeout.ms"], connector)
    return BrokerContext(config, node.metadata, node.replicas, node.admin,
                         _metrics(node.replicas), config["node.id"], groups, transactions,
                         txn_verifier=verifier, cluster=node)


async def run(config: BrokerConfig) -> None:
    tiering = None
    node: SingleNode | None = None
    if config["zookeeper.connect"]:
        # The inter-broker listener's security, from the client side: for
        # every connection to another broker (controller, fetchers, markers).
        connector = build_peer_connector(config)
        ctx = await build_cluster(config, connector)
        assert ctx.cluster is not None
        # Dynamic broker configs need ZooKeeper: the logs opened above get
        # them when the appliers are installed below.
        dynamic = DynamicBrokerConfigs(config, ZkDynamicConfigStore(ctx.cluster.zk), True)
        loaded = await dynamic.load()
        tiering = build_tiering(config, ctx.admin, ctx.metadata, ctx.replicas,
                                ctx.metrics.registry, cluster=True, connector=connector)
        if tiering is not None:
            wire_cluster(tiering, ctx.cluster)
    else:
        dynamic = DynamicBrokerConfigs(config, LocalDynamicConfigStore(config.log_dir), False)
        loaded = await dynamic.load()
        ctx, node = build(config)
        tiering = build_tiering(config, node.admin, node.metadata, node.replicas,
                                ctx.metrics.registry)
    loop_monitor.install(config["tierd.event.loop.stall.ms"], ctx.metrics.registry)
    metrics_port = config["tierd.metrics.port"]
    metrics_url = "off"
    if metrics_port >= 0:
        bound = ctx.metrics.serve(config["tierd.metrics.host"], metrics_port)
        metrics_url = f"http://{config['tierd.metrics.host']}:{bound}/metrics"
    ctx.credentials = (ZkCredentialStore(ctx.cluster.zk) if ctx.cluster is not None
                       else LocalCredentialStore(config.log_dir))
    client_quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
    ctx.quotas = (ZkQuotaStore(ctx.cluster.zk, client_quotas) if ctx.cluster is not None
                  else LocalQuotaStore(config.log_dir, client_quotas))
    ctx.acls = await build_acl_store(config, ctx.cluster)
    ctx.features = ClusterFeatures.of(config, ZkFeatureStore(ctx.cluster.zk)
                                      if ctx.cluster is not None
                                      else LocalFeatureStore(config.log_dir))
    await ctx.features.load()
    ctx.group_configs = GroupConfigs(config, ZkGroupConfigStore(ctx.cluster.zk)
                                     if ctx.cluster is not None
                                     else LocalGroupConfigStore(config.log_dir))
    await ctx.group_configs.load()
    if ctx.groups is not None:
        ctx.groups.consumer.group_config = ctx.group_configs.value
    ctx.client_telemetry = client_telemetry = ClientTelemetry(
        subscription_from_config(config["tierd.client.metrics.names"],
                                 config["tierd.client.metrics.interval.ms"]),
        config["telemetry.max.bytes"], ctx.metrics.registry)
    limits = ConnectionLimits(config)
    securities = [build_listener_security(config, listener, ctx.metrics, ctx.credentials,
                                          limits)
                  for listener in config.listeners.bind]
    ctx.dynamic = dynamic
    dynamic_apply.install(dynamic, ctx, limits, securities, tiering)
    dynamic.tell(loaded)
    # What start-up built (modules, the protocol's schemas, the recovered
    # logs) lives as long as the process: frozen, it is left out of every full
    # garbage collection, each of which would otherwise walk it again.
    gc.collect()
    gc.freeze()
    log.info("start-up objects frozen for the garbage collector", objects=gc.get_freeze_count())
    gc_freeze.install(ctx.metrics.registry)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctx.replicas.run)
            nursery.start_soon(ctx.quotas.run)
            nursery.start_soon(dynamic.run)
            nursery.start_soon(ctx.features.run)
            nursery.start_soon(ctx.group_configs.run)
            if ctx.acls is not None:
                nursery.start_soon(ctx.acls.run)
            nursery.start_soon(ctx.metrics.run_replication, ctx.replicas, ctx.cluster)
            nursery.start_soon(ctx.metrics.run_log_sizes)
            nursery.start_soon(client_telemetry.run)
            if tiering is not None and ctx.cluster is None:
                await nursery.start(tiering.run)
            if ctx.groups is not None:
                await nursery.start(ctx.groups.run)
            if ctx.transactions is not None:
                await nursery.start(ctx.transactions.run)
            ports: dict[str, int] = {}
            for security in securities:
                listener = security.listener
                try:
                    sockets = await nursery.start(serve, ctx, security)
                except OSError as exc:
                    raise ListenError(f"cannot listen on {listener.url()}: "
                                      f"{exc.strerror}") from None
                ports[listener.name] = sockets[0].socket.getsockname()[1]
            endpoint = BrokerEndpoint.advertise(ctx.node_id, config.listeners, ports,
                                                config["broker.rack"])
            if node is not None:
                node.admin.set_endpoint(endpoint)
            if ctx.cluster is not None:
                await nursery.start(ctx.cluster.run, endpoint)
                if tiering is not None:
                    nursery.start_soon(tiering.run)
            urls = [b.url(ports[b.name]) for b in config.listeners.bind]
            first = config.listeners.bind[0]
            log.info("tierd listening", listeners=urls, node_id=ctx.node_id,
                     cluster_id=ctx.cluster_id, log_dir=config.log_dir, metrics=metrics_url)
            print(f"tierd listening on {first.host}:{ports[first.name]} (metrics: {metrics_url})"
                  + (f" listeners: {' '.join(urls)}" if len(urls) > 1 else ""),
                  file=sys.stderr, flush=True)
            async for signum in signals:
                log.info("shutting down", signal=signal.Signals(signum).name)
                if ctx.cluster is not None and config["controlled.shutdown.enable"]:
                    await controlled_shutdown(ctx.cluster)
                nursery.cancel_scope.cancel()
                break
    with trio.CancelScope(shield=True):
        if tiering is not None:
            await tiering.close()
        await ctx.replicas.shutdown()
        if ctx.cluster is not None:
            await ctx.cluster.zk.close()
    log.info("tierd stopped")
