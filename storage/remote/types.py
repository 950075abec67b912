"""Value types of KIP-405's remote storage API.

These mirror the Java classes of ``org.apache.kafka.server.log.remote.storage``
(RemoteLogSegmentId, RemoteLogSegmentMetadata, LogSegmentData, ...) with
Python names. They carry no behaviour beyond validation: the remote storage
managers (``storage.remote.rsm``) move bytes, the remote log metadata manager
owns the segment lifecycle.

The state numbers of RemoteLogSegmentState are the KIP's byte ids; they go
over the wire in the ``__remote_log_metadata`` records, so never renumber.
"""

from __future__ import annotations

import enum
import os
import uuid
from dataclasses import dataclass

from storage.log.checkpoint import topic_id_to_str

# A local file handed to copy_log_segment_data.
StrPath = str | os.PathLike[str]


class RemoteLogSegmentState(enum.IntEnum):
    """Lifecycle of a remote segment; values are the KIP's byte ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class IndexType(enum.Enum):
    """The auxiliary files of a segment that fetch_index can return (KIP-405)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition named by topic id as well as name (names can be reused)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's TopicIdPartition.toString: "<topicId>:<topic>-<partition>".
        return f"{topic_id_to_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A universally unique id for one copy attempt of one local segment."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        """A fresh id; every copy attempt gets its own (KIP-405)."""
        return cls(topic_id_partition, uuid.uuid4())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{topic_id_to_str(self.id)}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What the metadata manager records about one remote segment.

    Update with ``dataclasses.replace``. Not hashable (holds a dict); key
    maps by ``remote_log_segment_id``.

    Attributes:
        remote_log_segment_id: unique id of this copy of the segment.
        start_offset: first offset in the segment (inclusive).
        end_offset: last offset in the segment (inclusive).
        max_timestamp_ms: largest record timestamp in the segment.
        broker_id: the broker that produced this event.
        event_timestamp_ms: wall-clock time at which ``state`` was set.
        segment_leader_epochs: leader epoch -> first offset of that epoch
            within the segment; never empty.
        segment_size_in_bytes: size of the .log file; the storage managers
            check the stored object against it.
        custom_metadata: opaque bytes the storage manager returned from the
            copy (KIP-917), or None.
        state: lifecycle state.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: dict[int, int]
    segment_size_in_bytes: int
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"bad offsets {self.start_offset}..{self.end_offset}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"negative segment size {self.segment_size_in_bytes}")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of one closed segment, as handed to copy (KIP-405).

    Attributes:
        log_segment: the ``.log`` file.
        offset_index: the ``.index`` file.
        time_index: the ``.timeindex`` file.
        transaction_index: the ``.txnindex`` file, None if the segment has none.
        producer_snapshot_index: the producer-state ``.snapshot`` taken at the
            segment's next offset, None if there is none.
        leader_epoch_index: leader-epoch-checkpoint text truncated to the
            segment's end offset, as bytes.
        codec_manifest: not KIP-405's: the codec manifest object of a
            transformed copy (``storage.remote.segment_codec``), stored beside
            the other objects; None for a plain copy. The indexes are then
            the transformed bytes.
    """

    log_segment: StrPath
    offset_index: StrPath | bytes
    time_index: StrPath | bytes
    transaction_index: StrPath | bytes | None
    producer_snapshot_index: StrPath | bytes | None
    leader_epoch_index: bytes
    codec_manifest: bytes | None = None


class RemoteStorageError(Exception):
    """A remote storage operation failed.

    Attributes:
        retriable: True if the same call may succeed later (server errors,
            throttling, connection problems); False if retrying cannot help
            (access denied, missing bucket, corrupt object, bad local file).
    """

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class RemoteResourceNotFoundError(RemoteStorageError):
    """The requested segment or index does not exist in remote storage."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)
