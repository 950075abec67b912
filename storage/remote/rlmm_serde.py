"""Remote log metadata events <-> the bytes of ``protocol.rlmm_records``.

The counterpart of Kafka's RemoteLogMetadataSerde and its *Transform
classes: the protocol module knows the wire schemas, this one knows the
value types of ``storage.remote``. Snapshot files of one user partition
(the KIP's flat-file store) are built and parsed here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from protocol.rlmm_records import (
    ApiKey,
    MetadataRecord,
    MetadataRecordError,
    SnapshotFile,
    decode_record,
    decode_snapshot,
    encode_record,
    encode_snapshot,
)
from storage.remote.metadata_cache import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = ["MetadataRecordError", "PartitionSnapshot", "describe", "deserialize",
           "parse_snapshot", "serialize", "snapshot_bytes"]


def _tip_fields(tip: TopicIdPartition) -> dict[str, Any]:
    return {"name": tip.topic, "id": tip.topic_id, "partition": tip.partition}


def _segment_id_fields(segment_id: RemoteLogSegmentId) -> dict[str, Any]:
    return {"topic_id_partition": _tip_fields(segment_id.topic_id_partition), "id": segment_id.id}


def _epoch_fields(epochs: dict[int, int]) -> list[dict[str, int]]:
    return [{"leader_epoch": e, "offset": o} for e, o in sorted(epochs.items())]


def _segment_fields(m: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {"start_offset": m.start_offset, "end_offset": m.end_offset,
            "broker_id": m.broker_id, "max_timestamp_ms": m.max_timestamp_ms,
            "event_timestamp_ms": m.event_timestamp_ms,
            "segment_leader_epochs": _epoch_fields(m.segment_leader_epochs),
            "segment_size_in_bytes": m.segment_size_in_bytes,
            "custom_metadata": m.custom_metadata, "remote_log_segment_state": int(m.state)}


def _delete_fields(d: RemotePartitionDeleteMetadata) -> dict[str, Any]:
    return {"topic_id_partition": _tip_fields(d.topic_id_partition), "broker_id": d.broker_id,
            "event_timestamp_ms": d.event_timestamp_ms,
            "remote_partition_delete_state": int(d.state)}


def _to_record(event: RemoteLogMetadata) -> tuple[ApiKey, dict[str, Any]]:
    if isinstance(event, RemoteLogSegmentMetadata):
        fields = _segment_fields(event)
        fields["remote_log_segment_id"] = _segment_id_fields(event.remote_log_segment_id)
        return ApiKey.REMOTE_LOG_SEGMENT_METADATA, fields
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE, {
            "remote_log_segment_id": _segment_id_fields(event.remote_log_segment_id),
            "broker_id": event.broker_id, "event_timestamp_ms": event.event_timestamp_ms,
            "custom_metadata": event.custom_metadata,
            "remote_log_segment_state": int(event.state)}
    return ApiKey.REMOTE_PARTITION_DELETE_METADATA, _delete_fields(event)


def describe(event: RemoteLogMetadata) -> dict[str, Any]:
    """``event`` as plain values for a person or a script (``tierd admin
    tiering dump-metadata``, as KIP-1057's formatter prints the topic): the
    record's type, then its fields under their schema names; ids as text,
    custom metadata as hex, states by name."""
    api_key, fields = _to_record(event)
    return {"type": api_key.name, **_plain(fields), **_state_names(event)}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # a UUID


def _state_names(event: RemoteLogMetadata) -> dict[str, str]:
    if isinstance(event, RemotePartitionDeleteMetadata):
        return {"remote_partition_delete_state": event.state.name}
    return {"remote_log_segment_state": event.state.name}


def serialize(event: RemoteLogMetadata) -> bytes:
    """The ``__remote_log_metadata`` record value for ``event``."""
    api_key, fields = _to_record(event)
    return encode_record(api_key, fields)


# -- decoding -----------------------------------------------------------------


def _tip(m: Any) -> TopicIdPartition:
    return TopicIdPartition(m.id, m.name, m.partition)


def _segment_state(raw: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(raw)
    except ValueError:
        raise MetadataRecordError(f"unknown remote log segment state {raw}") from None


def _bytes_or_none(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _segment(segment_id: RemoteLogSegmentId, m: Any) -> RemoteLogSegmentMetadata:
    try:
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id, start_offset=m.start_offset,
            end_offset=m.end_offset, max_timestamp_ms=m.max_timestamp_ms, broker_id=m.broker_id,
            event_timestamp_ms=m.event_timestamp_ms,
            segment_leader_epochs={e.leader_epoch: e.offset for e in m.segment_leader_epochs},
            segment_size_in_bytes=m.segment_size_in_bytes,
            custom_metadata=_bytes_or_none(m.custom_metadata),
            state=_segment_state(m.remote_log_segment_state))
    except ValueError as exc:  # the value type's own validation
        raise MetadataRecordError(f"invalid segment metadata: {exc}") from exc


def _delete(m: Any) -> RemotePartitionDeleteMetadata:
    try:
        state = RemotePartitionDeleteState(m.remote_partition_delete_state)
    except ValueError:
        raise MetadataRecordError(
            f"unknown partition delete state {m.remote_partition_delete_state}") from None
    return RemotePartitionDeleteMetadata(_tip(m.topic_id_partition), state,
                                         m.event_timestamp_ms, m.broker_id)


def _from_record(record: MetadataRecord) -> RemoteLogMetadata:
    m = record.message
    if record.api_key == ApiKey.REMOTE_PARTITION_DELETE_METADATA:
        return _delete(m)
    if record.api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT:
        raise MetadataRecordError("snapshot entries are not metadata topic records")
    segment_id = RemoteLogSegmentId(_tip(m.remote_log_segment_id.topic_id_partition),
                                    m.remote_log_segment_id.id)
    if record.api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA:
        return _segment(segment_id, m)
    return RemoteLogSegmentMetadataUpdate(
        segment_id, m.event_timestamp_ms, _bytes_or_none(m.custom_metadata),
        _segment_state(m.remote_log_segment_state), m.broker_id)


def deserialize(data: bytes) -> RemoteLogMetadata:
    """Parse a ``__remote_log_metadata`` record value.

    Raises:
        MetadataRecordError: the bytes are not a valid metadata record.
    """
    return _from_record(decode_record(data))


# -- per-partition snapshot files -----------------------------------------------


@dataclass(slots=True)
class PartitionSnapshot:
    """The cached state of one user partition as of a metadata-partition offset.

    Attributes:
        topic_id_partition: the user partition.
        metadata_offset: last offset of its metadata partition folded in.
        segments: live segments, in the cache's event order.
        delete_metadata: the partition's deletion state, if any.
    """

    topic_id_partition: TopicIdPartition
    metadata_offset: int
    segments: list[RemoteLogSegmentMetadata]
    delete_metadata: RemotePartitionDeleteMetadata | None


def snapshot_bytes(tip: TopicIdPartition, metadata_offset: int,
                   segments: Iterable[RemoteLogSegmentMetadata],
                   delete_metadata: RemotePartitionDeleteMetadata | None) -> bytes:
    """The KIP flat-file snapshot of one user partition."""
    entries = []
    for segment in segments:
        fields = _segment_fields(segment)
        fields["segment_id"] = segment.remote_log_segment_id.id
        entries.append(MetadataRecord(ApiKey.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT, 0, fields))
    if delete_metadata is not None:
        entries.append(MetadataRecord(ApiKey.REMOTE_PARTITION_DELETE_METADATA, 0,
                                      _delete_fields(delete_metadata)))
    return encode_snapshot(SnapshotFile(tip.topic, tip.topic_id, metadata_offset, entries))


def parse_snapshot(data: bytes, partition: int) -> PartitionSnapshot:
    """Parse a snapshot file of user partition ``partition`` (its number is in the file name).

    Raises:
        MetadataRecordError: the file is not a valid snapshot.
    """
    snapshot = decode_snapshot(data)
    tip = TopicIdPartition(snapshot.topic_id, snapshot.topic_name, partition)
    segments: list[RemoteLogSegmentMetadata] = []
    delete_metadata = None
    for entry in snapshot.entries:
        if entry.api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT:
            segments.append(_segment(RemoteLogSegmentId(tip, entry.message.segment_id),
                                     entry.message))
        elif entry.api_key == ApiKey.REMOTE_PARTITION_DELETE_METADATA:
            delete_metadata = _delete(entry.message)
            if delete_metadata.topic_id_partition != tip:
                raise MetadataRecordError(f"delete state of {delete_metadata.topic_id_partition} "
                                          f"in the snapshot of {tip}")
        else:
            raise MetadataRecordError(f"unexpected {entry.api_key.name} entry in a snapshot")
    return PartitionSnapshot(tip, snapshot.metadata_offset, segments, delete_metadata)
