"""Tiered-storage metrics with the KIP-405 / KIP-963 names.

Counters carry Kafka's ``...PerSec`` names (Prometheus adds ``_total``; a
rate() over them is Kafka's per-second meter), incremented where the event
happens. The gauges are ``storage.remote.gauges``'s: computed on the event
loop into a snapshot that the scrape reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

# The window over which a pool's idle percentage is averaged: Kafka's
# metrics.sample.window.ms (30 s). Sampled by the gauge snapshot task, so a
# scrape at any rate (or none) sees the same figure.
IDLE_WINDOW_S = 30.0


class BusyTracker:
    """Busy time of a pool of ``size`` workers, and its idle percentage over
    the last ``window_s`` seconds.

    Concurrency: ``start`` and ``stop`` are called from worker threads and
    trio tasks alike (under a lock); ``idle_percent`` only by the gauge
    snapshot task (``storage.remote.gauges``), which owns the samples.
    """

    def __init__(self, size: int, window_s: float = IDLE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._busy_s = 0.0  # finished busy time, since creation
        self._active: dict[int, float] = {}
        self._next = 0
        # (time, busy seconds at that time), oldest first, reaching back one window.
        self._samples: deque[tuple[float, float]] = deque([(clock(), 0.0)])

    def start(self) -> int:
        with self._lock:
            token = self._next
            self._next += 1
            self._active[token] = self._clock()
            return token

    def stop(self, token: int) -> None:
        with self._lock:
            started = self._active.pop(token, None)
            if started is not None:
                self._busy_s += self._clock() - started

    def idle_percent(self) -> float:
        """Idle percentage (0..100) over the last ``window_s`` (less just after
        creation); takes a sample, and never resets the busy time."""
        with self._lock:
            now = self._clock()
            busy = self._busy_s + sum(now - s for s in self._active.values())
        samples = self._samples
        samples.append((now, busy))
        while len(samples) > 1 and samples[1][0] <= now - self.window_s:
            samples.popleft()
        then, busy_then = samples[0]
        elapsed = max(now - then, 1e-9) * self.size
        return max(0.0, min(100.0, 100.0 * (1 - (busy - busy_then) / elapsed)))


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
        # Remote reads that got bytes from the store but could not decode them
        # (storage.remote.codec_storage): a failed GCM tag or zstd frame, or a
        # data key whose key pair is missing or wrong. Also in fetch_errors.
        self.fetch_decode_errors = Counter(
            "RemoteFetchDecodeErrorsPerSec",
            "Remote reads of compressed/encrypted segments that failed to decode "
            "(tampered or corrupt chunk, missing or wrong key pair)", ["topic"], registry=r)
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
        # KIP-956 quotas: how long a copy waited for the copy quota, and how
        # far over its quota the broker was when a remote read was refused
        # (the fetch is answered without it and the client asks again).
        throttle_buckets = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
        self.copy_throttle = Histogram(
            "RemoteCopyThrottleTimeSeconds", "Time a segment copy waited for "
            "remote.log.manager.copy.max.bytes.per.second", buckets=throttle_buckets,
            registry=r)
        self.fetch_throttle = Histogram(
            "RemoteFetchThrottleTimeSeconds", "Throttle time of a remote read refused by "
            "remote.log.manager.fetch.max.bytes.per.second", buckets=throttle_buckets,
            registry=r)
