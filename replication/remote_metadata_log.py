"""The ``__remote_log_metadata`` topic as the remote log metadata manager sees it.

Adapts an ``InternalTopic`` to storage.remote.rlmm.MetadataLog: records are
appended as single-record batches with a null key (a compaction's
restatement: keyed batches, ``append_at_end``) and read back up to the high
watermark (committed), from the log start when asked for less.
``ReplicaMetadataLog`` is the single-node form (every partition local);
``ClusterMetadataLog`` the cluster form. The
topic (cleanup.policy=delete, tiering off, retention
rlmm.config.remote.log.metadata.topic.retention.ms, default -1) is created
on first use.

Long-polls (``poll``), as a Kafka consumer's fetches: the partitions led
here wait on the local high watermark (the consumer fetch purgatory's
wake-up); those led by another broker go to it as one Fetch per leader with
fetch.max.wait.ms / fetch.min.bytes, over connections of their own (a
parked Fetch must not hold up the manager's Produce requests to the same
broker).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import structlog
import trio

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from replication import leader_requests
from replication.internal_topics import InternalTopic
from replication.metadata_cache import MetadataCache
from replication.peer import Peer, PeerPool
from storage.remote.rlmm_api import PollLimits, TopicRecord

log = structlog.get_logger(__name__)

# poll_groups' key for partitions without a known leader: their poll waits.
_NO_LEADER = -1
# Records per batch when a restatement of a metadata partition is appended:
# about 150 KB each, well under the default max.message.bytes and replica
# fetch sizes, so a follower or a reader gets it a batch at a time.
APPEND_AT_END_BATCH_RECORDS = 1000
# ListOffsets timestamp for the earliest offset (the log start).
EARLIEST_TIMESTAMP = -2

Build = Callable[[int], Sequence[tuple[bytes | None, bytes]] | None]


def _decoded(data: bytes, from_offset: int) -> list[TopicRecord]:
    """The non-null records in ``data`` from ``from_offset`` on."""
    out: list[TopicRecord] = []
    for header in records.iter_headers(data):
        for rec in records.decode_records(data, header):
            if rec.offset >= from_offset and rec.value is not None:
                out.append(TopicRecord(rec.offset, rec.key, rec.value))
    return out


def _read_local(topic: InternalTopic, partition: int, from_offset: int,
                max_bytes: int) -> list[TopicRecord]:
    """Committed records of a partition led here (below its log start: from the log start)."""
    return [TopicRecord(*r) for r in topic.read_records(partition, from_offset, max_bytes)]


async def _poll_local(topic: InternalTopic, positions: Mapping[int, int],
                      limits: PollLimits) -> dict[int, list[TopicRecord]]:
    """Long-poll partitions of ``topic`` this broker leads (see MetadataLog.poll)."""
    deadline = trio.current_time() + limits.max_wait_ms / 1000
    while True:
        with topic.watch_committed(positions) as news:
            got = {p: found for p, offset in positions.items()
                   if (found := _read_local(topic, p, offset, limits.partition_max_bytes))}
            size = sum(len(r.value) for found in got.values() for r in found)
            if (got and size >= limits.min_bytes) or trio.current_time() >= deadline:
                return got
            with trio.move_on_at(deadline):
                await news.wait()


def _append_at_end(topic: InternalTopic, partition: int, build: Build) -> int | None:
    """``MetadataLog.append_at_end`` over a partition led here (both forms)."""
    if not topic.is_leader(partition):
        return None
    end = topic.end_offset(partition)
    if topic.log_end_offset(partition) != end:
        return None
    pairs = build(end)
    if not pairs:
        return None
    # A new segment: once the log start moves here, every older segment is
    # wholly below it and its file goes at once (a follower frees its own
    # when its segment holding the log start rolls, as with retention).
    topic.roll(partition)
    first = None
    for i in range(0, len(pairs), APPEND_AT_END_BATCH_RECORDS):
        result = topic.append_records(partition, pairs[i:i + APPEND_AT_END_BATCH_RECORDS])
        first = result.first_offset if first is None else first
    return first


def _start_offset(topic: InternalTopic, partition: int) -> int | None:
    return topic.log_start_offset(partition) if topic.is_leader(partition) else None


class ReplicaMetadataLog:
    def __init__(self, topic: InternalTopic) -> None:
        self.topic = topic

    async def ensure_topic(self, num_partitions: int) -> int:
        self.topic.configured_partitions = num_partitions
        return await self.topic.ensure()

    async def append(self, partition: int, record: bytes) -> int:
        """Append and fsync: a metadata record (COPY_SEGMENT_FINISHED above all)
        must survive a power loss before local data is deleted on its strength;
        one broker has no other replica to keep it (cluster mode relies on
        acks=all instead, as Kafka does)."""
        offset = self.topic.append_records(partition, [(None, record)]).first_offset
        await self.topic.flush(partition)
        return offset

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[TopicRecord]:
        return _read_local(self.topic, partition, from_offset, max_bytes)

    def end_offset(self, partition: int) -> int:
        return self.topic.end_offset(partition)

    def poll_groups(self, partitions: Iterable[int]) -> list[list[int]]:
        group = sorted(partitions)
        return [group] if group else []

    async def poll(self, positions: Mapping[int, int], limits: PollLimits
                   ) -> Mapping[int, Sequence[TopicRecord]]:
        return await _poll_local(self.topic, positions, limits)

    def start_offset(self, partition: int) -> int | None:
        return _start_offset(self.topic, partition)

    def append_at_end(self, partition: int, build: Build) -> int | None:
        return _append_at_end(self.topic, partition, build)

    async def delete_before(self, partition: int, offset: int) -> None:
        """fsync first (as ``append``): the records that restate the dropped
        ones must be on disk before those are deleted."""
        await self.topic.flush(partition)
        self.topic.delete_records(partition, offset)


# "Unknown": where this broker does not lead a metadata partition, the manager
# reads until a fetch comes back empty instead of up to an end offset.
UNKNOWN_END = 2**63 - 1


class ClusterMetadataLog:
    """``__remote_log_metadata`` in cluster mode, as Kafka's manager uses it
    through a producer and a consumer.

    Appends go to the metadata partition's leader with acks=all: in process
    when that is this broker, else a Produce request. Reads, like a Kafka
    consumer's, come from the leader up to its high watermark (committed): the
    local log when this broker leads the metadata partition, else a Fetch.
    (A local follower replica would learn the high watermark only with its
    next fetch, so a writer could not read its own write at once.)

    Error handling: a leader that is unknown, moved or unreachable raises
    ``KafkaApiError`` / ``PeerError`` (retriable: the copier backs off, the
    manager's poll tries again).

    Args:
        peers: connections for Produce and the catch-up reads.
        poll_peers: connections for the long-polls.
        timeout_ms: of a Produce (acks=all) and a catch-up Fetch.
        poll_timeout_ms: of a long-poll, beyond its wait.
    """

    def __init__(self, topic: InternalTopic, node_id: int, metadata: MetadataCache,
                 peers: PeerPool, timeout_ms: int, poll_peers: PeerPool,
                 poll_timeout_ms: int) -> None:
        self.topic = topic
        self.node_id = node_id
        self.metadata = metadata
        self.peers = peers
        self.timeout_ms = timeout_ms
        self.poll_peers = poll_peers
        self.poll_timeout_ms = poll_timeout_ms

    async def ensure_topic(self, num_partitions: int) -> int:
        """Create the topic if the cluster has none.

        Raises:
            KafkaApiError: it cannot be created yet (fewer live brokers than
                its replication factor), or another broker just created it
                (TOPIC_ALREADY_EXISTS: our metadata shows it once the
                controller's UpdateMetadata arrives); the manager retries.
        """
        self.topic.configured_partitions = num_partitions
        return await self.topic.ensure()

    def _leader(self, partition: int) -> int:
        state = self.metadata.partition((self.topic.name, partition))
        if state is None or state.leader < 0:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE,
                                f"{self.topic.name}-{partition} has no leader")
        return state.leader

    def _peer(self, node: int) -> Peer:
        peer = self.peers.get(node)
        if peer is None:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {node} unknown")
        return peer

    async def append(self, partition: int, record: bytes) -> int:
        leader = self._leader(partition)
        if leader == self.node_id:
            result = self.topic.append_records(partition, [(None, record)])
            error = await self.topic.wait_durable(partition, self.timeout_ms)
            if error is not ErrorCode.NONE:
                raise KafkaApiError(error, f"{self.topic.name}-{partition}: {error.name}")
            return result.first_offset
        batch = records.build_batch([(None, record)], timestamp=int(time.time() * 1000))
        return await leader_requests.produce(self._peer(leader), self.topic.name, partition,
                                             batch, self.timeout_ms)

    def _led_here(self, partition: int) -> bool:
        return self.topic.is_leader(partition)

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[TopicRecord]:
        """Below the leader's log start (records dropped by compaction), reads
        from the log start, which the leader gives with ListOffsets."""
        if self._led_here(partition):
            return _read_local(self.topic, partition, from_offset, max_bytes)
        peer = self._peer(self._leader(partition))
        try:
            data, _ = await leader_requests.fetch(peer, self.topic.name, partition,
                                                  from_offset, max_bytes)
        except KafkaApiError as exc:
            if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            start, _ = await leader_requests.list_offset(peer, self.topic.name, partition,
                                                         EARLIEST_TIMESTAMP)
            if start <= from_offset:
                raise
            from_offset = start
            data, _ = await leader_requests.fetch(peer, self.topic.name, partition,
                                                  from_offset, max_bytes)
        return _decoded(data, from_offset)

    def end_offset(self, partition: int) -> int:
        if self._led_here(partition):
            return self.topic.end_offset(partition)
        return UNKNOWN_END

    def _serves(self, partition: int) -> int:
        """Who answers polls of ``partition``: this broker, another, or _NO_LEADER."""
        if self._led_here(partition):
            return self.node_id
        state = self.metadata.partition((self.topic.name, partition))
        return _NO_LEADER if state is None or state.leader < 0 else state.leader

    def poll_groups(self, partitions: Iterable[int]) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for p in sorted(partitions):
            groups.setdefault(self._serves(p), []).append(p)
        return sorted(groups.values())

    async def poll(self, positions: Mapping[int, int], limits: PollLimits
                   ) -> Mapping[int, Sequence[TopicRecord]]:
        """Below the leader's log start (compacted away), a position makes the
        Fetch fail OFFSET_OUT_OF_RANGE: the group is then answered at once by
        a catch-up ``read`` of each partition, which starts there at the log
        start (the manager then finds records missing and rebuilds)."""
        servers = {self._serves(p) for p in positions}
        if len(servers) != 1:
            raise KafkaApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                f"{self.topic.name} partitions {sorted(positions)} moved")
        server = servers.pop()
        if server == _NO_LEADER:  # nobody to ask: wait a poll's time, then group again
            await trio.sleep(limits.max_wait_ms / 1000)
            return {}
        if server == self.node_id:
            return await _poll_local(self.topic, positions, limits)
        peer = self.poll_peers.get(server)
        if peer is None:
            raise KafkaApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {server} unknown")
        try:
            data = await leader_requests.long_poll(
                peer, self.topic.name, positions, limits.max_wait_ms, max(limits.min_bytes, 1),
                limits.max_bytes, limits.partition_max_bytes, self.poll_timeout_ms)
        except KafkaApiError as exc:
            if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            return {p: found for p, offset in sorted(positions.items())
                    if (found := await self.read(p, offset, limits.partition_max_bytes))}
        return {p: found for p, raw in data.items()
                if p in positions and (found := _decoded(raw, positions[p]))}

    def start_offset(self, partition: int) -> int | None:
        return _start_offset(self.topic, partition)

    def append_at_end(self, partition: int, build: Build) -> int | None:
        return _append_at_end(self.topic, partition, build)

    async def delete_before(self, partition: int, offset: int) -> None:
        """Waits (acks=all) until the in-sync replicas hold our appends, the
        restatement above all, before the log start moves; followers move
        theirs when they see the leader's in a fetch response."""
        error = await self.topic.wait_durable(partition, self.timeout_ms)
        if error is not ErrorCode.NONE:
            raise KafkaApiError(error, f"{self.topic.name}-{partition}: {error.name}")
        self.topic.delete_records(partition, offset)
