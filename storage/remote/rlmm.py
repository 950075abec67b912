"""TopicBasedRemoteLogMetadataManager: the default RemoteLogMetadataManager (KIP-405).

It implements the plugin interface ``RemoteLogMetadataManager``
(``storage.remote.api``); the broker adapter it needs (``MetadataLog``) and
the partition mapping live in ``storage.remote.rlmm_api``.

Theory of operation
-------------------
Every segment lifecycle event is a record in the internal topic
``__remote_log_metadata``. All events of one user partition go to one
metadata partition (``metadata_partition``), so they are totally ordered,
and every broker folds the metadata partitions of the user partitions it
leads or follows into one ``RemoteLogMetadataCache`` per user partition.
The topic is the truth; the caches are a view of a prefix of it.

Writes (``add_...``, ``update_...``, ``put_...``) take the metadata
partition's lock, fold what is already in the topic, check the event
against the cache (an illegal transition is refused before anything is
written), append it, and fold up to and including their own record before
returning: a writer reads its own write, and records from other writers
are never folded out of order.

Reads are plain lookups in the caches. They raise ``MetadataNotReady``
(retriable) while no user partition of that metadata partition is assigned
here, or before the first catch-up with the topic since it was assigned.

``run`` starts the manager, then runs the consumer task
(``rlmm_consumer``): it long-polls the assigned metadata partitions, folds
what comes as soon as it is committed and, every ``snapshot_interval_s``,
writes a snapshot file per changed user partition and then
``_rlmm_committed_offsets`` (``rlmm_snapshot``), then compacts the
metadata partitions it leads that are worth it (``rlmm_compaction``: a
restatement of the live state, then the log start moves to it). A restart
loads the snapshots and reads only the tail. A snapshot may be newer than
the committed offset (a crash between the two writes): records of that user
partition at or below the snapshot's own offset are skipped, so nothing is
folded twice. A corrupt snapshot, or a committed offset beyond the end of
the topic, makes that metadata partition be read again from the start.
Records missing below the log start (compacted away), whether a catch-up
read or a long-poll finds them so, make the reader forget its state and
rebuild it from the next complete restatement (``rlmm_partition``).

Unassigning every user partition of a metadata partition pauses it (its
caches stay, stale, until it is assigned again and caught up). A metadata
partition this broker leads is followed whole (``owned``) in cluster mode:
its leader removes the remote data of the deleted topics the controller
marked there (``mark_partition_deleted``, ``owned_deletions``; see
``storage.remote.remover``).

Concurrency: everything runs on the trio thread; file writes go through
``trio.to_thread``. The metadata log adapter is called with no lock but the
metadata partition's own.

Why one module of ~450 lines: one manager folding one topic into caches,
with its start-up, catch-up and interval logic sharing the same per-partition
state (the folding itself is ``rlmm_partition``'s, the consumer task
``rlmm_consumer``'s, compaction ``rlmm_compaction``'s, snapshot writing
``rlmm_snapshot_sync``'s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import structlog
import trio

from storage.remote import rlmm_compaction, rlmm_snapshot
from storage.remote.api import MetadataNotReady, RemoteLogMetadataManager
from storage.remote.metadata_cache import (
    RemoteLogMetadata,
    RemoteLogMetadataCache,
    RemoteLogMetadataError,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.rlmm_api import (
    DEFAULT_NUM_PARTITIONS,
    NUM_PARTITIONS_CONFIG,
    TOPIC_NAME,
    MetadataLog,
    PollLimits,
    TopicRecord,
    metadata_partition,
)
from storage.remote.rlmm_config import RlmmSettings
from storage.remote.rlmm_consumer import MetadataConsumer
from storage.remote.rlmm_partition import MetadataPartition
from storage.remote.rlmm_serde import serialize
from storage.remote.rlmm_snapshot_sync import SnapshotSync
from storage.remote.types import RemoteLogSegmentMetadata, TopicIdPartition

__all__ = ["DEFAULT_NUM_PARTITIONS", "NUM_PARTITIONS_CONFIG", "TOPIC_NAME", "MetadataLog",
           "MetadataNotReady", "RemoteLogMetadataError", "RemoteLogMetadataManager",
           "TopicBasedRemoteLogMetadataManager", "metadata_partition"]

log = structlog.get_logger(__name__)

# How long the consumer task waits after a failed catch-up or poll before it
# tries again: the consumer default retry.backoff.ms.
RETRY_BACKOFF_S = 0.1
# Kafka's defaults for every rlmm.config.* key.
_DEFAULT_SETTINGS = RlmmSettings()


class TopicBasedRemoteLogMetadataManager:
    """The default RemoteLogMetadataManager, backed by ``__remote_log_metadata``.

    Args:
        metadata_log: the internal topic (see MetadataLog).
        log_dir: where ``_rlmm_committed_offsets`` and the snapshots live.
        num_partitions: remote.log.metadata.topic.num.partitions (default: the settings').
        snapshot_interval_s: how often ``run`` writes snapshots and compacts
            (default: the settings').
        min_superseded: compaction threshold (``rlmm_compaction``; < 0: never;
            default: the settings').
        settings: the rlmm.config.* settings (``rlmm_config``).
    """

    def __init__(self, metadata_log: MetadataLog, log_dir: str, *,
                 num_partitions: int | None = None,
                 snapshot_interval_s: float | None = None,
                 min_superseded: int | None = None,
                 settings: RlmmSettings = _DEFAULT_SETTINGS) -> None:
        num_partitions = settings.num_partitions if num_partitions is None else num_partitions
        if num_partitions <= 0:
            raise ValueError(f"{NUM_PARTITIONS_CONFIG} must be positive, not {num_partitions}")
        if snapshot_interval_s is None:
            snapshot_interval_s = settings.snapshot_interval_ms / 1000
        self._min_superseded = (settings.compaction_min_superseded_records
                                if min_superseded is None else min_superseded)
        self._log = metadata_log
        self._log_dir = log_dir
        self.num_partitions = num_partitions
        self._settings = settings
        self._partitions: dict[int, MetadataPartition] = {}
        self._started = False
        self._closed = False
        self._snapshots = SnapshotSync(log_dir)
        limits = PollLimits(settings.fetch_max_wait_ms, settings.fetch_min_bytes,
                            settings.fetch_max_bytes, settings.max_partition_fetch_bytes)
        self.consumer = MetadataConsumer(metadata_log, self, limits, RETRY_BACKOFF_S,
                                         snapshot_interval_s, self._on_interval)

    @property
    def closed(self) -> bool:
        return self._closed

    def partition_for(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.num_partitions)

    def _new_partition(self, p: int, next_offset: int = 0) -> MetadataPartition:
        return MetadataPartition(p, self.num_partitions, next_offset=next_offset)

    def _partition(self, p: int) -> MetadataPartition:
        state = self._partitions.get(p)
        if state is None:
            state = self._partitions[p] = self._new_partition(p)
        return state

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Ensure the topic exists and load snapshots and committed offsets (idempotent).

        Raises:
            RemoteLogMetadataError: the topic exists with another partition count.
        """
        if self._started:
            return
        actual = await self._log.ensure_topic(self.num_partitions)
        if actual != self.num_partitions:
            raise RemoteLogMetadataError(
                f"{TOPIC_NAME} has {actual} partitions but {NUM_PARTITIONS_CONFIG} is "
                f"{self.num_partitions}; the user partition mapping would change")
        restored = await trio.to_thread.run_sync(rlmm_snapshot.restore, self._log_dir,
                                                 self.partition_for)
        committed = restored.committed
        for p, offset in committed.items():
            self._partitions.setdefault(p, self._new_partition(p, next_offset=offset + 1))
        for snap in restored.snapshots:
            state = self._partitions[self.partition_for(snap.topic_id_partition)]
            cache = RemoteLogMetadataCache(snap.topic_id_partition)
            cache.restore(snap.segments, snap.delete_metadata)
            state.caches[snap.topic_id_partition] = cache
            state.skip_through[snap.topic_id_partition] = snap.metadata_offset
        self._snapshots.committed = committed
        self._started = True
        log.info("remote log metadata manager started", partitions=self.num_partitions,
                 committed=sorted(committed))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start, then fold new records and write snapshots until cancelled or closed.

        Error handling: a failing start is retried every
        remote.log.metadata.initialization.retry.interval.ms for
        ...retry.max.timeout.ms, then raised; a partition-count mismatch is
        raised at once (no retry can fix it). A failing read is logged and
        retried (``rlmm_consumer``).
        """
        await self._start_with_retries()
        task_status.started()
        await self.consumer.run()

    async def _start_with_retries(self) -> None:
        deadline = trio.current_time() + self._settings.init_retry_max_timeout_ms / 1000
        while True:
            try:
                await self.start()
                return
            except RemoteLogMetadataError:
                raise
            except Exception as exc:
                if trio.current_time() >= deadline:
                    raise
                log.warning("remote log metadata manager cannot start yet; retrying",
                            error=repr(exc))
            await trio.sleep(self._settings.init_retry_interval_ms / 1000)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.consumer.wake()
        if self._started:
            await self.sync_snapshots()

    # -- assignment ----------------------------------------------------------

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        changed = False
        for tip in [*leaders, *followers]:
            state = self._partition(self.partition_for(tip))
            changed |= tip not in state.assigned or not state.ready
            state.assigned.add(tip)
        if changed:  # a new round would cancel parked polls: only when it matters
            self.consumer.wake()

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        for tip in partitions:
            state = self._partitions.get(self.partition_for(tip))
            if state is None:
                continue
            state.assigned.discard(tip)
            if not state.assigned and not state.owned:
                state.ready = False

    def on_metadata_partition_leadership(self, partition: int, leader: bool) -> None:
        """This broker became (or stopped being) the leader of metadata ``partition``."""
        state = self._partition(partition)
        if state.owned == leader:
            return
        state.owned = leader
        if not leader and not state.assigned:
            state.ready = False
        self.consumer.wake()

    def owned_deletions(self) -> list[TopicIdPartition]:
        """User partitions marked or started for deletion in the caught-up
        metadata partitions this broker leads (not while one is rebuilt after
        records went missing: its view is partial until then)."""
        return [tip for state in self._partitions.values()
                if state.owned and state.ready and state.trusted
                for tip in state.unfinished_deletions()]

    async def mark_partition_deleted(self, marked: RemotePartitionDeleteMetadata) -> None:
        """The controller's DELETE_PARTITION_MARKED of a deleted topic's partition,
        hosted here or not; nothing if a deletion is marked or started already.

        Raises:
            RemoteLogMetadataError, KafkaApiError, PeerError: not written (retriable).
        """
        tip = marked.topic_id_partition
        p = self.partition_for(tip)
        state = self._partition(p)
        async with state.lock:
            await self._catch_up(p, state)
        cache = state.caches.get(tip)
        if cache is None or cache.delete_metadata is None:
            await self._publish(marked, anywhere=True)

    def is_ready(self, tip: TopicIdPartition) -> bool:
        state = self._partitions.get(self.partition_for(tip))
        return state is not None and state.ready

    async def ensure_ready(self, tip: TopicIdPartition) -> None:
        """Catch ``tip``'s metadata partition up with the topic now.

        Raises:
            MetadataNotReady: ``tip`` is not assigned here.
        """
        p, state = self._assigned_state(tip)
        async with state.lock:
            await self._catch_up(p, state)

    # -- writes --------------------------------------------------------------

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        await self._publish(metadata)

    async def update_remote_log_segment_metadata(
            self, update: RemoteLogSegmentMetadataUpdate) -> None:
        await self._publish(update)

    async def put_remote_partition_delete_metadata(
            self, metadata: RemotePartitionDeleteMetadata) -> None:
        await self._publish(metadata)

    async def _publish(self, event: RemoteLogMetadata, anywhere: bool = False) -> None:
        """Check, append and fold ``event``.

        Raises:
            IllegalStateTransition, UnknownSegmentError, ValueError: refused;
                nothing was written.
            MetadataNotReady: the partition is not assigned here.
            RemoteLogMetadataError: closed, or written but refused when folded
                (another writer got there first).
        """
        if self._closed or not self._started:
            raise RemoteLogMetadataError("remote log metadata manager is not running")
        tip = event.topic_id_partition
        p, state = ((self.partition_for(tip), self._partitions[self.partition_for(tip)])
                    if anywhere else self._assigned_state(tip))
        async with state.lock:
            await self._catch_up(p, state)
            state.caches.get(tip, RemoteLogMetadataCache(tip)).check(event)
            offset = await self._log.append(p, serialize(event))
            error = None
            with trio.move_on_after(self._settings.consume_wait_ms / 1000):
                error = await self._catch_up(p, state, through=offset)
        if state.next_offset <= offset:
            raise RemoteLogMetadataError(
                f"{tip}: appended at {p}:{offset} but could not read it back within "
                f"remote.log.metadata.consume.wait.ms ({self._settings.consume_wait_ms})")
        if error is not None:
            raise RemoteLogMetadataError(f"{tip}: record {p}:{offset} refused: {error}") from error

    def _assigned_state(self, tip: TopicIdPartition) -> tuple[int, MetadataPartition]:
        p = self.partition_for(tip)
        state = self._partitions.get(p)
        if state is None or tip not in state.assigned:
            raise MetadataNotReady(f"{tip} is not assigned to this remote log metadata manager")
        return p, state

    # -- folding records -----------------------------------------------------

    def positions(self) -> dict[int, int]:
        return {p: state.next_offset for p, state in self._partitions.items() if state.followed}

    async def catch_up_pending(self) -> bool:
        caught_up = True
        for p, state in sorted(self._partitions.items()):
            if state.followed and not state.ready:
                try:
                    async with state.lock:
                        await self._catch_up(p, state)
                except Exception:  # the adapter failed: retried; lookups keep the old view
                    log.exception("reading remote log metadata failed", metadata_partition=p)
                    caught_up = False
        return caught_up

    async def fold_polled(self, partition: int, position: int,
                          found: Sequence[TopicRecord]) -> None:
        state = self._partitions.get(partition)
        if state is None:
            return
        async with state.lock:
            if position <= state.next_offset:  # else: re-read from the start meanwhile
                state.fold_all(found)

    async def _catch_up(self, p: int, state: MetadataPartition,
                        through: int | None = None) -> Exception | None:
        """Fold records of ``p`` up to ``through`` (default: the end). Caller holds the lock.

        Returns:
            Why the record at ``through`` was refused, or None.
        """
        end = self._log.end_offset(p)
        if state.next_offset > end:
            log.warning("remote log metadata behind committed offset; re-reading",
                        metadata_partition=p, committed=state.next_offset - 1, end=end)
            state.reset()
        target = end if through is None else through + 1
        refused: Exception | None = None
        while state.next_offset < target:
            batch = await self._log.read(p, state.next_offset,
                                         self._settings.max_partition_fetch_bytes)
            if not batch:
                break
            refused = state.fold_all(batch, through) or refused
        if through is None and state.followed and not state.ready:
            state.ready = True
            log.info("remote log metadata caught up", metadata_partition=p,
                     next_offset=state.next_offset, user_partitions=len(state.caches))
        return refused

    # -- every snapshot interval: snapshots, then compaction -----------------

    async def sync_snapshots(self) -> None:
        """Write snapshots of changed user partitions, then the committed
        offsets (``rlmm_snapshot_sync``)."""
        await self._snapshots.sync(self._partitions)

    async def _on_interval(self) -> None:
        await self.sync_snapshots()
        await self._compact_all()

    async def _compact_all(self) -> None:
        # Every metadata partition led here, hosted user partitions or not
        # (one that is not followed is folded here only for this).
        for p in range(self.num_partitions):
            if self._log.start_offset(p) is None:
                continue
            self._partition(p)
            try:
                await self.compact(p)
            except Exception:  # retried next interval; nothing was lost (see compact)
                log.exception("compacting remote log metadata failed", metadata_partition=p)

    async def compact(self, p: int) -> bool:
        """Compact metadata partition ``p`` if led here and worth it (``rlmm_compaction``)."""
        state = self._partitions.get(p)
        return state is not None and await rlmm_compaction.compact(
            self._log, p, state, self._min_superseded, self._catch_up)

    # -- lookups -------------------------------------------------------------

    def _cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache | None:
        state = self._partitions.get(self.partition_for(tip))
        if state is None or not state.ready:
            raise MetadataNotReady(f"remote log metadata of {tip} is not caught up yet")
        return state.caches.get(tip)

    def remote_log_segment_metadata(self, tip: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        cache = self._cache(tip)
        return cache.remote_log_segment_metadata(leader_epoch, offset) if cache else None

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        cache = self._cache(tip)
        return cache.highest_offset_for_epoch(leader_epoch) if cache else None

    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        cache = self._cache(tip)
        return cache.list_remote_log_segments(leader_epoch) if cache else []

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int:
        segments = self.list_remote_log_segments(tip, leader_epoch)
        return sum(m.segment_size_in_bytes for m in segments)

    def partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The partition's deletion state (None once DELETE_PARTITION_FINISHED or never marked)."""
        cache = self._cache(tip)
        return cache.delete_metadata.state if cache and cache.delete_metadata else None


# The built-in manager implements the whole plugin interface (mypy checks it here).
_IMPLEMENTS: type[RemoteLogMetadataManager] = TopicBasedRemoteLogMetadataManager
