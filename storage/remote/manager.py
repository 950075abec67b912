"""RemoteLogManager: which partitions are tiered here, and their tiering tasks.

Theory of operation
-------------------
Every remote.log.manager.task.interval.ms the manager runs, for each leader
partition with tiering on, one cycle: copy eligible segments, then expire
remote segments. Each cycle follows Kafka's template: skip if the partition
was cancelled or its backoff has not elapsed; run; on success reset the
backoff; on a retriable storage error back off exponentially with jitter; on
anything else log it with its traceback, count it, and back off too, so a
poisoned partition never stops the others. Cycles of different partitions
run concurrently; the KIP's pools (copier, expiration, reader) are
``trio.CapacityLimiter``s around the blocking storage calls.

The manager owns the tiered partitions: leaders it runs tasks for, followers
whose tier boundary it follows, and removals of deleted or disabled
partitions' remote data. The read side only asks it for a partition
(``TieredPartitions``): remote record reads are the reader pool's
(``storage.remote.read_pool``), aborted-transaction and timestamp lookups
``storage.remote.lookups``'s, and the gauges ``storage.remote.gauges``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import trio

from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from storage.log.log import Log
from storage.remote.api import RemoteLogMetadataManager
from storage.remote.audit import audit_partition
from storage.remote.backoff import Backoff
from storage.remote.chunk_cache import ChunkCache
from storage.remote.copier import copy_segments
from storage.remote.expirer import expire_segments, sync_log_start
from storage.remote.index_cache import RemoteIndexCache
from storage.remote.lineage import highest_remote_offset, restore_remote_epochs
from storage.remote.metrics import BusyTracker, RemoteMetrics
from storage.remote.partition_state import RemoteServices, TieredPartition
from storage.remote.quota import RateQuota
from storage.remote.remover import PartitionRemover, Removal
from storage.remote.types import RemoteLogSegmentState, RemoteStorageError, TopicIdPartition

log = structlog.get_logger(__name__)


class RemovalPending(Exception):
    """Tiering of a partition waits for the removal of its old remote data."""


class RemoteLogManager:
    """Tiering tasks of this broker's partitions; implements ``TieredPartitions``.

    Concurrency: every method runs on the event loop.
    """

    def __init__(self, config: Any, services: RemoteServices) -> None:
        self.config = config
        self.svc = services
        self.partitions: dict[TopicPartition, TieredPartition] = {}
        self._wakeup = trio.Event()
        self.remover = PartitionRemover(services, self._topic_partition_removed)
        # Follower partitions with tiering on: (tip, log), by topic-partition.
        self.followers: dict[TopicPartition, tuple[TopicIdPartition, Log]] = {}
        # Read-only views of followed partitions, for consumers reading them.
        self._follower_views: dict[TopicPartition, TieredPartition] = {}
        # Called once a deleted partition's remote data is gone (the broker
        # clears its restart-safe record of the pending cleanup).
        self.on_partition_removed: Callable[[TopicIdPartition], Awaitable[None]] | None = None
        # In a cluster: whether a user partition's topic is deleted (its
        # remote data is removed by the leader of its metadata partition).
        self.topic_deleted: Callable[[TopicIdPartition], bool] | None = None

    # -- partitions ----------------------------------------------------------------

    def start_partition(self, tip: TopicIdPartition, lg: Log,
                        last_stable_offset: Callable[[], int]) -> TieredPartition:
        """Begin tiering tasks for a leader partition; restores state from metadata."""
        tp = (tip.topic, tip.partition)
        existing = self.partitions.get(tp)
        if existing is not None and existing.tip == tip:
            return existing
        p = self._new_partition(tip, lg, last_stable_offset)
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.partitions[tp] = p
        self.wake()
        return p

    def _new_partition(self, tip: TopicIdPartition, lg: Log,
                       last_stable_offset: Callable[[], int]) -> TieredPartition:
        cfg = self.config

        def backoff() -> Backoff:
            return Backoff(cfg["remote.log.manager.task.retry.backoff.ms"],
                           cfg["remote.log.manager.task.retry.backoff.max.ms"],
                           cfg["remote.log.manager.task.retry.jitter"])

        return TieredPartition(tip, lg, last_stable_offset, backoff(), backoff())

    def leader(self, tp: TopicPartition) -> TieredPartition | None:
        return self.partitions.get(tp)

    def tiered_here(self, tp: TopicPartition) -> bool:
        return tp in self.partitions or tp in self.followers

    async def readable(self, tp: TopicPartition) -> TieredPartition:
        """The partition as remote reads see it: a leader's, or a follower's
        (KIP-392: consumers of its rack read from it). A follower reads the
        tier through a view of its log that runs no task: it only waits for
        the metadata to catch up, and leaves the log's tiered state to the
        follower's own refresh.

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE if the partition is not tiered
                here, KAFKA_STORAGE_ERROR if its metadata is not ready.
        """
        p = self.partitions.get(tp)
        if p is not None:
            try:
                await self._ensure_ready(p)
            except Exception as exc:
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                    f"remote metadata not ready: {exc}") from None
            return p
        followed = self.followers.get(tp)
        if followed is None:
            raise KafkaApiError(ErrorCode.OFFSET_OUT_OF_RANGE, "partition is not tiered here")
        tip, lg = followed
        view = self._follower_views.get(tp)
        if view is None or view.tip != tip or view.log is not lg:
            view = self._new_partition(tip, lg, lambda: lg.end_offset)
            self._follower_views[tp] = view
        if not view.ready:
            try:
                await self.svc.rlmm.ensure_ready(tip)
            except Exception as exc:
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                    f"remote metadata not ready: {exc}") from None
            view.ready = True
        return view

    async def _ensure_ready(self, p: TieredPartition) -> None:
        """Catch the metadata up for ``p`` once, then restore its tiered state.

        Raises:
            RemovalPending: a removal of the partition's remote data (tiering
                was disabled with delete) has not finished; nothing may be
                copied until it has, or the removal would delete the copies.
        """
        if p.ready:
            return
        await self.svc.rlmm.ensure_ready(p.tip)
        if self.remover.is_pending(p.tip):
            # Resumes a removal recorded before a restart (a no-op if queued).
            self.remover.add(p.tip, Removal.TIERING_DISABLED)
            raise RemovalPending(f"{p.tip}: deletion of the remote data of before tiering "
                                 "was disabled has not finished")
        if not p.ready:
            self._restore(p)
            p.ready = True

    def _restore(self, p: TieredPartition) -> None:
        """Highest tiered offset (in this log's epoch lineage, so a new leader
        resumes copying where the tier ends for it) and, if unknown locally,
        the log start, from metadata."""
        finished = [m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        if not finished:
            return
        if restore_remote_epochs(finished, p.log):
            log.warning("leader epochs of the tiered data restored from the remote metadata",
                        partition=str(p.tip), first_epochs=p.log.epochs.entries[:3])
        p.log.highest_tiered_offset = max(p.log.highest_tiered_offset,
                                          highest_remote_offset(self.svc.rlmm, p.tip, p.log))
        sync_log_start(p, finished)

    def _adopt_rebuilt_metadata(self, p: TieredPartition) -> None:
        """While ``tierd.remote.metadata.rebuilding`` is on (``tierd admin
        rebuild-metadata``): nothing is copied or expired, and the log takes
        its start, leader epochs and tier boundary from the metadata as it is
        now, the start moving back to the earliest finished segment if a
        broker that had lost the metadata had moved it past them."""
        finished = [m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        if not finished:
            return
        lg = p.log
        before = lg.log_start_offset
        if lg.lower_log_start_offset(min(m.start_offset for m in finished)):
            log.warning("log start offset moved back to the rebuilt remote metadata",
                        partition=str(p.tip), old=before, new=lg.log_start_offset)
        self._restore(p)

    def stop_partition(self, tp: TopicPartition) -> None:
        self.followers.pop(tp, None)
        self._follower_views.pop(tp, None)
        p = self.partitions.pop(tp, None)
        if p is not None:
            p.cancelled = True

    def follow_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """A follower of a tiered partition: it reads the partition's remote
        metadata, so it knows where the tier ends and local retention frees
        the local segments at or below it (only the leader copies and expires)."""
        tp = (tip.topic, tip.partition)
        self.stop_partition(tp)
        self.svc.rlmm.on_partition_leadership_changes([], [tip])
        self.followers[tp] = (tip, lg)

    def _refresh_followers(self) -> None:
        for tip, lg in list(self.followers.values()):
            if not lg.config.remote_storage_enable or not self.svc.rlmm.is_ready(tip):
                continue
            try:
                highest = highest_remote_offset(self.svc.rlmm, tip, lg)
            except Exception as exc:
                log.info("follower tier boundary unknown", partition=str(tip), error=str(exc))
                continue
            if highest > lg.highest_tiered_offset:
                lg.highest_tiered_offset = highest

    def delete_partition(self, tip: TopicIdPartition) -> None:
        """A deleted topic's partition: remove all its remote data in the background
        (see ``storage.remote.remover``); a restart resumes it from the broker's
        record of deleted topics."""
        self.stop_partition((tip.topic, tip.partition))
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TOPIC_DELETED)
        self.wake()

    def disable_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """Tiering turned off with remote.log.delete.on.disable (KIP-950).

        Remote data is deleted in the background under partition delete
        markers, so a restart resumes it (``resume_disabled_partition``) and
        tiering re-enabled meanwhile waits for it; the log starts at its
        local start from now on.
        """
        self.stop_partition((tip.topic, tip.partition))
        lg.highest_tiered_offset = -1
        lg.advance_log_start_offset(lg.local_log_start_offset)
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TIERING_DISABLED)
        self.wake()

    def resume_disabled_partition(self, tip: TopicIdPartition, lg: Log) -> None:
        """At start: a leader partition whose tiering is off with
        remote.log.delete.on.disable; deletes what a removal interrupted by a
        restart (or a crash before it was marked) left in the tier."""
        if lg.config.remote_storage_enable:
            return
        self.svc.rlmm.on_partition_leadership_changes([tip], [])
        self.remover.add(tip, Removal.TIERING_DISABLED)
        self.wake()

    async def _topic_partition_removed(self, tip: TopicIdPartition) -> None:
        if self.on_partition_removed is not None:
            await self.on_partition_removed(tip)

    async def _run_removals(self) -> None:
        """Run the queued removals; stop following the metadata of partitions
        that are gone from the tier and not tiered here."""
        # The built-in manager's (a plugin manager has no metadata partitions).
        owned_deletions = getattr(self.svc.rlmm, "owned_deletions", None)
        if self.topic_deleted is not None and owned_deletions is not None:
            adopted, dropped = self.remover.adopt(
                [tip for tip in owned_deletions() if self.topic_deleted(tip)])
            if adopted:
                self.svc.rlmm.on_partition_leadership_changes(adopted, [])
            self._forget(dropped)
        self._forget(await self.remover.run_once())

    def _forget(self, removed: list[TopicIdPartition]) -> None:
        for tip in removed:
            tp = (tip.topic, tip.partition)
            if tp not in self.partitions and tp not in self.followers:
                self.svc.rlmm.on_stop_partitions([tip])

    def wake(self) -> None:
        """Run a cycle soon (new partition, config change, test hooks)."""
        self._wakeup.set()

    # -- the periodic cycle ----------------------------------------------------------

    async def run(self) -> None:
        interval = self.config["remote.log.manager.task.interval.ms"] / 1000
        while True:
            with trio.move_on_after(interval):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self._cycle_all()
            self._refresh_followers()
            await self._run_removals()

    async def _cycle_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for p in list(self.partitions.values()):
                nursery.start_soon(self._cycle, p)

    async def _cycle(self, p: TieredPartition) -> None:
        try:
            await self._ensure_ready(p)
        except RemovalPending:
            return  # the removal runs after this cycle
        except Exception as exc:
            log.warning("remote metadata not ready", partition=str(p.tip), error=str(exc))
            return
        if p.log.config.remote_metadata_rebuilding:
            self._adopt_rebuilt_metadata(p)
            return
        now = self.svc.clock()
        if not p.cancelled and p.copy_backoff.ready(now):
            await self._guarded(p, p.copy_backoff, "copy", copy_segments)
        if not p.cancelled and p.expire_backoff.ready(now):
            await self._guarded(p, p.expire_backoff, "expire", expire_segments)
        if not p.cancelled and self._audit_due(p, now):
            await self._audit(p)

    # -- the audit (storage.remote.audit) --------------------------------------------

    def _audit_due(self, p: TieredPartition, now_ms: int) -> bool:
        """Every tierd.remote.audit.interval.ms, the first one interval after
        leadership starts (a restart does not list every partition at once)."""
        interval = self.config["tierd.remote.audit.interval.ms"]
        if interval < 0 or not hasattr(self.svc.rsm, "list_objects"):
            return False
        if not p.next_audit:
            p.next_audit = now_ms + interval
        return now_ms >= p.next_audit

    async def _audit(self, p: TieredPartition) -> None:
        p.next_audit = self.svc.clock() + self.config["tierd.remote.audit.interval.ms"]
        await audit_partition(p, self.svc, self.config["tierd.remote.audit.grace.ms"])

    async def _guarded(self, p: TieredPartition, backoff: Backoff, what: str,
                       task: Callable[[TieredPartition, RemoteServices], Any]) -> None:
        try:
            await task(p, self.svc)
        except RemoteStorageError as exc:
            delay = backoff.failed(self.svc.clock())
            log.warning("remote task failed; backing off", task=what, topic=p.tip.topic,
                        partition=p.tip.partition, error=str(exc), retriable=exc.retriable,
                        retry_in_ms=delay)
        except Exception:
            delay = backoff.failed(self.svc.clock())
            log.exception("remote task crashed; backing off", task=what, topic=p.tip.topic,
                          partition=p.tip.partition, retry_in_ms=delay)
        else:
            backoff.succeeded()


def build_services(config: Any, log_dir: str, rsm: Any, rlmm: RemoteLogMetadataManager,
                   registry: Any, clock: Callable[[], int],
                   chunk_settings: Mapping[str, str] | None = None) -> RemoteServices:
    """Pools, caches and metrics from the broker config (Kafka's key names) and
    the chunk cache's stripped ``rsm.config.fetch.*`` settings."""
    readers = config["remote.log.reader.threads"]
    copiers = config["remote.log.manager.copier.thread.pool.size"]
    expirers = config["remote.log.manager.expiration.thread.pool.size"]
    return RemoteServices(
        rsm=rsm, rlmm=rlmm,
        index_cache=RemoteIndexCache(log_dir, config["remote.log.index.file.cache.total.size.bytes"]),
        metrics=RemoteMetrics(registry), node_id=config["node.id"], clock=clock,
        copier_limiter=trio.CapacityLimiter(copiers),
        expiration_limiter=trio.CapacityLimiter(expirers),
        reader_limiter=trio.CapacityLimiter(readers),
        reader_busy=BusyTracker(readers), tasks_busy=BusyTracker(copiers + expirers),
        reader_max_pending=config["remote.log.reader.max.pending.tasks"],
        copy_quota=RateQuota(config["remote.log.manager.copy.max.bytes.per.second"],
                             config["remote.log.manager.copy.quota.window.num"],
                             config["remote.log.manager.copy.quota.window.size.seconds"],
                             trio.current_time),
        fetch_quota=RateQuota(config["remote.log.manager.fetch.max.bytes.per.second"],
                              config["remote.log.manager.fetch.quota.window.num"],
                              config["remote.log.manager.fetch.quota.window.size.seconds"],
                              trio.current_time),
        chunks=ChunkCache(rsm, chunk_settings, log_dir))
