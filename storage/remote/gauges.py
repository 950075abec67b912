"""Tiered-storage gauges with the KIP-405 / KIP-963 names, per partition and broker-wide.

Theory of operation
-------------------
The gauges are derived from state the event loop mutates (the metadata
manager's caches, the leader partitions, trio's limiters, the chunk cache),
so they are computed on the event loop, every ``SNAPSHOT_INTERVAL_S``, into
an immutable ``RemoteGaugeSnapshot``; ``collect``, called in
prometheus_client's HTTP thread, only reads the latest snapshot, replaced
whole. This is ``replication.metrics.ReplicationCollector``'s model.

The pools' idle percentages are averaged over ``BusyTracker``'s fixed window
and sampled by the snapshot task alone, so they do not depend on how often
(or whether) anyone scrapes.

Concurrency: ``snapshot`` and ``run`` on the event loop (the walk over the
partitions is paced, see ``storage.pace``); ``collect`` in any thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.partition import TopicPartition
from storage.pace import Pacer
from storage.remote.copier import copy_candidates
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.types import RemoteLogSegmentState

# How often the gauges are recomputed on the event loop: a Prometheus scrape
# (15 s by default) never sees values older than this, and one paced pass over
# the tiered partitions' cached metadata a second costs little next to serving them.
SNAPSHOT_INTERVAL_S = 1.0

_PARTITION_GAUGES = {
    "RemoteLogSizeBytes": "Bytes of the partition in remote storage",
    "RemoteLogMetadataCount": "Remote segments known for the partition",
    "RemoteCopyLagBytes": "Bytes of closed local segments not yet tiered",
    "RemoteCopyLagSegments": "Closed local segments not yet tiered",
    "RemoteDeleteLagBytes": "Bytes of remote segments to delete and not yet deleted: being "
                            "deleted, or wholly below the log start",
    "RemoteDeleteLagSegments": "Remote segments to delete and not yet deleted",
    "RemoteLogSizeComputationTime": "Milliseconds taken to compute RemoteLogSizeBytes",
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


@dataclass(frozen=True, slots=True)
class PartitionGauges:
    topic: str
    partition: int
    values: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class RemoteGaugeSnapshot:
    """Every tiered-storage gauge at one instant (empty before the first)."""

    partitions: tuple[PartitionGauges, ...] = ()
    broker: tuple[tuple[str, float], ...] = ()


def partition_gauges(p: TieredPartition, rlmm: Any) -> dict[str, float]:
    """One ready leader partition's gauges (the audit's only once it has run)."""
    started = time.perf_counter()
    segments = list(rlmm.list_remote_log_segments(p.tip))
    finished = [m for m in segments if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    size = sum(m.segment_size_in_bytes for m in finished)
    size_ms = (time.perf_counter() - started) * 1000
    lag = copy_candidates(p) if not p.cancelled else []
    log_start = p.log.log_start_offset
    doomed = [m for m in segments if m.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
              or (m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                  and m.end_offset < log_start)]
    gauges = {
        "RemoteLogSizeBytes": float(size),
        "RemoteLogMetadataCount": float(len(segments)),
        "RemoteCopyLagBytes": float(sum(s.size for s in lag)),
        "RemoteCopyLagSegments": float(len(lag)),
        "RemoteDeleteLagBytes": float(sum(m.segment_size_in_bytes for m in doomed)),
        "RemoteDeleteLagSegments": float(len(doomed)),
        "RemoteLogSizeComputationTime": size_ms,
    }
    if p.audit is not None:
        gauges.update({
            "RemoteOrphanObjects": float(p.audit.orphan_objects),
            "RemoteOrphanBytes": float(p.audit.orphan_bytes),
            "RemoteMissingSegments": float(p.audit.missing_segments),
            "RemoteSizeMismatchSegments": float(p.audit.size_mismatches),
        })
    return gauges


def broker_gauges(svc: RemoteServices) -> dict[str, float]:
    """The pools' and the chunk cache's figures; samples the idle windows."""
    return {
        "RemoteLogReaderTaskQueueSize": float(svc.reader_limiter.statistics().tasks_waiting),
        "RemoteLogReaderAvgIdlePercent": svc.reader_busy.idle_percent(),
        "RemoteLogManagerTasksAvgIdlePercent": svc.tasks_busy.idle_percent(),
        **chunk_cache_metrics(svc.chunks),
    }


def chunk_cache_metrics(chunks: Any) -> dict[str, float]:
    """The chunk cache's figures for the broker-wide metrics (none without one)."""
    if chunks is None:
        return {}
    s = chunks.stats_copy()
    return {"RemoteChunkCacheBytes": float(chunks.cached_bytes),
            "RemoteChunkCacheHits": float(s.hits), "RemoteChunkCacheMisses": float(s.misses),
            "RemoteChunkCacheEvictions": float(s.evictions),
            "RemoteChunkPrefetches": float(s.prefetches),
            "RemoteChunkFetchBytes": float(s.fetch_bytes),
            **({} if chunks.disk is None else {
                "RemoteChunkDiskCacheBytes": float(chunks.disk.cached_bytes),
                "RemoteChunkDiskCacheHits": float(chunks.disk.stats.hits),
                "RemoteChunkDiskCacheEvictions": float(chunks.disk.stats.evictions)})}


class RemoteGaugeCollector(Collector):
    """Exports the tiered-storage gauges from the latest snapshot.

    Args:
        partitions: the RemoteLogManager's leader partitions (read, never changed).
        services: the pools, caches and metadata manager.
    """

    def __init__(self, partitions: Mapping[TopicPartition, TieredPartition],
                 services: RemoteServices) -> None:
        self.partitions = partitions
        self.svc = services
        self.latest = RemoteGaugeSnapshot()

    async def snapshot(self) -> None:
        """Recompute the gauges (event loop only); other tasks run between partitions."""
        pacer = Pacer()
        rows = []
        for (topic, partition), p in list(self.partitions.items()):
            await pacer.tick()
            if p.ready:
                values = partition_gauges(p, self.svc.rlmm)
                rows.append(PartitionGauges(topic, partition, tuple(values.items())))
        self.latest = RemoteGaugeSnapshot(tuple(rows), tuple(broker_gauges(self.svc).items()))

    async def run(self, interval_s: float = SNAPSHOT_INTERVAL_S) -> None:
        """Snapshot the gauges every ``interval_s`` until cancelled."""
        while True:
            await self.snapshot()
            await trio.sleep(interval_s)

    def collect(self) -> Iterator[Metric]:
        latest = self.latest
        families = {name: GaugeMetricFamily(name, doc, labels=["topic", "partition"])
                    for name, doc in _PARTITION_GAUGES.items()}
        for row in latest.partitions:
            for name, value in row.values:
                families[name].add_metric([row.topic, str(row.partition)], value)
        yield from families.values()
        broker = dict(latest.broker)
        for name, doc in _BROKER_GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=broker.get(name, 0.0))
        for name, doc in _BROKER_COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=broker.get(name, 0.0))
