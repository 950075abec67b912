"""Names of a remote segment's objects, shared by every storage manager.

A segment copy is six objects at most, one per local file, all named
``<20-digit start offset>-<segment uuid>.<suffix>``. The suffixes are the
local file extensions, and the ones Kafka's LocalTieredStorage uses, so a
remote directory reads like a local log directory. Uuids are written as
Kafka writes them (Uuid.toString: 22 characters of base64url).
"""

from __future__ import annotations

import uuid

from storage.log.checkpoint import topic_id_to_str
from storage.log.segment import filename_prefix
from storage.remote.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata, StrPath

LOG_SUFFIX = "log"

INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: "index",
    IndexType.TIMESTAMP: "timeindex",
    IndexType.TRANSACTION: "txnindex",
    IndexType.PRODUCER_SNAPSHOT: "snapshot",
    IndexType.LEADER_EPOCH: "leader_epoch_checkpoint",
}

# Every object a segment may have: delete removes all of them.
ALL_SUFFIXES: tuple[str, ...] = (LOG_SUFFIX, *INDEX_SUFFIXES.values())


def uuid_str(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString (base64url, no padding)."""
    return topic_id_to_str(value)


def segment_stem(metadata: RemoteLogSegmentMetadata) -> str:
    """``<20-digit start offset>-<segment uuid>``, the name without suffix."""
    segment_id = metadata.remote_log_segment_id
    return f"{filename_prefix(metadata.start_offset)}-{uuid_str(segment_id.id)}"


def segment_sources(data: LogSegmentData) -> list[tuple[str, StrPath | bytes]]:
    """(suffix, local file or bytes) of every object a copy writes, log first.

    Optional indexes that the segment lacks are left out, so fetching them
    later raises RemoteResourceNotFoundError, as the KIP specifies.
    """
    sources: list[tuple[str, StrPath | bytes]] = [
        (LOG_SUFFIX, data.log_segment),
        (INDEX_SUFFIXES[IndexType.OFFSET], data.offset_index),
        (INDEX_SUFFIXES[IndexType.TIMESTAMP], data.time_index),
    ]
    if data.transaction_index is not None:
        sources.append((INDEX_SUFFIXES[IndexType.TRANSACTION], data.transaction_index))
    if data.producer_snapshot_index is not None:
        sources.append((INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT], data.producer_snapshot_index))
    sources.append((INDEX_SUFFIXES[IndexType.LEADER_EPOCH], data.leader_epoch_index))
    return sources

