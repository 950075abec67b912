"""In-memory remote log metadata of one user partition, and its two lifecycles.

Theory of operation
-------------------
Every remote segment is one copy attempt with its own uuid. Its metadata goes
through a small state machine, written as a table (``SEGMENT_TRANSITIONS``)::

    (new) -> COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED
                          \\______________________________________/       |
                                                                 DELETE_SEGMENT_FINISHED

A copy that fails (or whose leader dies) never finishes; the expirer deletes
it from COPY_SEGMENT_STARTED directly. DELETE_SEGMENT_FINISHED is terminal:
the segment is forgotten. Each state may also "move" to itself, as in
Kafka's RemoteLogSegmentState.isValidTransition: a leader that retries after
a timeout, or a new leader that redoes its predecessor's step, republishes
the same state, and that must be harmless. Anything else raises
``IllegalStateTransition``; the caller publishing an event gets it before
anything is written, and the metadata consumer logs and drops such a record
(as Kafka does) instead of crashing on it.

Partition deletion has its own table (``PARTITION_DELETE_TRANSITIONS``):
DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> DELETE_PARTITION_FINISHED,
self-moves allowed for the same reason.

Lookups follow Kafka's RemoteLogMetadataCache. Per leader epoch there is a
navigable map "start offset of the epoch within the segment -> segment",
holding only COPY_SEGMENT_FINISHED segments, plus a set of *unreferenced*
segments of that epoch (copy in progress, being deleted, or replaced by a
later leader's copy of the same offsets). So:

=================================  =======  ========  ==============  ========
method                             STARTED  FINISHED  DELETE_STARTED  DELETED
=================================  =======  ========  ==============  ========
remote_log_segment_metadata        no       yes       no              no
list_remote_log_segments([epoch])  yes      yes       yes             no
=================================  =======  ========  ==============  ========

The deep-dive's orphan (segment b33f: copied under epoch 0, leader died
before COPY_SEGMENT_FINISHED) therefore never serves reads but stays listed
until the expirer deletes it. When a new leader finishes a copy covering
offsets an older copy of the same epoch already covers (failover with tier
lag), the older copy becomes unreferenced, so reads go to the newest lineage.

Concurrency: no awaits and no locks; the owner (the metadata manager)
serialises calls on the trio thread.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

_S = RemoteLogSegmentState


class RemotePartitionDeleteState(enum.IntEnum):
    """Deletion of a whole remote partition; values are the KIP's byte ids."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_P = RemotePartitionDeleteState

# current state (None: not known yet) -> states it may move to.
SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset(
        {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset(),
}

PARTITION_DELETE_TRANSITIONS: dict[
    RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]
] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset(
        {_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED}),
    _P.DELETE_PARTITION_STARTED: frozenset(
        {_P.DELETE_PARTITION_STARTED, _P.DELETE_PARTITION_FINISHED}),
    _P.DELETE_PARTITION_FINISHED: frozenset(),
}


class RemoteLogMetadataError(Exception):
    """Base of the metadata manager's refusals."""


class IllegalStateTransition(RemoteLogMetadataError):
    """An event would move a segment or partition along no edge of its table."""

    def __init__(self, subject: object, current: enum.Enum | None, target: enum.Enum) -> None:
        current_name = current.name if current is not None else "(new)"
        super().__init__(f"{subject}: illegal transition {current_name} -> {target.name}")
        self.subject = subject
        self.current = current
        self.target = target


class UnknownSegmentError(RemoteLogMetadataError):
    """An update names a segment the cache does not hold (never added, or deleted)."""


def check_segment_transition(segment_id: RemoteLogSegmentId, current: RemoteLogSegmentState | None,
                             target: RemoteLogSegmentState) -> None:
    """Raise IllegalStateTransition unless ``current -> target`` is in the table."""
    if target not in SEGMENT_TRANSITIONS[current]:
        raise IllegalStateTransition(segment_id, current, target)


def check_partition_delete_transition(tip: TopicIdPartition,
                                      current: RemotePartitionDeleteState | None,
                                      target: RemotePartitionDeleteState) -> None:
    """Raise IllegalStateTransition unless ``current -> target`` is in the table."""
    if target not in PARTITION_DELETE_TRANSITIONS[current]:
        raise IllegalStateTransition(tip, current, target)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of an existing segment (KIP-405 RemoteLogSegmentMetadataUpdate)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A deletion-state event for a whole partition (KIP-405)."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


RemoteLogMetadata = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)


def _epoch_end_offset(metadata: RemoteLogSegmentMetadata, epoch: int) -> int:
    """Last offset of ``epoch`` within the segment: the next epoch's start - 1, or the end."""
    later = [start for e, start in metadata.segment_leader_epochs.items() if e > epoch]
    return min(later) - 1 if later else metadata.end_offset


class _EpochState:
    """Segments of one leader epoch (Kafka's RemoteLogLeaderEpochState)."""

    __slots__ = ("_starts", "_by_start", "unreferenced", "highest_offset")

    def __init__(self) -> None:
        # Sorted start offsets of COPY_SEGMENT_FINISHED segments, and their ids.
        self._starts: list[int] = []
        self._by_start: dict[int, RemoteLogSegmentId] = {}
        self.unreferenced: set[RemoteLogSegmentId] = set()
        # Highest offset of this epoch in any segment that reached COPY_SEGMENT_FINISHED.
        self.highest_offset: int | None = None

    def floor(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self._starts, offset)
        return self._by_start[self._starts[i - 1]] if i else None

    def segment_ids(self) -> list[RemoteLogSegmentId]:
        return [self._by_start[s] for s in self._starts] + list(self.unreferenced)

    def copy_finished(self, start: int, segment_id: RemoteLogSegmentId, epoch_end: int) -> None:
        # A later copy of offsets an earlier copy holds (a new leader redoing
        # a tier-lagged upload) replaces it: the earlier one becomes unreferenced.
        while (self._starts and self._starts[-1] >= start
               and self.highest_offset is not None and self.highest_offset <= epoch_end):
            self.unreferenced.add(self._by_start.pop(self._starts.pop()))
        displaced = self._by_start.get(start)
        if displaced is None:
            bisect.insort(self._starts, start)
        elif displaced != segment_id:
            self.unreferenced.add(displaced)
        self._by_start[start] = segment_id
        self.unreferenced.discard(segment_id)
        if self.highest_offset is None or epoch_end > self.highest_offset:
            self.highest_offset = epoch_end

    def delete_started(self, start: int, segment_id: RemoteLogSegmentId) -> None:
        if self._by_start.get(start) == segment_id:
            del self._by_start[start]
            self._starts.pop(bisect.bisect_left(self._starts, start))
        self.unreferenced.add(segment_id)


class RemoteLogMetadataCache:
    """Segments and deletion state of one user partition.

    Args:
        topic_id_partition: the user partition this cache describes.
    """

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        # Segments not yet DELETE_SEGMENT_FINISHED, in the order they were added.
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, _EpochState] = {}
        self.delete_metadata: RemotePartitionDeleteMetadata | None = None

    # -- validation (no side effects) ----------------------------------------

    def check(self, event: RemoteLogMetadata) -> None:
        """Raise what ``apply(event)`` would raise, changing nothing.

        Raises:
            IllegalStateTransition: the event is not allowed in the current state.
            UnknownSegmentError: an update for a segment this cache does not hold.
            ValueError: the event belongs to another partition, an add is not
                COPY_SEGMENT_STARTED, or an update is.
        """
        if event.topic_id_partition != self.topic_id_partition:
            raise ValueError(f"{event.topic_id_partition} is not {self.topic_id_partition}")
        if isinstance(event, RemotePartitionDeleteMetadata):
            current = self.delete_metadata.state if self.delete_metadata else None
            check_partition_delete_transition(self.topic_id_partition, current, event.state)
            return
        segment_id = event.remote_log_segment_id
        existing = self._segments.get(segment_id)
        if isinstance(event, RemoteLogSegmentMetadata):
            if event.state != _S.COPY_SEGMENT_STARTED:
                raise ValueError(f"{segment_id}: a new segment must be COPY_SEGMENT_STARTED, "
                                 f"not {event.state.name}")
        else:
            if event.state == _S.COPY_SEGMENT_STARTED:
                raise ValueError(f"{segment_id}: COPY_SEGMENT_STARTED is published by adding "
                                 "the segment, not by an update")
            if existing is None:
                raise UnknownSegmentError(f"no remote segment {segment_id}")
        check_segment_transition(segment_id, existing.state if existing else None, event.state)

    # -- mutation ------------------------------------------------------------

    def apply(self, event: RemoteLogMetadata) -> None:
        """Fold one event into the cache; raises as ``check`` does, changing nothing then."""
        self.check(event)
        if isinstance(event, RemotePartitionDeleteMetadata):
            self.delete_metadata = event
        elif isinstance(event, RemoteLogSegmentMetadata):
            self._add_copy_in_progress(event)
        else:
            existing = self._segments[event.remote_log_segment_id]
            self._transition(dataclasses.replace(
                existing, state=event.state, event_timestamp_ms=event.event_timestamp_ms,
                broker_id=event.broker_id, custom_metadata=event.custom_metadata))

    def restore(self, segments: Iterable[RemoteLogSegmentMetadata],
                delete_metadata: RemotePartitionDeleteMetadata | None) -> None:
        """Load a snapshot (segments in ``segments_in_event_order``) into an empty cache.

        Replaying each segment's latest state in that order rebuilds what
        reads see. A snapshot keeps no history, so two things a full re-read
        would remember are lost: the highest offset of segments already
        deleted, and that a copy now being deleted had displaced an older
        copy of the same epoch (that older copy, holding the same records,
        serves reads again).
        """
        if self._segments or self.delete_metadata is not None:
            raise ValueError(f"restore into a non-empty cache of {self.topic_id_partition}")
        for segment in segments:
            if segment.topic_id_partition != self.topic_id_partition:
                raise ValueError(f"{segment.topic_id_partition} is not {self.topic_id_partition}")
            if segment.state == _S.COPY_SEGMENT_STARTED:
                self._add_copy_in_progress(segment)
            else:
                self._transition(segment)
        self.delete_metadata = delete_metadata

    def _add_copy_in_progress(self, metadata: RemoteLogSegmentMetadata) -> None:
        for epoch in metadata.segment_leader_epochs:
            self._epochs.setdefault(epoch, _EpochState()).unreferenced.add(
                metadata.remote_log_segment_id)
        self._segments.pop(metadata.remote_log_segment_id, None)
        self._segments[metadata.remote_log_segment_id] = metadata

    def _transition(self, metadata: RemoteLogSegmentMetadata) -> None:
        segment_id = metadata.remote_log_segment_id
        for epoch, start in metadata.segment_leader_epochs.items():
            state = self._epochs.setdefault(epoch, _EpochState())
            if metadata.state == _S.COPY_SEGMENT_FINISHED:
                state.copy_finished(start, segment_id, _epoch_end_offset(metadata, epoch))
            elif metadata.state == _S.DELETE_SEGMENT_STARTED:
                state.delete_started(start, segment_id)
            else:
                state.unreferenced.discard(segment_id)
        # Re-insert so that iteration order is the order of each segment's
        # latest event: a snapshot restored in that order rebuilds the epochs.
        self._segments.pop(segment_id, None)
        if metadata.state != _S.DELETE_SEGMENT_FINISHED:
            self._segments[segment_id] = metadata

    # -- lookups -------------------------------------------------------------

    def remote_log_segment_metadata(self, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``.

        Returns None if no finished segment of that epoch covers the offset.
        """
        state = self._epochs.get(leader_epoch)
        segment_id = state.floor(offset) if state is not None else None
        if segment_id is None:
            return None
        metadata = self._segments[segment_id]
        return metadata if offset <= _epoch_end_offset(metadata, leader_epoch) else None

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """Highest offset of ``leader_epoch`` in any segment that reached COPY_SEGMENT_FINISHED."""
        state = self._epochs.get(leader_epoch)
        return state.highest_offset if state is not None else None

    def list_remote_log_segments(self, leader_epoch: int | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        """Segments not yet deleted (all, or those holding ``leader_epoch``), by start offset."""
        if leader_epoch is None:
            segments = list(self._segments.values())
        else:
            state = self._epochs.get(leader_epoch)
            ids = state.segment_ids() if state is not None else []
            segments = [self._segments[i] for i in ids]
        return sorted(segments, key=lambda m: m.start_offset)

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        return self._segments.get(segment_id)

    def segments_in_event_order(self) -> list[RemoteLogSegmentMetadata]:
        """Every live segment, ordered by its latest event: what a snapshot stores."""
        return list(self._segments.values())

    def is_empty(self) -> bool:
        return not self._segments and self.delete_metadata is None
