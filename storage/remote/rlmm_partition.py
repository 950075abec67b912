"""One partition of ``__remote_log_metadata`` as the metadata manager folds it.

``MetadataPartition`` owns the caches of the user partitions whose events go
to that metadata partition, the reader's position, the snapshot bookkeeping,
and the rules for folding records, whichever way they were read (a catch-up
read or a long-poll, ``rlmm_consumer``):

* in offset order and never twice: a record below ``next_offset`` is
  skipped, and so is a record of a user partition restored from a snapshot
  at or below the snapshot's own offset (``skip_through``);
* a record that cannot be decoded, belongs to another metadata partition or
  is an illegal transition is logged and dropped (the fold returns why, for
  a writer checking its own record);
* DELETE_PARTITION_FINISHED forgets its user partition (cache and snapshot);
* a restatement that says what the reader already holds is skipped; records
  found missing (the first record read is above ``next_offset``: compacted
  away below the log start) make the reader forget everything and rebuild
  from the first complete restatement (``rlmm_compaction``).

Concurrency: no awaits; the manager calls it on the trio thread, holding ``lock``.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from storage.remote.rlmm_api import Restatement, TopicRecord, metadata_partition, parse_restatement_key
from storage.remote.rlmm_serde import MetadataRecordError, deserialize
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

_UNFINISHED = (RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
               RemotePartitionDeleteState.DELETE_PARTITION_STARTED)


@dataclass(slots=True)
class MetadataPartition:
    """Everything known about one metadata partition.

    Attributes:
        index: the metadata partition's number.
        num_partitions: the topic's partition count (to check a record's place).
    """

    index: int
    num_partitions: int
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
    # False from records found missing (below the log start) until a complete
    # restatement is folded: the state is then not a fold of a log prefix.
    trusted: bool = True
    restating: Restatement | None = None
    lock: trio.Lock = field(default_factory=trio.Lock)

    @property
    def followed(self) -> bool:
        """Whether the consumer task reads it (a user partition assigned, or led here)."""
        return bool(self.assigned) or self.owned

    def unfinished_deletions(self) -> list[TopicIdPartition]:
        """User partitions whose deletion is marked or started, not finished."""
        return [tip for tip, cache in self.caches.items()
                if cache.delete_metadata and cache.delete_metadata.state in _UNFINISHED]

    def fold_all(self, batch: Sequence[TopicRecord],
                 through: int | None = None) -> Exception | None:
        """Fold the records of ``batch`` not folded yet, in order; why the record
        at ``through`` was refused, or None.

        A record above ``next_offset`` means the ones between are gone
        (compacted): everything held is forgotten, to be rebuilt from the
        next complete restatement.
        """
        refused = None
        for record in batch:
            if record.offset < self.next_offset:
                continue
            if record.offset > self.next_offset:
                log.warning("remote log metadata missing (compacted); rebuilding",
                            metadata_partition=self.index, expected=self.next_offset,
                            found=record.offset)
                self.forget(trusted=False)
            error = self.fold_record(record)
            refused = error if record.offset == through else refused
            self.next_offset = record.offset + 1
        return refused

    def reset(self) -> None:
        """Forget everything: the partition is read again from its start."""
        self.forget(trusted=True)
        self.next_offset = 0

    def forget(self, *, trusted: bool) -> None:
        """Drop every cache (and its snapshot file at the next sync)."""
        self.removed.update(rlmm_snapshot.snapshot_file_name(t) for t in self.caches)
        self.caches.clear()
        self.skip_through.clear()
        self.dirty.clear()
        self.trusted = trusted
        self.restating = None

    def fold_record(self, record: TopicRecord) -> Exception | None:
        """Fold one record, or skip it when it restates what the caches already hold.

        Returns:
            Why the record was refused, or None.
        """
        restatement = parse_restatement_key(record.key)
        pending = self.restating
        if restatement is None:
            if pending is not None and not self.trusted and record.offset < pending.end:
                log.warning("partial remote log metadata restatement skipped",
                            metadata_partition=self.index, first_offset=pending.first_offset)
                self.forget(trusted=False)
            return self.fold(record.offset, record.value)
        if not self.trusted and record.offset == restatement.first_offset:
            self.forget(trusted=False)
            self.restating = pending = restatement
        if pending != restatement:
            return None
        error = self.fold(record.offset, record.value)
        if record.offset == restatement.end - 1:
            self.trusted = True
            log.info("remote log metadata rebuilt from a restatement",
                     metadata_partition=self.index, first_offset=restatement.first_offset,
                     records=restatement.count)
        return error

    def fold(self, offset: int, value: bytes) -> Exception | None:
        """Apply one record value to its user partition's cache; why it was refused, or None."""
        p = self.index
        try:
            event = deserialize(value)
        except MetadataRecordError as exc:
            log.error("dropping undecodable remote log metadata", metadata_partition=p,
                      offset=offset, error=str(exc))
            return exc
        tip = event.topic_id_partition
        if metadata_partition(tip, self.num_partitions) != p:
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
