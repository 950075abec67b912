"""Assembles the broker from its parts and runs it until a signal arrives.

Startup order: metadata store (cluster id, topics) -> logs (recovery) ->
metrics endpoint -> group coordinator (replays __consumer_offsets) ->
transaction coordinator (replays __transaction_state) -> TCP listener.
Shutdown on SIGTERM/SIGINT: stop accepting, cancel connections, flush and
checkpoint every log, write the clean-shutdown marker.
"""

from __future__ import annotations

import signal
import sys

import structlog
import trio

from broker.context import BrokerContext
from broker.coordinator import GroupCoordinator
from broker.metrics import BrokerMetrics
from broker.server import serve
from broker.tiering import build_tiering
from broker.transactions import TransactionCoordinator
from config import BrokerConfig
from replication.metadata import LocalMetadataStore
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager

log = structlog.get_logger(__name__)


class ListenError(Exception):
    """The listener address cannot be bound (in use, not local, no permission)."""


def build(config: BrokerConfig) -> BrokerContext:
    """Open the metadata store and every log (recovery happens here)."""
    store = LocalMetadataStore(config.log_dir, config["node.id"], config["cluster.id"])
    logs = LogManager(config)
    replicas = ReplicaManager(config, store, logs)
    replicas.load()
    metrics = BrokerMetrics()
    metrics.add_log_sizes(lambda: [(t, p, part.log.size)
                                   for (t, p), part in list(replicas.partitions.items())])
    host, port = config.advertised
    groups = GroupCoordinator(config, replicas)
    return BrokerContext(config, store, replicas, metrics, config["node.id"], host, port,
                         groups, TransactionCoordinator(config, replicas, groups))


async def run(config: BrokerConfig) -> None:
    ctx = build(config)
    tiering = build_tiering(config, ctx.replicas, ctx.metrics.registry)
    metrics_port = config["tierd.metrics.port"]
    metrics_url = "off"
    if metrics_port >= 0:
        bound = ctx.metrics.serve(config["tierd.metrics.host"], metrics_port)
        metrics_url = f"http://{config['tierd.metrics.host']}:{bound}/metrics"
    host, port = config.listener
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctx.replicas.run)
            if tiering is not None:
                await nursery.start(tiering.run)
            if ctx.groups is not None:
                await nursery.start(ctx.groups.run)
            if ctx.transactions is not None:
                await nursery.start(ctx.transactions.run)
            try:
                listeners = await nursery.start(serve, ctx, host, port)
            except OSError as exc:
                raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
            bound_port = listeners[0].socket.getsockname()[1]
            if ctx.port == 0:
                ctx.port = bound_port
            log.info("tierd listening", host=host, port=bound_port, node_id=ctx.node_id,
                     cluster_id=ctx.cluster_id, log_dir=config.log_dir, metrics=metrics_url)
            print(f"tierd listening on {host}:{bound_port} (metrics: {metrics_url})",
                  file=sys.stderr, flush=True)
            async for signum in signals:
                log.info("shutting down", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    with trio.CancelScope(shield=True):
        if tiering is not None:
            await tiering.close()
        await ctx.replicas.shutdown()
    log.info("tierd stopped")
