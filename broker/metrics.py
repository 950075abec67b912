"""Prometheus metrics of the broker (served by prometheus-client's HTTP server).

Names carry the ``tierd_`` prefix; labels are bounded (api names, error
code names, topic names of existing topics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from replication.metrics import SNAPSHOT_INTERVAL_S, ReplicationCollector

if TYPE_CHECKING:
    from replication.cluster import ClusterNode
    from replication.replica_manager import ReplicaManager


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._log_sizes: _LogSizeCollector | None = None
        self.requests = Counter("tierd_requests", "Requests handled", ["api", "version"], registry=r)
        self.latency = Histogram(
            "tierd_request_latency_seconds", "Request handling time", ["api"], registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.bytes_in = Counter("tierd_bytes_in", "Record bytes produced", ["topic"], registry=r)
        self.bytes_out = Counter("tierd_bytes_out", "Record bytes fetched", ["topic"], registry=r)
        self.messages_in = Counter("tierd_messages_in", "Records produced", ["topic"], registry=r)
        self.error_responses = Counter("tierd_error_responses", "Error codes answered",
                                       ["api", "error"], registry=r)
        self.protocol_errors = Counter("tierd_protocol_errors",
                                       "Connections closed for bad input", ["reason"], registry=r)
        self.sendfile_bytes = Counter(
            "tierd_fetch_sendfile_bytes",
            "Fetch response bytes sent from segment files with sendfile (tierd.fetch.zero.copy)",
            registry=r)
        self.fetch_warmed_bytes = Counter(
            "tierd_fetch_page_cache_miss_bytes",
            "Fetch response bytes not in the page cache, read in by a worker thread before "
            "being sent (never on the event loop)", registry=r)
        self.connections = Gauge("tierd_open_connections", "Open client connections", registry=r)
        self.connections_total = Counter("tierd_connections", "Accepted connections", registry=r)
        # Kafka's successful-/failed-authentication-total, per listener and
        # mechanism (TLS for the handshake and client certificate).
        self.authentications = Counter(
            "tierd_successful_authentication", "Connections authenticated",
            ["listener", "mechanism"], registry=r)
        self.failed_authentications = Counter(
            "tierd_failed_authentication", "Failed TLS handshakes and SASL authentications",
            ["listener", "mechanism", "reason"], registry=r)
        self.setup_timeouts = Counter(
            "tierd_connection_setup_timeouts",
            "Connections closed for not finishing TLS and SASL in tierd.connection.setup.timeout.ms",
            ["listener"], registry=r)
        self.connections_refused = Counter(
            "tierd_connections_refused", "Connections closed at once by a connection limit",
            ["listener", "reason"], registry=r)
        self.idle_closed = Counter(
            "tierd_idle_connections_closed",
            "Connections closed after connections.max.idle.ms without a request",
            ["listener"], registry=r)
        self.throttled = Counter(
            "tierd_quota_throttled_responses", "Responses throttled by a client quota",
            ["quota"], registry=r)
        self.throttle_seconds = Counter(
            "tierd_quota_throttle_seconds", "Throttle time given to clients over a quota",
            ["quota"], registry=r)
        self.reauthentications = Counter(
            "tierd_reauthentications", "SASL sessions renewed by re-authentication (KIP-368)",
            ["listener", "mechanism"], registry=r)
        self.expired_sessions = Counter(
            "tierd_expired_sessions",
            "Connections closed for using a SASL session past connections.max.reauth.ms",
            ["listener"], registry=r)
        self.authorization_denied = Counter(
            "tierd_authorization_denied", "Operations refused by the ACL authorizer",
            ["operation", "resource_type"], registry=r)
        self.tls_reload_errors = Counter(
            "tierd_tls_reload_errors", "Changed TLS key files that could not be loaded",
            ["listener"], registry=r)

    def add_log_sizes(self, sizes: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        """Export per-partition log sizes: ``sizes()`` read on the event loop every
        ``SNAPSHOT_INTERVAL_S`` (``run_log_sizes``), scrapes served from that copy."""
        self._log_sizes = _LogSizeCollector(sizes)
        self._log_sizes.snapshot()
        self.registry.register(self._log_sizes)

    async def run_log_sizes(self, interval_s: float = SNAPSHOT_INTERVAL_S) -> None:
        """Keep the log sizes' snapshot fresh until cancelled (on the event loop)."""
        while True:
            await trio.sleep(interval_s)
            if self._log_sizes is not None:
                self._log_sizes.snapshot()

    async def run_replication(self, replicas: ReplicaManager,
                              cluster: ClusterNode | None) -> None:
        """Export the replication metrics (Kafka's names, see ``replication.metrics``)
        and keep their gauges' snapshot fresh until cancelled.

        Concurrency: run on the event loop, where the snapshot is taken.
        """
        collector = (ReplicationCollector(replicas, None) if cluster is None else
                     ReplicationCollector(replicas, cluster.controller, cluster.fetchers.states))
        collector.snapshot()
        self.registry.register(collector)
        await collector.run()

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: it is asked several times
        per request, and prometheus_client validates and locks on every call.
        (tierd never removes a label set, so a remembered child stays the one
        exported.)"""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP endpoint in a daemon thread; returns the bound port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)

    def error(self, api: str, code: int) -> None:
        from protocol.errors import ErrorCode

        try:
            name = ErrorCode(code).name
        except ValueError:
            name = str(code)
        self.error_responses.labels(api, name).inc()


class _LogSizeCollector(Collector):
    """Per-partition log sizes, served from a copy taken on the event loop (the
    scrape runs in the HTTP thread, which must not walk the partitions)."""

    def __init__(self, sizes: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        self._sizes = sizes
        self._copy: list[tuple[str, int, int]] = []

    def snapshot(self) -> None:
        self._copy = list(self._sizes())

    def collect(self):  # type: ignore[no-untyped-def]
        family = GaugeMetricFamily("tierd_log_size_bytes", "Local log size per partition",
                                   labels=["topic", "partition"])
        for topic, partition, size in self._copy:
            family.add_metric([topic, str(partition)], size)
        yield family
