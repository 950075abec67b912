"""One metadata partition of ``__remote_log_metadata`` as the topic-based
manager (``storage.remote.rlmm``) folds it: the caches of its user
partitions, how far it is read, and the snapshot bookkeeping.

Folding is in offset order and never twice: a record below ``next_offset``
is skipped, and so is a record of a user partition restored from a snapshot
at or below the snapshot's own offset (``skip_through``). A record that
cannot be decoded, belongs to another metadata partition or is an illegal
transition is logged and dropped (the fold returns why, for a writer
checking its own record). DELETE_PARTITION_FINISHED forgets its user
partition (cache and snapshot).

Concurrency: called on the trio thread, holding ``lock``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog
import trio

from storage.remote import rlmm_snapshot
from storage.remote.metadata_cache import (
    RemoteLogMetadataCache,
    RemoteLogMetadataError,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.rlmm_serde import MetadataRecordError, deserialize
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

_UNFINISHED = (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
               RemotePartitionDeleteState.DELETE_PARTITION_STARTED)


@dataclass(slots=True)
class MetadataPartition:
    """Everything known about one metadata partition (number ``p``)."""

    p: int
    partition_for: Callable[[TopicIdPartition], int]
    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = field(default_factory=dict)
    next_offset: int = 0
    # User partitions restored from snapshots -> the snapshot's metadata offset.
    skip_through: dict[TopicIdPartition, int] = field(default_factory=dict)
    # User partitions changed since their snapshot; snapshot files to delete.
    dirty: set[TopicIdPartition] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    assigned: set[TopicIdPartition] = field(default_factory=set)
    owned: bool = False  # this broker leads it: followed whole
    ready: bool = False
    lock: trio.Lock = field(default_factory=trio.Lock)

    @property
    def followed(self) -> bool:
        """Whether the consumer task reads it (a user partition assigned, or led here)."""
        return bool(self.assigned) or self.owned

    def unfinished_deletions(self) -> list[TopicIdPartition]:
        """User partitions whose deletion is marked or started, not finished."""
        return [tip for tip, cache in self.caches.items()
                if cache.delete_metadata and cache.delete_metadata.state in _UNFINISHED]

    def fold_all(self, batch: Sequence[tuple[int, bytes]],
                 through: int | None = None) -> Exception | None:
        """Fold the records of ``batch`` not folded yet; why ``through`` was refused."""
        refused = None
        for offset, value in batch:
            if offset >= self.next_offset:
                error = self._fold(offset, value)
                refused = error if offset == through else refused
                self.next_offset = offset + 1
        return refused

    def reset(self) -> None:
        """Forget everything: the partition is read again from its start."""
        self.removed.update(rlmm_snapshot.snapshot_file_name(t) for t in self.caches)
        self.caches.clear()
        self.skip_through.clear()
        self.dirty.clear()
        self.next_offset = 0

    def _fold(self, offset: int, value: bytes) -> Exception | None:
        p = self.p
        try:
            event = deserialize(value)
        except MetadataRecordError as exc:
            log.error("dropping undecodable remote log metadata", metadata_partition=p,
                      offset=offset, error=str(exc))
            return exc
        tip = event.topic_id_partition
        if self.partition_for(tip) != p:
            log.error("dropping remote log metadata in the wrong partition", tip=str(tip),
                      metadata_partition=p, offset=offset)
            return RemoteLogMetadataError(f"{tip} does not belong to metadata partition {p}")
        if offset <= self.skip_through.get(tip, -1):
            return None
        cache = self.caches.get(tip) or RemoteLogMetadataCache(tip)
        try:
            cache.apply(event)
        except (RemoteLogMetadataError, ValueError) as exc:
            log.warning("dropping remote log metadata", metadata_partition=p, offset=offset,
                        error=str(exc))
            return exc
        if (isinstance(event, RemotePartitionDeleteMetadata)
                and event.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED):
            self.caches.pop(tip, None)
            self.dirty.discard(tip)
            self.removed.add(rlmm_snapshot.snapshot_file_name(tip))
        else:
            self.caches[tip] = cache
            self.dirty.add(tip)
        return None
