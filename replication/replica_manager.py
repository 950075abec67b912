"""ReplicaManager: the partitions this broker hosts, append and read entry points.

Handlers never touch logs directly: they append and read through here, so
replication (ISR, acks=all purgatory) slots in without changing them.

Concurrency: runs on the event loop. ``append`` wakes fetches waiting on the
partition (the delayed-fetch purgatory) as soon as data lands.
"""

from __future__ import annotations

from collections.abc import Iterator

import structlog
import trio

from config import BrokerConfig, TopicConfigs
from config.topic import LogConfig
from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from replication.metadata import LocalMetadataStore, TopicInfo
from replication.partition import Partition
from storage.log.log import AppendResult, Log, ReadResult
from storage.log.manager import LogManager, TopicPartition
from storage.log.producer_state import AppendOrigin
from storage.remote.manager import RemoteLogManager
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

# How much of a partition one replay read asks for (internal topics on start).
_REPLAY_READ_BYTES = 1024 * 1024


class AppendWaiters:
    """Fetches parked until data arrives on one of their partitions."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[trio.Event]] = {}

    def watch(self, tps: list[TopicPartition], event: trio.Event) -> None:
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(event)

    def unwatch(self, tps: list[TopicPartition], event: trio.Event) -> None:
        for tp in tps:
            waiting = self._waiters.get(tp)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        for event in self._waiters.pop(tp, ()):
            event.set()


class ReplicaManager:
    def __init__(self, config: BrokerConfig, store: LocalMetadataStore,
                 logs: LogManager) -> None:
        self.config = config
        self.store = store
        self.logs = logs
        self.node_id: int = config["node.id"]
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_configs: dict[str, TopicConfigs] = {}
        self.waiters = AppendWaiters()
        self._flushing: set[TopicPartition] = set()
        self._nursery: trio.Nursery | None = None
        # The RemoteLogManager when tiered storage is on (set by the app).
        self.remote: RemoteLogManager | None = None

    # -- lifecycle --------------------------------------------------------------

    def load(self) -> None:
        """Open the logs of every known topic."""
        for topic in self.store.topics.values():
            self.topic_configs[topic.name] = TopicConfigs(self.config, topic.configs)
        self.logs.load(self._log_config_for, self._topic_id_for)
        for topic in self.store.topics.values():
            self._ensure_partitions(topic)

    def _log_config_for(self, topic: str) -> LogConfig | None:
        tc = self.topic_configs.get(topic)
        return tc.log_config() if tc is not None else None

    def _topic_id_for(self, topic: str):
        info = self.store.get(topic)
        return info.topic_id if info else None

    def _ensure_partitions(self, topic: TopicInfo) -> None:
        cfg = self.topic_configs[topic.name].log_config()
        for i in range(topic.partitions):
            tp = (topic.name, i)
            if tp in self.partitions:
                continue
            lg = self.logs.create(tp, topic.topic_id, cfg)
            part = Partition(topic.name, i, topic.topic_id, lg, self.node_id,
                             topic.leader_epoch, [self.node_id], [self.node_id])
            self.partitions[tp] = part
            self._start_tiering(part)

    def _start_tiering(self, part: Partition) -> None:
        """Hand a leader partition with tiering on to the RemoteLogManager."""
        if self.remote is None or not part.log.config.remote_storage_enable:
            return
        tip = TopicIdPartition(part.topic_id, part.topic, part.index)
        self.remote.start_partition(tip, part.log, lambda: part.last_stable_offset)

    def start_tiering_all(self) -> None:
        """After the remote metadata is loaded: start every tiered partition and
        resume remote cleanups of topics deleted before a restart."""
        for part in self.partitions.values():
            self._start_tiering(part)
        if self.remote is not None:
            for topic_id, topic, index in self.store.pending_remote_deletes:
                self.remote.delete_partition(TopicIdPartition(topic_id, topic, index))

    async def run(self) -> None:
        """Background work: log chores and flushes requested by appends."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.logs.run, self.high_watermark)
            await trio.sleep_forever()

    async def shutdown(self) -> None:
        await self.logs.shutdown()

    # -- topics -------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                           internal: bool = False) -> TopicInfo:
        topic_configs = TopicConfigs(self.config, configs)
        info = await self.store.create_topic(name, partitions, configs, internal)
        self.topic_configs[name] = topic_configs
        self._ensure_partitions(info)
        log.info("topic created", topic=name, partitions=partitions, configs=configs)
        return info

    async def delete_topic(self, name: str) -> None:
        tiered = bool(self.topic_configs[name].get("remote.storage.enable"))
        info = await self.store.delete_topic(name, remote_partitions=tiered)
        for i in range(info.partitions):
            self.partitions.pop((name, i), None)
            self.waiters.notify((name, i))
            await self.logs.delete((name, i))
            if tiered and self.remote is not None:
                self.remote.delete_partition(TopicIdPartition(info.topic_id, name, i))
        self.topic_configs.pop(name, None)
        log.info("topic deleted", topic=name)

    async def add_partitions(self, name: str, count: int) -> None:
        await self.store.set_partitions(name, count)
        self._ensure_partitions(self.store.topics[name])

    async def set_topic_configs(self, name: str, configs: TopicConfigs) -> None:
        await self.store.set_configs(name, configs.overrides)
        self.topic_configs[name] = configs
        cfg = configs.log_config()
        for i in range(self.store.topics[name].partitions):
            part = self.partitions.get((name, i))
            if part is None:
                continue
            was_tiered = part.log.config.remote_storage_enable
            part.log.config = cfg
            if self.remote is None:
                continue
            tip = TopicIdPartition(part.topic_id, part.topic, part.index)
            if cfg.remote_storage_enable:
                self._start_tiering(part)
                self.remote.wake()
            elif was_tiered:
                # KIP-950: turning tiering off requires remote.log.delete.on.disable.
                self.remote.disable_partition(tip, part.log)

    # -- data path ----------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition:
        """The partition, or KafkaApiError(UNKNOWN_TOPIC_OR_PARTITION)."""
        part = self.partitions.get(tp)
        if part is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]}")
        return part

    def high_watermark(self, tp: TopicPartition) -> int:
        part = self.partitions.get(tp)
        return part.high_watermark if part is not None else 0

    def append(self, tp: TopicPartition, data: bytearray,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Append a produced record set as leader (``origin``: see ``Log.append_as_leader``).

        Raises:
            KafkaApiError: unknown partition or invalid records.
        """
        part = self.partition(tp)
        result = part.log.append_as_leader(data, part.leader_epoch, origin)
        self.waiters.notify(tp)
        if result.needs_flush:
            self._schedule_flush(tp, part.log)
        return result

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

    def replay_batches(self, tp: TopicPartition
                       ) -> Iterator[tuple[records.BatchHeader, bytes]]:
        """Every batch of a partition from its log start to its high watermark, for
        coordinators replaying their internal topics on start.

        Yields (header, buffer); the header's ``position`` is within the buffer.
        Stops (with a warning) if the log cannot be read further.
        """
        part = self.partitions.get(tp)
        if part is None:
            return
        offset = part.log.log_start_offset
        while offset < part.high_watermark:
            _, result = self.read(tp, offset, _REPLAY_READ_BYTES, committed_only=False,
                                  min_one_batch=True)
            start = offset
            for header in records.iter_headers(result.data):
                offset = header.last_offset + 1
                yield header, result.data
            if offset == start:
                log.warning("replay stopped early", topic=tp[0], partition=tp[1],
                            offset=offset, high_watermark=part.high_watermark)
                return

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, committed_only: bool,
             min_one_batch: bool) -> tuple[Partition, ReadResult]:
        """Read for a consumer, up to the high watermark (or LSO).

        Raises:
            KafkaApiError: UNKNOWN_TOPIC_OR_PARTITION or OFFSET_OUT_OF_RANGE.
        """
        part = self.partition(tp)
        limit = part.last_stable_offset if committed_only else part.high_watermark
        if offset > part.high_watermark and offset <= part.log.end_offset:
            return part, ReadResult(b"", offset)
        return part, part.log.read(offset, max_bytes, limit, min_one_batch)
