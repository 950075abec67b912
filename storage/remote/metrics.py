"""Tiered-storage metrics with the KIP-405 / KIP-963 names.

Counters carry Kafka's ``...PerSec`` names (Prometheus adds ``_total``; a
rate() over them is Kafka's per-second meter). Gauges are computed at scrape
time from the live state, so they can never drift from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class BusyTracker:
    """Fraction of time a pool of ``size`` workers spent idle since the last scrape.

    Concurrency: ``busy`` is entered from worker threads and trio tasks alike.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._busy_s = 0.0
        self._active: dict[int, float] = {}
        self._window_start = time.monotonic()
        self._next = 0

    def start(self) -> int:
        with self._lock:
            token = self._next
            self._next += 1
            self._active[token] = time.monotonic()
            return token

    def stop(self, token: int) -> None:
        with self._lock:
            started = self._active.pop(token, None)
            if started is not None:
                self._busy_s += time.monotonic() - max(started, self._window_start)

    def idle_percent(self) -> float:
        """Idle percentage over the window since the previous call (0..100)."""
        with self._lock:
            now = time.monotonic()
            busy = self._busy_s + sum(now - max(s, self._window_start)
                                      for s in self._active.values())
            elapsed = max(now - self._window_start, 1e-9) * self.size
            self._busy_s = 0.0
            self._window_start = now
            self._active = {k: now for k in self._active}
        return max(0.0, min(100.0, 100.0 * (1 - busy / elapsed)))


class RemoteMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.copy_bytes = Counter("RemoteCopyBytesPerSec", "Bytes copied to remote storage",
                                  ["topic"], registry=r)
        self.copy_requests = Counter("RemoteCopyRequestsPerSec", "Segment copies started",
                                     ["topic"], registry=r)
        self.copy_errors = Counter("RemoteCopyErrorsPerSec", "Failed segment copies",
                                   ["topic"], registry=r)
        self.fetch_bytes = Counter("RemoteFetchBytesPerSec", "Bytes read from remote storage",
                                   ["topic"], registry=r)
        self.fetch_requests = Counter("RemoteFetchRequestsPerSec", "Remote reads", ["topic"],
                                      registry=r)
        self.fetch_errors = Counter("RemoteFetchErrorsPerSec", "Failed remote reads", ["topic"],
                                    registry=r)
        self.delete_requests = Counter("RemoteDeleteRequestsPerSec", "Remote segment deletions",
                                       ["topic"], registry=r)
        # Time of one remote read (queue wait in the reader pool included), as
        # Kafka's RemoteLogReaderFetchRateAndTimeMs, in seconds as Prometheus prefers.
        self.fetch_latency = Histogram(
            "RemoteLogReaderFetchTimeSeconds", "Time of a remote read, queueing included",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r)
        self.audit_runs = Counter("RemoteAuditRunsPerSec",
                                  "Audits of a partition's remote objects against its metadata",
                                  ["topic"], registry=r)
        self.audit_errors = Counter("RemoteAuditErrorsPerSec",
                                    "Audits that could not list the remote tier", ["topic"],
                                    registry=r)
        self.delete_errors = Counter("RemoteDeleteErrorsPerSec", "Failed remote deletions",
                                     ["topic"], registry=r)
        self._registry = r

    def add_gauges(self, per_partition: Callable[[], Iterable[tuple[str, int, dict[str, float]]]],
                   broker: Callable[[], dict[str, float]]) -> None:
        """Register scrape-time gauges (per partition and broker-wide)."""
        self._registry.register(_GaugeCollector(per_partition, broker))


_PARTITION_GAUGES = {
    "RemoteLogSizeBytes": "Bytes of the partition in remote storage",
    "RemoteLogMetadataCount": "Remote segments known for the partition",
    "RemoteCopyLagBytes": "Bytes of closed local segments not yet tiered",
    "RemoteCopyLagSegments": "Closed local segments not yet tiered",
    "RemoteOrphanObjects": "Remote objects of no live segment, at the last audit (leader)",
    "RemoteOrphanBytes": "Bytes of those orphan objects, at the last audit (leader)",
    "RemoteMissingSegments": "Finished segments without a .log object, at the last audit",
    "RemoteSizeMismatchSegments": "Finished segments whose .log size differs from the "
                                  "metadata's, at the last audit",
}
_BROKER_GAUGES = {
    "RemoteLogReaderTaskQueueSize": "Remote reads waiting for a reader thread",
    "RemoteLogReaderAvgIdlePercent": "Idle percentage of the remote reader pool",
    "RemoteLogManagerTasksAvgIdlePercent": "Idle percentage of the copier/expiration pools",
    "RemoteChunkCacheBytes": "Bytes of remote segment chunks cached in memory",
    "RemoteChunkDiskCacheBytes": "Bytes of remote segment chunks in the disk tier",
}
# Broker-wide counts kept by the chunk cache, exposed as counters (``_total``).
_BROKER_COUNTERS = {
    "RemoteChunkCacheHits": "Remote chunk reads served from the cache (or a fetch in flight)",
    "RemoteChunkCacheMisses": "Remote chunk reads that fetched the chunk from the store",
    "RemoteChunkCacheEvictions": "Chunks dropped from the cache by its byte bound",
    "RemoteChunkPrefetches": "Chunks fetched ahead of sequential remote reads",
    "RemoteChunkFetchBytes": "Bytes of chunks fetched from the store",
    "RemoteChunkDiskCacheHits": "Chunk reads served from the disk tier instead of the store",
    "RemoteChunkDiskCacheEvictions": "Chunks dropped from the disk tier by its byte bound",
}


def chunk_cache_metrics(chunks: Any) -> dict[str, float]:
    """The chunk cache's figures for the broker-wide metrics (none without one)."""
    if chunks is None:
        return {}
    s = chunks.stats
    return {"RemoteChunkCacheBytes": float(chunks.cached_bytes),
            "RemoteChunkCacheHits": float(s.hits), "RemoteChunkCacheMisses": float(s.misses),
            "RemoteChunkCacheEvictions": float(s.evictions),
            "RemoteChunkPrefetches": float(s.prefetches),
            "RemoteChunkFetchBytes": float(s.fetch_bytes),
            **({} if chunks.disk is None else {
                "RemoteChunkDiskCacheBytes": float(chunks.disk.cached_bytes),
                "RemoteChunkDiskCacheHits": float(chunks.disk.stats.hits),
                "RemoteChunkDiskCacheEvictions": float(chunks.disk.stats.evictions)})}


class _GaugeCollector(Collector):
    def __init__(self, per_partition: Callable[[], Iterable[tuple[str, int, dict[str, float]]]],
                 broker: Callable[[], dict[str, float]]) -> None:
        self._per_partition = per_partition
        self._broker = broker

    def collect(self):  # type: ignore[no-untyped-def]
        families = {name: GaugeMetricFamily(name, doc, labels=["topic", "partition"])
                    for name, doc in _PARTITION_GAUGES.items()}
        for topic, partition, values in self._per_partition():
            for name, value in values.items():
                families[name].add_metric([topic, str(partition)], value)
        yield from families.values()
        values = self._broker()
        for name, doc in _BROKER_GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=values.get(name, 0.0))
        for name, doc in _BROKER_COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=values.get(name, 0.0))
