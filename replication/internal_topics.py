"""The internal topics: ``__consumer_offsets``, ``__transaction_state`` and
``__remote_log_metadata``, behind one class.

Each is an ``InternalTopic``: created through the ``TopicAdmin`` on first use
(internal, with its partition count, replication factor and configs from
broker config), keys mapped to partitions (Kafka's
``abs(javaStringHashCode(key)) % partitions`` for coordinator keys), records
appended as whole batches by the partition's leader, replayed by a new
leader's owner from its log start to its log end (as Kafka's coordinators
load: the new leader's log is the partition's truth), and read back by
others up to the high watermark only, so they see committed data alone.
Their owners (group coordinator, transaction coordinator, remote log
metadata manager) fold the records into state; this module does not know
what the records mean.

Durability: ``append`` writes to the leader's log at once (refusing, as
acks=all does, when the ISR is below min.insync.replicas) so the owner's
in-memory state always matches the local log; the owner answers its client
only after ``wait_durable`` says every in-sync replica has the write (on one
broker that is immediate). A write that never becomes durable is either
committed later or truncated after a leadership change, and then the owner
has unloaded the partition and the new leader rebuilds from its own log.

Error handling: ``append`` raises ``KafkaApiError`` with the ReplicaManager's
code (the owners map it to what their clients are answered); ``replay``
stops with a warning at an unreadable spot rather than failing the load.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager

import structlog
import trio

from config import BrokerConfig
from protocol import records
from protocol.errors import ErrorCode
from replication import partition_queries
from replication.metadata_cache import MetadataCache
from replication.replica_manager import ACKS_ALL, ReplicaManager
from replication.topic_admin import TopicAdmin
from storage.log.log import AppendResult
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC, REMOTE_LOG_METADATA_TOPIC})


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (group and transactional ids)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


class InternalTopic:
    def __init__(self, name: str, partitions: int, replication_factor: int,
                 configs: dict[str, str], admin: TopicAdmin, metadata: MetadataCache,
                 replicas: ReplicaManager) -> None:
        self.name = name
        self.configured_partitions = partitions
        self.replication_factor = replication_factor
        self.configs = configs
        self.admin = admin
        self.metadata = metadata
        self.replicas = replicas
        # partition -> end offset of our last append there (what wait_durable waits for)
        self._appended: dict[int, int] = {}

    @property
    def partitions(self) -> int:
        """The topic's partition count (the configured one until it exists)."""
        info = self.metadata.topic(self.name)
        return info.partitions if info is not None else self.configured_partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.partitions)

    async def ensure(self) -> int:
        """Create the topic if the cluster has none yet; returns its partition count."""
        info = self.metadata.topic(self.name)
        if info is None:
            info = await self.admin.create_topic(self.name, self.configured_partitions,
                                                 self.replication_factor, self.configs,
                                                 internal=True)
        elif info.partitions != self.configured_partitions:
            log.warning("internal topic partition count differs from config; using the "
                        "topic's", topic=self.name, topic_partitions=info.partitions,
                        configured=self.configured_partitions)
        return info.partitions

    def is_leader(self, partition: int) -> bool:
        return self.replicas.leads((self.name, partition))

    def has_producers(self, partition: int) -> bool:
        """Whether any producer (transactional writes) has state in ``partition``."""
        part = self.replicas.get((self.name, partition))
        return part is not None and bool(part.log.producers.producers)

    def leader_epoch(self, partition: int) -> int:
        return self.replicas.leader_epoch((self.name, partition))

    def append(self, partition: int, batch: bytes,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Append one batch to ``partition`` as its leader.

        Raises:
            KafkaApiError: the partition is unknown here or refuses the batch.
        """
        result = self.replicas.append_local((self.name, partition), bytearray(batch), origin,
                                            ACKS_ALL)
        self._appended[partition] = result.last_offset + 1
        return result

    async def wait_durable(self, partition: int, timeout_ms: int) -> ErrorCode:
        """Wait until every in-sync replica has our appends to ``partition`` so far.

        Returns:
            NONE, or the ReplicaManager's acks=all error (NOT_LEADER_OR_FOLLOWER,
            NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT).
        """
        end = self._appended.get(partition)
        if end is None:
            return ErrorCode.NONE
        tp = (self.name, partition)
        return (await self.replicas.followers.wait_replicated({tp: end}, timeout_ms))[tp]

    async def flush(self, partition: int) -> None:
        """fsync what was appended to ``partition`` (off the event loop)."""
        await self.replicas.partition((self.name, partition)).log.flush()

    def forget(self, partition: int) -> None:
        """Leadership of ``partition`` moved away: its pending appends are moot."""
        self._appended.pop(partition, None)

    def append_records(self, partition: int, pairs: Sequence[tuple[bytes | None, bytes | None]],
                       timestamp_ms: int | None = None) -> AppendResult:
        """Append key/value records as one uncompressed, non-transactional batch."""
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        return self.append(partition, records.build_batch(list(pairs), timestamp=stamp))

    def replay(self, partition: int) -> Iterator[tuple[records.BatchHeader, bytes]]:
        """Every batch from the log start to the log end (header, buffer), for a
        new leader's owner (``partition_queries.replay_batches``)."""
        return partition_queries.replay_batches(self.replicas, (self.name, partition))

    def read_records(self, partition: int, from_offset: int,
                     max_bytes: int) -> list[tuple[int, bytes | None, bytes]]:
        """(offset, key, value) of committed records at or after ``from_offset``
        (null values skipped); below the log start, from the log start."""
        part = self.replicas.partition((self.name, partition))
        lg = part.log
        start = max(from_offset, lg.log_start_offset)
        got = lg.read(start, max_bytes, part.high_watermark, min_one_batch=True)
        out: list[tuple[int, bytes | None, bytes]] = []
        for header in records.iter_headers(got.data):
            for rec in records.decode_records(got.data, header):
                if rec.offset >= from_offset and rec.value is not None:
                    out.append((rec.offset, rec.key, rec.value))
        return out

    def watch_committed(self, partitions: Iterable[int]) -> AbstractContextManager[trio.Event]:
        """An event set when the high watermark of one of ``partitions`` moves on,
        or one moves or goes (``ReplicaManager.watch_fetches``)."""
        return self.replicas.watch_fetches([(self.name, p) for p in partitions], follower=False)

    def log_start_offset(self, partition: int) -> int:
        return self.replicas.partition((self.name, partition)).log.log_start_offset

    def log_end_offset(self, partition: int) -> int:
        return self.replicas.partition((self.name, partition)).log.end_offset

    def roll(self, partition: int) -> None:
        """Start a new segment of ``partition`` at its log end."""
        self.replicas.partition((self.name, partition)).log.roll()

    def delete_records(self, partition: int, offset: int) -> int:
        """Move the log start of ``partition`` (led here) to ``offset``; the new log start."""
        return partition_queries.delete_records(self.replicas, (self.name, partition), offset)

    def end_offset(self, partition: int) -> int:
        """The partition's high watermark."""
        return self.replicas.partition((self.name, partition)).high_watermark


class InternalTopics:
    """The coordinators' internal topics, configured from broker config (the
    remote log metadata topic is configured by the tiering wiring from rlmm.config.*)."""

    def __init__(self, config: BrokerConfig, admin: TopicAdmin, metadata: MetadataCache,
                 replicas: ReplicaManager) -> None:
        def topic(name: str, partitions: int, rf: int, configs: dict[str, str]) -> InternalTopic:
            return InternalTopic(name, partitions, rf, configs, admin, metadata, replicas)

        self.offsets = topic(
            OFFSETS_TOPIC, config["offsets.topic.num.partitions"],
            config["offsets.topic.replication.factor"],
            {"cleanup.policy": "compact", "compression.type": "producer",
             "segment.bytes": str(config["offsets.topic.segment.bytes"])})
        txn_configs = {"cleanup.policy": "compact", "compression.type": "producer",
                       "segment.bytes": str(config["transaction.state.log.segment.bytes"])}
        if config["zookeeper.connect"]:
            # As Kafka: the state log refuses writes below this many in-sync replicas
            # (a single node has one replica, so it keeps the broker default).
            txn_configs["min.insync.replicas"] = str(config["transaction.state.log.min.isr"])
        self.transactions = topic(
            TRANSACTION_TOPIC, config["transaction.state.log.num.partitions"],
            config["transaction.state.log.replication.factor"], txn_configs)
