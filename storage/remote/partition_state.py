"""What the remote log manager keeps per tiered partition, its shared
services, and the small interface through which the read path finds a
partition (``TieredPartitions``, implemented by the RemoteLogManager)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from protocol.partition import TopicPartition
from storage.log.log import Log
from storage.remote.api import RemoteLogMetadataManager, RemoteStorageManager
from storage.remote.audit_result import AuditResult
from storage.remote.backoff import Backoff
from storage.remote.index_cache import RemoteIndexCache
from storage.remote.metrics import BusyTracker, RemoteMetrics
from storage.remote.quota import RateQuota
from storage.remote.types import TopicIdPartition


@dataclass(slots=True)
class TieredPartition:
    """One leader partition with tiering on.

    Attributes:
        tip: topic id, name and partition.
        log: the local log.
        last_stable_offset: the partition's LSO (copy never passes it).
        copy_backoff / expire_backoff: retry timing of the periodic tasks.
        copying: ids of copies in flight (not stale, even if STARTED long ago).
        cancelled: leadership lost or partition deleted; tasks stop at the
            next checkpoint.
        ready: the metadata manager caught up for this partition and the
            log's tiered state was restored from it.
    """

    tip: TopicIdPartition
    log: Log
    last_stable_offset: Callable[[], int]
    copy_backoff: Backoff
    expire_backoff: Backoff
    copying: set[uuid.UUID] = field(default_factory=set)
    cancelled: bool = False
    ready: bool = False
    # The last audit of the remote objects (storage.remote.audit), and when the
    # next is due (svc.clock() units; 0 = schedule one interval from now).
    audit: AuditResult | None = None
    next_audit: float = 0.0


@dataclass(slots=True)
class RemoteServices:
    """Everything the copy, expiration and read paths share.

    The three limiters are KIP-405's thread pools: each bounds how many
    blocking storage calls of its kind run at once in worker threads.
    """

    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    index_cache: RemoteIndexCache
    metrics: RemoteMetrics
    node_id: int
    clock: Callable[[], int]
    copier_limiter: trio.CapacityLimiter
    expiration_limiter: trio.CapacityLimiter
    reader_limiter: trio.CapacityLimiter
    reader_busy: BusyTracker
    tasks_busy: BusyTracker
    reader_max_pending: int
    copy_quota: RateQuota
    fetch_quota: RateQuota
    # Reads of remote .log bytes (``storage.remote.chunk_cache``); None: straight to rsm.
    chunks: Any = None
    # Runs copies (``storage.remote.copy_process``); None: rsm in a worker thread.
    copier: Any = None


class TieredPartitions(Protocol):
    """The partitions tiered on this broker, as the read path and the remote
    lookups see them. The RemoteLogManager owns them (it starts, restores and
    stops them); readers only ask."""

    def leader(self, tp: TopicPartition) -> TieredPartition | None:
        """The partition if this broker leads it with tiering on (ready or not)."""
        ...

    def tiered_here(self, tp: TopicPartition) -> bool:
        """Whether this broker leads or follows ``tp`` with tiering on."""
        ...

    async def readable(self, tp: TopicPartition) -> TieredPartition:
        """The partition, ready for remote reads (a leader's, or a follower's view).

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if the partition is not tiered
                here, KAFKA_STORAGE_ERROR if its metadata is not ready.
        """
        ...
