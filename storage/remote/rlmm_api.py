"""What the topic-based RemoteLogMetadataManager needs (the interface is
``storage.remote.api``).

``MetadataLog`` is what the topic-based implementation
(``storage.remote.rlmm``) needs from the broker: the partitions of
``__remote_log_metadata``, without any broker internals. ``metadata_partition``
maps a user partition to the metadata partition that orders its events.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from kafka.partitioner.default import murmur2

from storage.remote.types import TopicIdPartition

TOPIC_NAME = "__remote_log_metadata"
# rlmm.config.remote.log.metadata.topic.num.partitions and its KIP default.
NUM_PARTITIONS_CONFIG = "remote.log.metadata.topic.num.partitions"
DEFAULT_NUM_PARTITIONS = 50
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _long_hash(value: int) -> int:
    # java.lang.Long.hashCode: (int) (value ^ (value >>> 32))
    value &= _MASK64
    return (value ^ (value >> 32)) & _MASK32


@functools.lru_cache(maxsize=65536)  # asked on every remote read
def metadata_partition(tip: TopicIdPartition, num_partitions: int) -> int:
    """The metadata partition holding ``tip``'s events, as Kafka computes it.

    Kafka's RemoteLogMetadataTopicPartitioner hashes not the
    ``topicId:topic-partition`` string the KIP's pseudo-code suggests, but
    ``Objects.hash(topicId.lsb, topicId.msb, partition)`` as 4 big-endian
    bytes: ``toPositive(murmur2(bytes)) % num_partitions``. We match Kafka so
    a Kafka broker reading our topic finds every partition where it looks.
    """
    msb, lsb = tip.topic_id.int >> 64, tip.topic_id.int & _MASK64
    h = 1  # java.util.Arrays.hashCode over (Long lsb, Long msb, Integer partition)
    for element in (_long_hash(lsb), _long_hash(msb), tip.partition & _MASK32):
        h = (31 * h + element) & _MASK32
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % num_partitions


@dataclasses.dataclass(frozen=True, slots=True)
class PollLimits:
    """A long-poll's bounds: the consumer's fetch.max.wait.ms, fetch.min.bytes,
    fetch.max.bytes and max.partition.fetch.bytes."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int


# Key of the records of a restatement (``rlmm_compaction``):
# ``tierd.rlmm.restatement:<first offset>:<record count>``; every other
# record has no key, as Kafka writes them.
_KEY_PREFIX = b"tierd.rlmm.restatement:"


@dataclasses.dataclass(frozen=True, slots=True)
class Restatement:
    """What a restatement record's key says about the restatement it belongs to."""

    first_offset: int
    count: int

    @property
    def end(self) -> int:
        """The offset after its last record."""
        return self.first_offset + self.count


def restatement_key(first_offset: int, count: int) -> bytes:
    return _KEY_PREFIX + f"{first_offset}:{count}".encode()


def parse_restatement_key(key: bytes | None) -> Restatement | None:
    """The restatement a record key names, None for any other key (or none)."""
    if key is None or not key.startswith(_KEY_PREFIX):
        return None
    first, sep, count = key[len(_KEY_PREFIX):].partition(b":")
    if not sep or not first.isdigit() or not count.isdigit() or int(count) == 0:
        return None
    return Restatement(int(first), int(count))


class TopicRecord(NamedTuple):
    """One record of a metadata partition as the manager reads it."""

    offset: int
    key: bytes | None
    value: bytes


class MetadataLog(Protocol):
    """The internal topic as the broker provides it (adapter over ReplicaManager/Log).

    The topic is ``__remote_log_metadata`` with cleanup.policy=delete,
    retention.ms from rlmm.config.remote.log.metadata.topic.retention.ms
    (default -1), remote.storage.enable=false.
    """

    async def ensure_topic(self, num_partitions: int) -> int:
        """Create the topic with ``num_partitions`` partitions unless it exists.

        Returns:
            The topic's actual partition count.
        """
        ...

    async def append(self, partition: int, record: bytes) -> int:
        """Append one record (key null, value ``record``) to ``partition``.

        Returns once the record is committed (readable below ``end_offset``).

        Returns:
            The record's offset.
        """
        ...

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[TopicRecord]:
        """Committed records from ``from_offset`` on, in order (null values left out).

        At least one record if any exists at or after ``from_offset`` (even
        one larger than ``max_bytes``); an offset below the log start reads
        from the log start; an empty result at the end.
        """
        ...

    def end_offset(self, partition: int) -> int:
        """The offset after the last committed record (the high watermark)."""
        ...

    def poll_groups(self, partitions: Iterable[int]) -> list[list[int]]:
        """``partitions`` split into the groups one ``poll`` serves together (in
        a cluster: one per leader), each sorted, the groups sorted."""
        ...

    async def poll(self, positions: Mapping[int, int], limits: PollLimits
                   ) -> Mapping[int, Sequence[TopicRecord]]:
        """Long-poll one group: committed records from each partition's position
        (as ``read``: below the log start, from the log start).

        Returns as soon as the records found hold ``limits.min_bytes`` (at
        least one record when it is 0 or 1), or after ``limits.max_wait_ms``
        with what there is (maybe nothing). Partitions without records may be
        left out of the answer.

        Raises:
            Exception: the group cannot be read now (leader moved or down):
                the caller backs off and groups again.
        """
        ...

    def start_offset(self, partition: int) -> int | None:
        """The log start offset of ``partition`` if this broker leads it, else None."""
        ...

    def append_at_end(self, partition: int, build: Callable[
            [int], Sequence[tuple[bytes | None, bytes]] | None]) -> int | None:
        """Append what ``build(end)`` returns, in one step, as ``partition``'s leader.

        Only when this broker leads ``partition`` and every record of it is
        committed (end = the high watermark = the log end): ``build`` is
        called with that end offset, synchronously, and its (key, value)
        records go in right after it, nothing in between. Not awaitable on
        purpose: nothing else can append between ``build`` and the append.

        Returns:
            The offset of the first record appended; None if not the leader,
            something is not committed yet, or ``build`` returned None.
        """
        ...

    async def delete_before(self, partition: int, offset: int) -> None:
        """Once every record below ``offset`` and our appends are committed
        (durable), move ``partition``'s log start to ``offset`` (DeleteRecords).

        Raises:
            Exception: not the leader, or not committed in time (retriable).
        """
        ...
