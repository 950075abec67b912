"""Names of a remote segment's objects, shared by every storage manager.

A segment copy is seven objects at most, one per local file plus one
``indexes`` object, all named ``<20-digit start offset>-<segment
uuid>.<suffix>``. The suffixes are the local file extensions, and the ones
Kafka's LocalTieredStorage uses, so a remote directory reads like a local log
directory. Uuids are written as Kafka writes them (Uuid.toString: 22
characters of base64url).

What a copy knows that a reader would otherwise have to ask the store goes
into the segment's custom metadata (KIP-917), which the storage managers
return from ``copy_log_segment_data`` and the metadata keeps with the
segment: ``segment_manifest``. It says which optional objects exist, so a
read_committed fetch never sends a GET for the transaction index of a
segment without one (most segments), and (version 2, "layout 2") the
lengths of the offset and time indexes in the ``indexes`` object, which
holds both back to back: a read that seeks into a segment fetches both with
one GET. Metadata without a manifest, or with version 1 (copies made before
it, or rebuilt by ``tierd admin rebuild-metadata``), reads as before: one GET
per index, and an optional object is asked for, its absence the answer.
"""

from __future__ import annotations

import functools
import json
import os
import uuid

from storage.log.checkpoint import topic_id_to_str
from storage.log.segment import filename_prefix
from storage.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    StrPath,
)

LOG_SUFFIX = "log"

INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: "index",
    IndexType.TIMESTAMP: "timeindex",
    IndexType.TRANSACTION: "txnindex",
    IndexType.PRODUCER_SNAPSHOT: "snapshot",
    IndexType.LEADER_EPOCH: "leader_epoch_checkpoint",
}

# Layout 2: the offset and time indexes once more, back to back in one object,
# so a reader seeking into a segment needs one GET for both (their lengths are
# in the manifest). The separate objects stay, for tools and older readers.
INDEXES_SUFFIX = "indexes"

# Layout 3: the codec manifest of a segment whose objects are compressed or
# encrypted (``storage.remote.segment_codec``): its chunking and wrapped key.
CODEC_MANIFEST_SUFFIX = "rsm_manifest"

# Every object a segment may have: delete removes all of them.
ALL_SUFFIXES: tuple[str, ...] = (LOG_SUFFIX, *INDEX_SUFFIXES.values(), INDEXES_SUFFIX,
                                 CODEC_MANIFEST_SUFFIX)


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
    sources.append((INDEXES_SUFFIX, combined_indexes(data)))
    if data.codec_manifest is not None:
        sources.append((CODEC_MANIFEST_SUFFIX, data.codec_manifest))
    return sources


def _content(source: StrPath | bytes) -> bytes:
    """Raises RemoteStorageError (not retriable) if the local file cannot be read."""
    if isinstance(source, bytes):
        return source
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise RemoteStorageError(f"cannot read {source}: {exc}", retriable=False) from exc


def combined_indexes(data: LogSegmentData) -> bytes:
    """The ``indexes`` object: the offset index, then the time index."""
    return _content(data.offset_index) + _content(data.time_index)



# Custom metadata of tierd's storage managers: {"v": version, ...}; Kafka's
# remote.log.metadata.custom.metadata.max.bytes defaults to 128, and this
# stays far below it. Version 2 adds "idx": the lengths of the offset and time
# indexes in the ``indexes`` object; version 1 (no such object) stays readable.
# Version 3 (layout 3) is version 2 of a segment whose objects are transformed
# (compressed and/or encrypted): "ts" is the stored length of its .log, and
# the chunking is in its codec manifest object.
MANIFEST_VERSION = 2
TRANSFORMED_MANIFEST_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)


def segment_manifest(data: LogSegmentData, stored_log_size: int | None = None) -> bytes:
    """The custom metadata a copy of ``data`` records: which optional objects
    exist, and where each index sits in the ``indexes`` object (plain lengths).

    Args:
        stored_log_size: the length of the stored .log when the copy
            transformed it (version 3); None for a plain copy.
    """
    lengths = [os.path.getsize(p) if not isinstance(p, bytes) else len(p)
               for p in (data.offset_index, data.time_index)]
    return manifest_bytes(data.transaction_index is not None,
                          data.producer_snapshot_index is not None, lengths, stored_log_size)


def manifest_bytes(txn: bool, snap: bool, index_lengths: list[int],
                   stored_log_size: int | None) -> bytes:
    """``segment_manifest``'s bytes from what they record."""
    manifest: dict[str, object] = {"v": MANIFEST_VERSION, "txn": txn, "snap": snap,
                                   "idx": index_lengths}
    if stored_log_size is not None:
        manifest["v"] = TRANSFORMED_MANIFEST_VERSION
        manifest["ts"] = stored_log_size
    return json.dumps(manifest, separators=(",", ":")).encode()


def _manifest(metadata: RemoteLogSegmentMetadata) -> dict[str, object] | None:
    """The parsed manifest (read-only: parsed once per distinct content, as a
    read_committed fetch asks every later segment of the partition)."""
    raw = metadata.custom_metadata
    if not raw or not raw.startswith(b"{"):
        return None
    return _parse_manifest(raw)


@functools.lru_cache(maxsize=4096)
def _parse_manifest(raw: bytes) -> dict[str, object] | None:
    try:
        manifest = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("v") not in _READABLE_VERSIONS:
        return None
    return manifest


def lacks_txn_index(metadata: RemoteLogSegmentMetadata) -> bool:
    """True when the segment's manifest says it was copied without a
    transaction index (no aborted transactions); False when it has one or
    nothing is known (no manifest, or one this version cannot read)."""
    manifest = _manifest(metadata)
    return manifest is not None and manifest.get("txn") is False


def index_lengths(metadata: RemoteLogSegmentMetadata) -> tuple[int, int] | None:
    """(offset index, time index) lengths in the segment's ``indexes`` object;
    None for a segment copied without one (layout 1, or no manifest)."""
    manifest = _manifest(metadata)
    lengths = None if manifest is None else manifest.get("idx")
    if (not isinstance(lengths, list) or len(lengths) != 2
            or not all(isinstance(n, int) and n >= 0 for n in lengths)):
        return None
    return lengths[0], lengths[1]


def stored_log_size(metadata: RemoteLogSegmentMetadata) -> int | None:
    """The stored .log's length when the copy transformed it (layout 3);
    None for a plain copy, whose stored .log is ``segment_size_in_bytes``."""
    manifest = _manifest(metadata)
    size = None if manifest is None else manifest.get("ts")
    return size if isinstance(size, int) and size >= 0 else None


def expected_log_object_size(metadata: RemoteLogSegmentMetadata) -> int:
    """How long the stored .log object must be (audits compare listings to it)."""
    size = stored_log_size(metadata)
    return metadata.segment_size_in_bytes if size is None else size
