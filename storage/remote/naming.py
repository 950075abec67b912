"""Names of a remote segment's objects, shared by every storage manager.

A segment copy is six objects at most, one per local file, all named
``<20-digit start offset>-<segment uuid>.<suffix>``. The suffixes are the
local file extensions, and the ones Kafka's LocalTieredStorage uses, so a
remote directory reads like a local log directory. Uuids are written as
Kafka writes them (Uuid.toString: 22 characters of base64url).

What a copy knows that a reader would otherwise have to ask the store goes
into the segment's custom metadata (KIP-917), which the storage managers
return from ``copy_log_segment_data`` and the metadata keeps with the
segment: ``segment_manifest``. Version 1 says which optional objects exist,
so a read_committed fetch never sends a GET for the transaction index of a
segment without one (most segments). Metadata without a manifest (copies
made before it, or rebuilt by ``tierd admin rebuild-metadata``) reads as
before: the optional object is asked for, and its absence is the answer.
"""

from __future__ import annotations

import json
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



# Custom metadata of tierd's storage managers: {"v": version, ...}; Kafka's
# remote.log.metadata.custom.metadata.max.bytes defaults to 128, and this
# stays far below it.
MANIFEST_VERSION = 1


def segment_manifest(data: LogSegmentData) -> bytes:
    """The custom metadata a copy of ``data`` records: which optional objects exist."""
    return json.dumps({"v": MANIFEST_VERSION, "txn": data.transaction_index is not None,
                       "snap": data.producer_snapshot_index is not None},
                      separators=(",", ":")).encode()


def lacks_txn_index(metadata: RemoteLogSegmentMetadata) -> bool:
    """True when the segment's manifest says it was copied without a
    transaction index (no aborted transactions); False when it has one or
    nothing is known (no manifest, or one this version cannot read)."""
    raw = metadata.custom_metadata
    if not raw or not raw.startswith(b"{"):
        return False
    try:
        manifest = json.loads(raw)
    except ValueError:
        return False
    return (isinstance(manifest, dict) and manifest.get("v") == MANIFEST_VERSION
            and manifest.get("txn") is False)
