"""The plugin interfaces of tiered storage (KIP-405), for implementations
written outside tierd, and the value types they exchange.

Two plugins, chosen by config:

- ``remote.log.storage.manager.class.name``: a ``RemoteStorageManager``
  (``filesystem``, ``s3``, or a dotted path ``pkg.mod.Class`` whose
  constructor takes the ``rsm.config.*`` settings, prefix stripped, values
  as strings). It moves the bytes of closed segments and knows nothing else.
  A manager that can also list its tier (``ListableRemoteStorage``) serves
  the operator tools (``tierd admin reconcile``); the broker never lists.
- ``remote.log.metadata.manager.class.name``: a ``RemoteLogMetadataManager``
  (``topic-based``, or a dotted path whose constructor takes the
  ``rlmm.config.*`` settings). It knows which segments exist and in which
  state, strongly consistent, so the storage manager may sit on an
  eventually consistent store.

Concurrency: every ``RemoteStorageManager`` method blocks and is called from
worker threads, any number at once. ``RemoteLogMetadataManager`` runs on the
broker's trio event loop: its lookups must not block, its writes are async.

Error handling: storage failures raise ``RemoteStorageError`` (``retriable``
says whether to retry; ``RemoteResourceNotFoundError`` for a missing object);
metadata lookups of a partition not caught up raise ``MetadataNotReady``.

What the interfaces are written against: ``RemoteLogSegmentMetadata`` and
the other value types re-exported here (defined in ``storage.remote.types``
and ``storage.remote.metadata_cache``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import trio

from storage.remote.metadata_cache import (
    RemoteLogMetadataError,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)

__all__ = [
    "IndexType",
    "ListableRemoteStorage",
    "LogSegmentData",
    "MetadataNotReady",
    "RemoteLogMetadataError",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "SegmentObjectName",
    "StoredObject",
    "TopicIdPartition",
]


@runtime_checkable
class RemoteStorageManager(Protocol):
    """Copy, read and delete remote segments (KIP-405's RemoteStorageManager).

    Objects are addressed by ``RemoteLogSegmentMetadata`` alone: its topic id,
    partition, start offset and segment uuid name them, and its
    ``segment_size_in_bytes`` says how long the stored ``.log`` must be.

    Concurrency:
        Every method blocks on disk or network I/O and must never run on the
        trio event loop. Callers run them in worker threads, each pool with
        its own limiter named after the KIP-405 pool, e.g.
        ``await trio.to_thread.run_sync(rsm.fetch_log_segment, md, 0,
        limiter=reader_limiter)``. Implementations are thread-safe: any
        number of calls may run at once, for different segments or (copy
        racing a cleanup delete) the same one.

    Error handling:
        Every storage failure raises ``RemoteStorageError`` whose
        ``retriable`` says whether a later retry may succeed; an object that
        does not exist raises its subclass ``RemoteResourceNotFoundError``.
        Data is never returned short or silently truncated: a stored object
        whose size disagrees with the metadata, or a response shorter than
        the range asked for, raises. Programming errors (a negative
        position) raise ``ValueError``.
    """

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """Store the segment's log and auxiliary files.

        Idempotent: copying the same segment id again overwrites. A copy that
        fails removes whatever it had written before raising.

        Args:
            metadata: the segment's metadata (state COPY_SEGMENT_STARTED).
            data: the local files; optional indexes may be None.

        Returns:
            Custom metadata to record with the segment (KIP-917), or None.

        Raises:
            RemoteStorageError: a local file could not be read (not
                retriable) or the store failed.
        """
        ...

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """Read bytes ``start_position..end_position`` (both inclusive) of the .log.

        ``end_position`` None, or past the end, means the end of the segment.

        Raises:
            ValueError: negative start, or end before start.
            RemoteResourceNotFoundError: the segment is not stored.
            RemoteStorageError: start past the end of the segment, a stored
                object of the wrong size, a short response, a store failure.
        """
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole content of one auxiliary file of the segment.

        Raises:
            RemoteResourceNotFoundError: not stored (e.g. the segment had no
                transaction index); callers may rebuild it from the log.
            RemoteStorageError: a store failure or a short response.
        """
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment, including leftovers of a
        crashed copy. Idempotent: deleting what is gone succeeds.

        Raises:
            RemoteStorageError: the store failed; some objects may remain.
        """
        ...

    def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class SegmentObjectName:
    """What an object's name says: its segment, start offset and suffix.

    ``suffix`` is what follows ``<offset>-<uuid>.``: ``log``, ``index``, ...,
    or ``log.tmp`` for the filesystem manager's temp file of a copy.
    """

    segment_id: RemoteLogSegmentId
    start_offset: int
    suffix: str


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object of a remote tier, as ``list_objects`` sees it.

    Attributes:
        key: the name relative to the tier's root (directory or key prefix).
        size: length in bytes.
        modified_s: last write, in seconds since the epoch.
        name: what the name says, or None for a name no storage manager writes.
    """

    key: str
    size: int
    modified_s: float
    name: SegmentObjectName | None


@runtime_checkable
class ListableRemoteStorage(Protocol):
    """A storage manager that can also list its tier (the built-ins can).

    Not part of KIP-405: the broker never lists. Operator tools do, to find
    objects that the metadata does not know (``tierd admin reconcile``).
    """

    def partition_prefix(self, tip: TopicIdPartition) -> str:
        """The ``list_objects`` prefix holding exactly ``tip``'s objects."""
        ...

    def list_objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every stored object whose key starts with ``prefix``.

        Raises:
            RemoteStorageError: the store failed (possibly after some objects).
        """
        ...


class MetadataNotReady(RemoteLogMetadataError):
    """The metadata of this partition is not assigned here or not caught up yet; retry later."""



class RemoteLogMetadataManager(Protocol):
    """KIP-405's RemoteLogMetadataManager, trio style.

    Writes are async and durable on return. Lookups are synchronous and may
    raise MetadataNotReady.
    """

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Publish a new segment copy (state COPY_SEGMENT_STARTED)."""
        ...

    async def update_remote_log_segment_metadata(
            self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Publish a state change of an existing segment."""
        ...

    async def put_remote_partition_delete_metadata(
            self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Publish a deletion state of a whole partition."""
        ...

    def remote_log_segment_metadata(self, tip: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment with ``offset`` written in ``leader_epoch``."""
        ...

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        """Highest offset of ``leader_epoch`` in remote storage, None if none."""
        ...

    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        """Segments not yet deleted (all, or of one epoch), ordered by start offset."""
        ...

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int:
        """Sum of ``segment_size_in_bytes`` over ``list_remote_log_segments``."""
        ...

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        """Start materialising the metadata of these partitions."""
        ...

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop materialising the metadata of these partitions."""
        ...

    async def ensure_ready(self, tip: TopicIdPartition) -> None:
        """Bring ``tip``'s metadata up to date now (``tip`` must be assigned)."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Background work (an implementation may have none); started() once usable."""
        ...

    async def close(self) -> None:
        """Persist what is needed for a fast restart; later writes raise."""
        ...

    def is_ready(self, tip: TopicIdPartition) -> bool:
        """Whether ``tip``'s metadata is assigned here and caught up, so lookups
        answer without ``MetadataNotReady`` (the manager skips a partition's
        copy and expiry until it is)."""
        ...

    def partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The partition's deletion state (KIP-405's partition delete
        lifecycle): None if never marked or once DELETE_PARTITION_FINISHED."""
        ...
