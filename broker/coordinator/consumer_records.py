"""The KIP-848 consumer-group records of ``__consumer_offsets``, in Kafka's formats.

Kafka 4's group coordinator writes a consumer group as several records, each
key starting with an int16 version that says the record type, each value
with an int16 version then a flexible (compact, tagged-field) body:

====  ========================================  ==============================
type  key (GroupId [, MemberId])                value v0
====  ========================================  ==============================
3     ConsumerGroupMetadataKey                  Epoch (the group epoch)
4     ConsumerGroupPartitionMetadataKey         Topics: TopicId, TopicName,
                                                NumPartitions, PartitionMetadata
5     ConsumerGroupMemberMetadataKey            InstanceId, RackId, ClientId,
                                                ClientHost, SubscribedTopicNames,
                                                SubscribedTopicRegex,
                                                RebalanceTimeoutMs, ServerAssignor
6     ConsumerGroupTargetAssignmentMetadataKey  AssignmentEpoch
7     ConsumerGroupTargetAssignmentMemberKey    TopicPartitions: TopicId, Partitions
8     ConsumerGroupCurrentMemberAssignmentKey   MemberEpoch, PreviousMemberEpoch,
                                                State, AssignedPartitions,
                                                PartitionsPendingRevocation
====  ========================================  ==============================

A null value is a tombstone. The schemas are Kafka's group-coordinator JSON
definitions of the same names, written as data for kafka-python's schema
machinery (as ``protocol.rlmm_records`` does for the KIP-405 records); the
member metadata's tagged ClassicMemberMetadata (tag 0: the session timeout
and JoinGroup protocols of a classic-protocol member inside a consumer
group) is written for those members only.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kafka.protocol.data_container import DataContainer
from kafka.protocol.schemas import StructField

from broker.coordinator.records import RecordFormatError

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
# Record types whose key names a member as well as the group.
MEMBER_TYPES = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

_I16 = struct.Struct(">h")


def _f(name: str, type_: str, versions: str = "0+", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": versions, **extra}


def _partitions(name: str) -> dict[str, Any]:
    return _f(name, "[]TopicPartitions", fields=[_f("TopicId", "uuid"),
                                                  _f("Partitions", "[]int32")])


_VALUES: dict[int, list[dict[str, Any]]] = {
    GROUP_METADATA: [_f("Epoch", "int32")],
    PARTITION_METADATA: [_f("Topics", "[]TopicMetadata", fields=[
        _f("TopicId", "uuid"), _f("TopicName", "string"), _f("NumPartitions", "int32"),
        _f("PartitionMetadata", "[]PartitionMetadata", fields=[
            _f("Partition", "int32"), _f("Racks", "[]string")])])],
    MEMBER_METADATA: [
        _f("InstanceId", "string", nullableVersions="0+"),
        _f("RackId", "string", nullableVersions="0+"),
        _f("ClientId", "string"), _f("ClientHost", "string"),
        _f("SubscribedTopicNames", "[]string"),
        _f("SubscribedTopicRegex", "string", nullableVersions="0+"),
        _f("RebalanceTimeoutMs", "int32", default="-1"),
        _f("ServerAssignor", "string", nullableVersions="0+"),
        _f("ClassicMemberMetadata", "ClassicMemberMetadata", nullableVersions="0+",
           taggedVersions="0+", tag=0, default="null", fields=[
               _f("SessionTimeoutMs", "int32"),
               _f("SupportedProtocols", "[]ClassicProtocol", fields=[
                   _f("Name", "string"), _f("Metadata", "bytes")])])],
    TARGET_ASSIGNMENT_METADATA: [_f("AssignmentEpoch", "int32")],
    TARGET_ASSIGNMENT_MEMBER: [_f("TopicPartitions", "[]TopicPartition", fields=[
        _f("TopicId", "uuid"), _f("Partitions", "[]int32")])],
    CURRENT_MEMBER_ASSIGNMENT: [
        _f("MemberEpoch", "int32"), _f("PreviousMemberEpoch", "int32"), _f("State", "int8"),
        _partitions("AssignedPartitions"), _partitions("PartitionsPendingRevocation")],
}


def _class(name: str, schema: dict[str, Any]) -> type[DataContainer]:
    struct_field = StructField(schema)
    cls = type(name, (DataContainer,), {"_struct": struct_field})
    struct_field.set_data_class(cls)
    return cls


def _key_class(record_type: int) -> type[DataContainer]:
    v = str(record_type)
    fields = [_f("GroupId", "string", v)]
    if record_type in MEMBER_TYPES:
        fields.append(_f("MemberId", "string", v))
    return _class(f"Key{record_type}", {"name": f"Key{record_type}", "type": "data",
                                        "validVersions": v, "flexibleVersions": "none",
                                        "fields": fields})


_KEYS = {t: _key_class(t) for t in RECORD_TYPES}
_VALUE_CLASSES = {t: _class(f"Value{t}", {"name": f"Value{t}", "type": "data",
                                          "validVersions": "0", "flexibleVersions": "0+",
                                          "fields": fields})
                  for t, fields in _VALUES.items()}


def value_class(record_type: int) -> type[DataContainer]:
    """The data class of a value, to build nested items (``.TopicPartitions`` ...)."""
    return _VALUE_CLASSES[record_type]


def encode_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    fields = {"group_id": group_id}
    if record_type in MEMBER_TYPES:
        assert member_id is not None
        fields["member_id"] = member_id
    body = _KEYS[record_type]._struct.encode(fields, version=record_type, compact=False,
                                              tagged=False)
    return _I16.pack(record_type) + bytes(body)


def encode_value(record_type: int, **fields: Any) -> bytes:
    body = _VALUE_CLASSES[record_type]._struct.encode(fields, version=VALUE_VERSION,
                                                      compact=True, tagged=True)
    return _I16.pack(VALUE_VERSION) + bytes(body)


def record_type(key: bytes) -> int:
    """The type of a ``__consumer_offsets`` key (its leading version)."""
    if len(key) < 2:
        raise RecordFormatError("truncated key")
    return int(_I16.unpack_from(key)[0])


def decode_key(key: bytes) -> tuple[int, str, str | None]:
    """(record type, group id, member id or None) of a consumer-group key.

    Raises:
        RecordFormatError: not a consumer-group key, or malformed.
    """
    kind = record_type(key)
    if kind not in RECORD_TYPES:
        raise RecordFormatError(f"not a consumer-group record type: {kind}")
    decoded = _decode(_KEYS[kind], key, kind, compact=False)
    return kind, decoded.group_id, getattr(decoded, "member_id", None)


def decode_value(kind: int, value: bytes) -> Any:
    """The value of a record of type ``kind`` (attributes in snake_case).

    Raises:
        RecordFormatError: unknown version or malformed bytes.
    """
    if len(value) < 2 or _I16.unpack_from(value)[0] != VALUE_VERSION:
        raise RecordFormatError(f"unsupported value version for record type {kind}")
    return _decode(_VALUE_CLASSES[kind], value, VALUE_VERSION, compact=True)


def _decode(cls: type[DataContainer], data: bytes, version: int, compact: bool) -> Any:
    buf = io.BytesIO(data[2:])
    try:
        decoded = cls.decode(buf, version=version, compact=compact, tagged=compact)
    except Exception as exc:  # kafka-python raises struct.error, ValueError, ...
        raise RecordFormatError(f"malformed {cls.__name__}: {exc!r}") from exc
    if buf.tell() != len(data) - 2:
        raise RecordFormatError(f"trailing bytes after {cls.__name__}")
    return decoded
