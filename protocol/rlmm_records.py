"""KIP-405 remote log metadata records: the values of ``__remote_log_metadata``.

Theory of operation
-------------------
The topic-based RemoteLogMetadataManager publishes one record per segment
lifecycle event (key null). The value is what Apache Kafka's
``RemoteLogMetadataSerde`` writes (``BytesApiMessageSerde`` over
``AbstractApiMessageSerde``)::

    frame_version  unsigned varint   always 1
    api_key        unsigned varint   0 RemoteLogSegmentMetadataRecord
                                     1 RemoteLogSegmentMetadataUpdateRecord
                                     2 RemotePartitionDeleteMetadataRecord
                                     3 RemoteLogSegmentMetadataSnapshotRecord
    version        unsigned varint   we write 0; 0 and 1 are read
    message        the Kafka protocol encoding of the schema below. Every
                   schema is flexible from version 0: compact strings,
                   arrays and nullable bytes (unsigned varint length + 1),
                   16-byte uuids, and a tagged-field section closing every
                   struct, nested ones included.

The KIP text describes the header as "type byte, version byte"; Kafka as
shipped adds the leading frame version and uses varints (the same single
bytes for every key and version that exist). We follow the shipped bytes so
Kafka's own ``RemoteLogMetadataFormatter`` can read our topic. Trailing
bytes after the message are refused, as Kafka refuses them.

The schemas are Kafka's ``storage/src/main/resources/message/*.json``
(``about`` strings dropped) and are run through kafka-python's schema
machinery, the mechanism ``protocol/`` uses for every other message.

Per-partition snapshot files (``encode_snapshot``) use the KIP's
"flat-file store" layout::

    magic                  unsigned varint  file format version, 0
    topic-name             string (int16 length + UTF-8)
    topic-id               uuid, 16 bytes
    metadata-topic-offset  varlong (zig-zag): last metadata-partition offset
                           folded into this file
    entries, to the end of the file, each
        length             unsigned varint  size of type + version + data
        type               unsigned varint  api key, as above
        version            unsigned varint
        data               the message, encoded as above

The format has no entry count and no checksum, so a file cut at an entry
boundary reads as a shorter snapshot; writers replace files atomically.
The KIP's own entry schemas (RemoteLogSegmentMetadataRecordStored,
DeletePartitionStateRecord) predate KIP-917 custom metadata; we store
Kafka's RemoteLogSegmentMetadataSnapshotRecord (api key 3), which carries
every segment field, and RemotePartitionDeleteMetadataRecord (api key 2).

This module is pure: bytes in, bytes out.
"""

from __future__ import annotations

import enum
import io
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.data_container import DataContainer
from kafka.protocol.schemas import StructField

# AbstractApiMessageSerde.DEFAULT_FRAME_VERSION: 0 was the KRaft 2.8 preview
# frame and is refused; 1 is the only frame Kafka writes or reads.
FRAME_VERSION = 1
# The message version we write: version 0 is what every Kafka release with
# tiered storage reads; version 1 only adds tagged fields, so reading it is free.
WRITE_VERSION = 0
# The KIP's flat-file snapshot format version ("magic").
SNAPSHOT_MAGIC = 0


class ApiKey(enum.IntEnum):
    """Record types of the metadata topic (Kafka's MetadataRecordType)."""

    REMOTE_LOG_SEGMENT_METADATA = 0
    REMOTE_LOG_SEGMENT_METADATA_UPDATE = 1
    REMOTE_PARTITION_DELETE_METADATA = 2
    REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT = 3


class MetadataRecordError(ValueError):
    """Bytes that are not a metadata record (Kafka's MetadataParseException)."""


def _f(name: str, type_: str, versions: str = "0+", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": versions, **extra}


_TOPIC_ID_PARTITION = _f("TopicIdPartition", "TopicIdPartitionEntry", fields=[
    _f("Name", "string"), _f("Id", "uuid"), _f("Partition", "int32")])
_SEGMENT_ID = _f("RemoteLogSegmentId", "RemoteLogSegmentIdEntry", fields=[
    _TOPIC_ID_PARTITION, _f("Id", "uuid")])
_LEADER_EPOCHS = _f("SegmentLeaderEpochs", "[]SegmentLeaderEpochEntry", fields=[
    _f("LeaderEpoch", "int32"), _f("Offset", "int64")])
_CUSTOM_METADATA = _f("CustomMetadata", "bytes", default="null", nullableVersions="0+")


def _schema(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "type": "metadata", "validVersions": "0-1",
            "flexibleVersions": "0+", "fields": fields}


_SCHEMAS: dict[ApiKey, dict[str, Any]] = {
    ApiKey.REMOTE_LOG_SEGMENT_METADATA: _schema("RemoteLogSegmentMetadataRecord", [
        _SEGMENT_ID, _f("StartOffset", "int64"), _f("EndOffset", "int64"),
        _f("BrokerId", "int32"), _f("MaxTimestampMs", "int64"), _f("EventTimestampMs", "int64"),
        _LEADER_EPOCHS, _f("SegmentSizeInBytes", "int32"), _CUSTOM_METADATA,
        _f("RemoteLogSegmentState", "int8"),
        _f("TxnIndexEmpty", "bool", taggedVersions="0+", tag=0),
        _f("BrokerLeaderEpoch", "int32", "1+", taggedVersions="1+", tag=1)]),
    ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE: _schema("RemoteLogSegmentMetadataUpdateRecord", [
        _SEGMENT_ID, _f("BrokerId", "int32"), _f("EventTimestampMs", "int64"), _CUSTOM_METADATA,
        _f("RemoteLogSegmentState", "int8"),
        _f("BrokerLeaderEpoch", "int32", "1+", default="-1", taggedVersions="1+", tag=0),
        _f("EndOffset", "int64", "1+", default="-1", taggedVersions="1+", tag=1)]),
    ApiKey.REMOTE_PARTITION_DELETE_METADATA: _schema("RemotePartitionDeleteMetadataRecord", [
        _TOPIC_ID_PARTITION, _f("BrokerId", "int32"), _f("EventTimestampMs", "int64"),
        _f("RemotePartitionDeleteState", "int8"),
        _f("BrokerLeaderEpoch", "int32", "1+", taggedVersions="1+", tag=0),
        _f("EndOffset", "int64", "1+", taggedVersions="1+", tag=1)]),
    ApiKey.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT: _schema("RemoteLogSegmentMetadataSnapshotRecord", [
        _f("SegmentId", "uuid"), _f("StartOffset", "int64"), _f("EndOffset", "int64"),
        _f("BrokerId", "int32"), _f("MaxTimestampMs", "int64"), _f("EventTimestampMs", "int64"),
        _LEADER_EPOCHS, _f("SegmentSizeInBytes", "int32"), _CUSTOM_METADATA,
        _f("RemoteLogSegmentState", "int8"),
        _f("TxnIndexEmpty", "bool", taggedVersions="0+", tag=0),
        _f("BrokerLeaderEpoch", "int32", "1+", taggedVersions="1+", tag=1)]),
}


def _message_class(api_key: ApiKey) -> type[DataContainer]:
    schema = _SCHEMAS[api_key]
    struct_field = StructField(schema)
    cls = type(schema["name"], (DataContainer,), {"_struct": struct_field})
    struct_field.set_data_class(cls)
    return cls


_CLASSES: dict[ApiKey, type[DataContainer]] = {key: _message_class(key) for key in ApiKey}
_MAX_VERSION = 1


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded record.

    ``message`` is a kafka-python data object with one snake_case attribute
    per schema field (``start_offset``, ``remote_log_segment_id.id``, ...);
    tagged fields absent from the bytes read as their schema default.
    """

    api_key: ApiKey
    version: int
    message: Any


def encode_message(api_key: ApiKey, message: Any,
                   version: int = WRITE_VERSION) -> bytes:
    """Encode ``message`` (snake_case field names, nested mappings) without a header.

    A tagged field is written only when present and different from its
    schema default, as Kafka's generated code does.
    """
    if not 0 <= version <= _MAX_VERSION:
        raise ValueError(f"unsupported version {version} for {api_key.name}")
    struct_field: StructField = _CLASSES[api_key]._struct
    return bytes(struct_field.encode(message, version=version, compact=True, tagged=True))


def decode_message(api_key: ApiKey, version: int, data: bytes) -> Any:
    """Decode a message body that must fill ``data`` exactly.

    Raises:
        MetadataRecordError: truncated, malformed or followed by extra bytes.
    """
    if not 0 <= version <= _MAX_VERSION:
        raise MetadataRecordError(f"unsupported version {version} for {api_key.name}")
    buf = io.BytesIO(data)
    try:
        message = _CLASSES[api_key].decode(buf, version=version, compact=True, tagged=True)
    except Exception as exc:  # kafka-python raises struct.error, ValueError, ...
        raise MetadataRecordError(f"malformed {api_key.name} v{version}: {exc!r}") from exc
    extra = len(data) - buf.tell()
    if extra:
        raise MetadataRecordError(f"{extra} byte(s) of garbage after {api_key.name}")
    return message


def encode_record(api_key: ApiKey, message: Any,
                  version: int = WRITE_VERSION) -> bytes:
    """Encode a record value for ``__remote_log_metadata`` (frame, key, version, message)."""
    header = bytearray()
    for value in (FRAME_VERSION, api_key, version):
        _write_uvarint(header, value)
    return bytes(header) + encode_message(api_key, message, version)


def decode_record(data: bytes) -> MetadataRecord:
    """Decode a ``__remote_log_metadata`` record value.

    Raises:
        MetadataRecordError: unknown frame version, api key or version, or a
            malformed message.
    """
    frame_version, pos = _read_uvarint(data, 0)
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(f"unknown frame version {frame_version}")
    api_key, version, pos = _read_type_and_version(data, pos)
    return MetadataRecord(api_key, version, decode_message(api_key, version, data[pos:]))


# -- flat-file snapshot -------------------------------------------------------


@dataclass(slots=True)
class SnapshotFile:
    """The content of one user partition's snapshot file (see module docstring)."""

    topic_name: str
    topic_id: uuid.UUID
    metadata_offset: int
    entries: Sequence[MetadataRecord] = field(default_factory=list)


_INT16 = struct.Struct(">h")


def encode_snapshot(snapshot: SnapshotFile) -> bytes:
    """Serialise a snapshot; each entry's ``message`` must be a mapping of fields."""
    out = bytearray()
    _write_uvarint(out, SNAPSHOT_MAGIC)
    name = snapshot.topic_name.encode("utf-8")
    out += _INT16.pack(len(name)) + name
    out += snapshot.topic_id.bytes
    _write_varlong(out, snapshot.metadata_offset)
    for entry in snapshot.entries:
        head = bytearray()
        _write_uvarint(head, entry.api_key)
        _write_uvarint(head, entry.version)
        body = encode_message(entry.api_key, entry.message, entry.version)
        _write_uvarint(out, len(head) + len(body))
        out += head + body
    return bytes(out)


def decode_snapshot(data: bytes) -> SnapshotFile:
    """Parse a snapshot file.

    Raises:
        MetadataRecordError: wrong magic, truncated header or entry, or a
            malformed entry.
    """
    magic, pos = _read_uvarint(data, 0)
    if magic != SNAPSHOT_MAGIC:
        raise MetadataRecordError(f"unknown snapshot magic {magic}")
    if pos + 2 > len(data):
        raise MetadataRecordError("truncated snapshot header")
    (name_len,) = _INT16.unpack_from(data, pos)
    pos += 2
    if name_len < 0 or pos + name_len + 16 > len(data):
        raise MetadataRecordError("truncated snapshot header")
    try:
        topic_name = data[pos:pos + name_len].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataRecordError("topic name is not UTF-8") from exc
    pos += name_len
    topic_id = uuid.UUID(bytes=bytes(data[pos:pos + 16]))
    metadata_offset, pos = _read_varlong(data, pos + 16)
    entries: list[MetadataRecord] = []
    while pos < len(data):
        length, pos = _read_uvarint(data, pos)
        end = pos + length
        if end > len(data):
            raise MetadataRecordError("truncated snapshot entry")
        entry = data[pos:end]
        api_key, version, body_start = _read_type_and_version(entry, 0)
        entries.append(MetadataRecord(
            api_key, version, decode_message(api_key, version, entry[body_start:])))
        pos = end
    return SnapshotFile(topic_name, topic_id, metadata_offset, entries)


# -- varints ------------------------------------------------------------------


def _read_type_and_version(data: bytes, pos: int) -> tuple[ApiKey, int, int]:
    raw_key, pos = _read_uvarint(data, pos)
    version, pos = _read_uvarint(data, pos)
    try:
        api_key = ApiKey(raw_key)
    except ValueError:
        raise MetadataRecordError(f"unknown api key {raw_key}") from None
    if version > _MAX_VERSION:
        raise MetadataRecordError(f"unsupported version {version} for {api_key.name}")
    return api_key, version, pos


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(data: bytes, pos: int, max_bits: int = 35) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise MetadataRecordError("truncated varint")
        if shift >= max_bits:
            raise MetadataRecordError("varint too long")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _write_varlong(out: bytearray, value: int) -> None:
    _write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _read_uvarint(data, pos, max_bits=70)
    if raw >> 64:
        raise MetadataRecordError("varlong too long")
    return (raw >> 1) ^ -(raw & 1), pos
