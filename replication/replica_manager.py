"""ReplicaManager: the partitions this broker hosts, their lifecycle, append and fetch.

What it does, and nothing more:
- partition lifecycle: ``become_leader`` opens (or adopts) a partition's log
  and leads it in a given leader epoch; ``stop_replica`` stops hosting it
  (deleting the log when asked); ``update_log_config`` applies a topic's new
  configs to its logs;
- the data path: ``append(tp, data, acks, timeout_ms)`` (acks=all parks in the
  delayed-produce purgatory until the ISR has the record) and
  ``fetch(params)`` (local and remote reads, the delayed-fetch wait).

It does not know what topics exist (the metadata cache does), nor how they
are created (the topic writer, ``replication.local_admin`` on one broker),
nor what is in the internal topics (``replication.internal_topics``). What
a leader's followers have, and the high watermark, ISR and acks=all wait
that follow from it, it keeps in a ``FollowerProgress`` of its own
(``followers``, see ``replication.follower_progress``); what tiered storage
is told as partitions come, go and change role or configs, in a
``ReplicaTiering`` (``tiering``, see ``replication.replica_tiering``). The
per-partition answers the other APIs need (ListOffsets, OffsetForLeaderEpoch,
DeleteRecords, DescribeLogDirs, an internal topic's replay) are functions of
it in ``replication.partition_queries``.

Concurrency: runs on the event loop. An append wakes fetches waiting on the
partition at once: followers on every append, consumers and acks=all
producers when the high watermark advances.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager

import structlog
import trio

from config import BrokerConfig
from config.broker import RACK_AWARE_SELECTOR
from config.topic import LogConfig
from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from replication import fetch as fetch_path
from replication.fetch_session import FetchSession, FetchSessionCache
from replication.follower_progress import FollowerProgress
from replication.metadata_cache import PartitionState
from replication.metrics import ReplicaStats
from replication.partition import Partition
from replication.purgatory import Purgatory, RemoteFetchPurgatory
from replication.replica_selector import LEADER, preferred_read_replica
from replication.replica_tiering import ReplicaTiering
from storage.log.file_slice import FileSlice
from storage.log.log import AppendResult, Log
from storage.log.manager import LogManager
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

ACKS_ALL = -1
VALID_ACKS = (ACKS_ALL, 0, 1)


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: LogManager) -> None:
        self.config = config
        self.logs = logs
        self.node_id: int = config["node.id"]
        self._partitions: dict[TopicPartition, Partition] = {}
        self._delayed_fetch_consumers = Purgatory()
        self._delayed_fetch_followers = Purgatory()
        # Fetch sessions (KIP-227): notified of the same partition changes
        # as the delayed fetches (leadership, appends, log start moves).
        self.fetch_sessions = FetchSessionCache(
            config["max.incremental.fetch.session.cache.slots"])
        # What the followers of the partitions led here have: the high
        # watermark, the ISR as applied, and the acks=all wait follow from it.
        self.followers = FollowerProgress(self.node_id, config["replica.lag.time.max.ms"] / 1000,
                                          self._partitions.get, self._on_high_watermark)
        self._flushing: set[TopicPartition] = set()
        self._nursery: trio.Nursery | None = None
        # Tiered storage, when it is on: what the RemoteLogManager tiers.
        self.tiering = ReplicaTiering(self.node_id)
        # Consumers' remote reads, parked until the reader pool completes them.
        self.remote_fetches = RemoteFetchPurgatory()
        # Replication meters (ISR changes, follower bytes), exported by broker.metrics.
        self.stats = ReplicaStats()
        # KIP-392: consumers may be sent to a follower in their rack; a
        # broker's rack comes from the cluster's metadata (set by cluster mode).
        self.rack_aware_reads = config["replica.selector.class"] == RACK_AWARE_SELECTOR
        self.rack_of: Callable[[int], str | None] = lambda broker: None
        logs.high_watermarks = lambda: {tp: p.high_watermark for tp, p in self._partitions.items()}

    # -- lifecycle --------------------------------------------------------------

    def become_leader(self, tp: TopicPartition, topic_id: object, config: LogConfig,
                      state: PartitionState) -> Partition:
        """Lead ``tp`` in ``state.leader_epoch``, opening its log if needed."""
        part = self._take_state(tp, topic_id, config, state, self.node_id)
        part.follower_caught_up_at = {}
        # Like Kafka: the new epoch starts at the log end, so OffsetForLeaderEpoch
        # and diverging-epoch answers are right before the first append.
        part.log.epochs.assign(state.leader_epoch, part.log.end_offset)
        self.followers.advance_high_watermark(part)
        self.fetch_sessions.notify(tp)
        self.tiering.start(part)
        return part

    def become_follower(self, tp: TopicPartition, topic_id: object, config: LogConfig,
                        state: PartitionState) -> Partition:
        """Follow ``state.leader`` in ``state.leader_epoch``, opening the log if needed.

        The caller (the replica fetcher manager) starts fetching; requests
        parked here as leader are woken and find the partition moved.
        """
        part = self._take_state(tp, topic_id, config, state, state.leader)
        part.high_watermark = min(part.high_watermark, part.log.end_offset)
        self.tiering.follow(part)
        self.followers.wake(tp)
        self._delayed_fetch_consumers.notify(tp)
        self._delayed_fetch_followers.notify(tp)
        self.fetch_sessions.notify(tp)
        return part

    def _take_state(self, tp: TopicPartition, topic_id: object, config: LogConfig,
                    state: PartitionState, leader: int) -> Partition:
        """The partition (created with its log and checkpointed high watermark if
        new), given ``state``'s leader, epochs and replica sets."""
        part = self._partitions.get(tp)
        if part is None:
            lg = self.logs.create(tp, topic_id, config)  # type: ignore[arg-type]
            part = Partition(tp[0], tp[1], topic_id, lg, leader)  # type: ignore[arg-type]
            part.high_watermark = min(self.logs.checkpointed_high_watermarks.get(tp, 0),
                                      lg.end_offset)
            self._partitions[tp] = part
            # A moved log start is news for the fetch sessions holding it.
            lg.start_listener = functools.partial(self.fetch_sessions.notify, tp)
        part.leader_id = leader
        part.leader_epoch = state.leader_epoch
        part.partition_epoch = state.partition_epoch
        part.replicas = list(state.replicas)
        part.isr = list(state.isr)
        part.proposed_isr = None
        part.follower_end_offsets = {}
        return part

    def append_as_follower(self, tp: TopicPartition, data: bytearray) -> int:
        """Append batches fetched from the leader (offsets and epochs kept); returns LEO.

        Raises:
            KafkaApiError: unknown partition, or batches that do not follow the log.
        """
        part = self.partition(tp)
        end = part.log.append_as_follower(data)
        if part.log.flush_due():
            self._schedule_flush(tp, part.log)
        return end

    def truncate(self, tp: TopicPartition, offset: int) -> None:
        """Follower: drop everything at or above ``offset`` (divergence from the leader)."""
        part = self.partition(tp)
        if offset < part.log.end_offset:
            log.info("truncating follower log", topic=tp[0], partition=tp[1],
                     from_offset=part.log.end_offset, to_offset=offset,
                     leader_epoch=part.leader_epoch)
        # Also at the log end: an epoch this broker started there as leader,
        # with nothing appended in it, goes (see ``Log.truncate_to``).
        part.log.truncate_to(offset)
        part.high_watermark = min(part.high_watermark, part.log.end_offset)

    def truncate_fully(self, tp: TopicPartition, offset: int) -> None:
        """Follower: empty the log and restart it at the leader's log start."""
        part = self.partition(tp)
        part.log.truncate_fully_and_start_at(offset)
        part.high_watermark = offset

    def set_follower_high_watermark(self, tp: TopicPartition, leader_hw: int) -> None:
        """Follower: the leader's high watermark, capped at what we have."""
        part = self._partitions.get(tp)
        if part is None:
            return
        hw = min(leader_hw, part.log.end_offset)
        if hw > part.high_watermark:
            part.high_watermark = hw
            self._delayed_fetch_consumers.notify(tp)
            self.fetch_sessions.notify(tp)

    async def stop_replica(self, tp: TopicPartition, delete: bool) -> None:
        """Stop hosting ``tp``: parked requests are woken (they find it gone)."""
        part = self._partitions.pop(tp, None)
        self.tiering.stop(tp)
        self._delayed_fetch_consumers.notify(tp)
        self._delayed_fetch_followers.notify(tp)
        self.followers.wake(tp)
        self.fetch_sessions.notify(tp)
        if part is not None and delete:
            await self.logs.delete(tp)

    def update_log_config(self, tp: TopicPartition, config: LogConfig) -> None:
        """Apply a topic's new configs to one partition's log (and its tiering)."""
        part = self._partitions.get(tp)
        if part is None:
            return
        was_tiered = part.log.config.remote_storage_enable
        part.log.config = config
        self.tiering.config_changed(part, was_tiered)

    async def run(self) -> None:
        """Background work: log chores and flushes requested by appends."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.logs.run, self.high_watermark)
            nursery.start_soon(self.remote_fetches.run)
            await trio.sleep_forever()

    async def shutdown(self) -> None:
        self._delayed_fetch_consumers.notify_all()
        self._delayed_fetch_followers.notify_all()
        self.followers.wake_all()
        await self.logs.shutdown()

    # -- lookups ----------------------------------------------------------------

    def get(self, tp: TopicPartition) -> Partition | None:
        """The partition if this broker hosts it (as leader or follower)."""
        return self._partitions.get(tp)

    def hosted(self) -> list[Partition]:
        """Every partition this broker hosts, in the order it took them: a copy,
        so the caller may let other tasks run (and partitions come and go)
        while it walks the list."""
        return list(self._partitions.values())

    def leads(self, tp: TopicPartition) -> bool:
        """Whether this broker hosts ``tp`` and is its leader."""
        part = self._partitions.get(tp)
        return part is not None and part.is_leader(self.node_id)

    def partition(self, tp: TopicPartition) -> Partition:
        """The partition, or KafkaApiError(UNKNOWN_TOPIC_OR_PARTITION)."""
        part = self._partitions.get(tp)
        if part is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]}")
        return part

    def leader_partition(self, tp: TopicPartition) -> Partition:
        """The partition if this broker leads it.

        Raises:
            KafkaApiError: UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER.
        """
        part = self.partition(tp)
        if not part.is_leader(self.node_id):
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                f"{tp[0]}-{tp[1]}: leader is {part.leader_id}")
        return part

    def readable_partition(self, tp: TopicPartition, followers_too: bool) -> Partition:
        """The partition a consumer may read here: led by this broker, or with
        ``followers_too`` (Fetch v11+, KIP-392) any replica of it.

        Raises:
            KafkaApiError: UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER.
        """
        return self.partition(tp) if followers_too else self.leader_partition(tp)

    def preferred_read_replica(self, part: Partition, client_rack: str | None,
                               offset: int) -> int:
        """The follower a consumer in ``client_rack`` should read ``part`` from
        (``replication.replica_selector``); -1: here."""
        if (not self.rack_aware_reads or client_rack is None
                or not part.is_leader(self.node_id)):
            return LEADER
        return preferred_read_replica(part, self.node_id, client_rack, offset, self.rack_of)

    def leader_epoch(self, tp: TopicPartition) -> int:
        part = self._partitions.get(tp)
        return part.leader_epoch if part is not None else 0

    def high_watermark(self, tp: TopicPartition) -> int:
        part = self._partitions.get(tp)
        return part.high_watermark if part is not None else 0

    @staticmethod
    def check_leader_epoch(part: Partition, current_leader_epoch: int) -> None:
        """Kafka's fencing rule for requests that carry the client's view of the epoch.

        Raises:
            KafkaApiError: FENCED_LEADER_EPOCH if the client is behind,
                UNKNOWN_LEADER_EPOCH if it is ahead of this broker.
        """
        if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
            return
        if current_leader_epoch < part.leader_epoch:
            raise KafkaApiError(ErrorCode.FENCED_LEADER_EPOCH,
                                f"epoch {current_leader_epoch} < {part.leader_epoch}")
        raise KafkaApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                            f"epoch {current_leader_epoch} > {part.leader_epoch}")

    # -- append -----------------------------------------------------------------

    def append_local(self, tp: TopicPartition, data: bytearray,
                     origin: AppendOrigin = AppendOrigin.CLIENT,
                     required_acks: int = 1) -> AppendResult:
        """Append a record set to the leader's log now (``origin``: see
        ``Log.append_as_leader``), without waiting for replication.

        Raises:
            KafkaApiError: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
                NOT_ENOUGH_REPLICAS (acks=all with the ISR below
                min.insync.replicas), or invalid records.
        """
        part = self.leader_partition(tp)
        min_isr = part.log.config.min_insync_replicas
        if required_acks == ACKS_ALL and len(part.isr) < min_isr:
            raise KafkaApiError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                f"{tp[0]}-{tp[1]}: {len(part.isr)} in-sync replicas, "
                                f"min.insync.replicas is {min_isr}")
        self.followers.hold_caught_up(part)
        result = part.log.append_as_leader(data, part.leader_epoch, origin)
        self._delayed_fetch_followers.notify(tp)
        self.fetch_sessions.notify(tp)
        self.followers.advance_high_watermark(part)
        if result.needs_flush:
            self._schedule_flush(tp, part.log)
        return result

    async def append(self, tp: TopicPartition, data: bytearray, acks: int = ACKS_ALL,
                     timeout_ms: int = 30_000,
                     origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Append as leader; with acks=all, return once the ISR has the records.

        Raises:
            KafkaApiError: as ``append_local``, or (acks=all) the error of
                ``FollowerProgress.wait_replicated``.
        """
        result = self.append_local(tp, data, origin, acks)
        if acks == ACKS_ALL:
            errors = await self.followers.wait_replicated({tp: result.last_offset + 1},
                                                          timeout_ms)
            if errors[tp]:
                raise KafkaApiError(errors[tp], f"{tp[0]}-{tp[1]}: {errors[tp].name}")
        return result

    def _on_high_watermark(self, tp: TopicPartition) -> None:
        """The high watermark moved (``FollowerProgress`` has woken the produces)."""
        self._delayed_fetch_consumers.notify(tp)
        self.fetch_sessions.notify(tp)

    def _schedule_flush(self, tp: TopicPartition, lg: Log) -> None:
        if tp in self._flushing or self._nursery is None:
            return
        self._flushing.add(tp)

        async def flush() -> None:
            try:
                await lg.flush()
            finally:
                self._flushing.discard(tp)

        self._nursery.start_soon(flush)

    # -- reads ------------------------------------------------------------------

    async def fetch(self, params: fetch_path.FetchParams) -> list[fetch_path.FetchResult]:
        """Answer a full fetch (see ``replication.fetch``)."""
        if params.is_follower:
            self.followers.fetched(params.replica_id)
        return await fetch_path.fetch(self, params)

    async def fetch_incremental(self, params: fetch_path.FetchParams, session: FetchSession,
                                requested: list[TopicPartition]
                                ) -> list[tuple[fetch_path.FetchPartition, fetch_path.FetchResult]]:
        """Answer an incremental fetch of ``session`` (see ``replication.fetch``)."""
        if params.is_follower:
            self.followers.fetched(params.replica_id)
        return await fetch_path.fetch_incremental(self, params, session, requested)

    def watch_fetches(self, tps: list[TopicPartition], follower: bool
                      ) -> AbstractContextManager[trio.Event]:
        """For a fetch that may wait (see ``Purgatory.watch``): an event set by
        the next news on one of ``tps`` for a follower (the log end moved) or
        a consumer (the high watermark moved), or when the partition moves or goes."""
        purgatory = self._delayed_fetch_followers if follower else self._delayed_fetch_consumers
        return purgatory.watch(tps)

    def read(self, part: Partition, offset: int, max_bytes: int, committed_only: bool,
             min_one_batch: bool, zero_copy: bool = False,
             leader_epoch_known: bool = True) -> bytes | FileSlice:
        """Read for a consumer, up to the high watermark (or LSO); with
        ``zero_copy`` the data may be a ``FileSlice`` (see ``Log.read_for_send``).

        On a follower (KIP-392) an offset past our log end is one the leader
        may have: with ``leader_epoch_known`` the consumer gets
        OFFSET_OUT_OF_RANGE and asks the leader; without (a Fetch v11 client
        that sends no epoch, maybe on stale metadata) an empty answer to retry.

        Raises:
            KafkaApiError: OFFSET_OUT_OF_RANGE, OFFSET_MOVED_TO_TIERED_STORAGE.
        """
        limit = part.last_stable_offset if committed_only else part.high_watermark
        end = part.log.end_offset
        if offset > part.high_watermark and offset <= end:
            return b""
        if offset > end and not leader_epoch_known and not part.is_leader(self.node_id):
            return b""
        return part.log.read_for_send(offset, max_bytes, limit, min_one_batch, zero_copy)

    async def write_checkpoints(self) -> None:
        await self.logs.write_checkpoints()
