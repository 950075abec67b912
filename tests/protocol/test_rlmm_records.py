"""KIP-405 metadata records: golden bytes, strict decoding, round trips, snapshot files."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rlmm_records import (
    ApiKey,
    MetadataRecord,
    MetadataRecordError,
    SnapshotFile,
    decode_message,
    decode_record,
    decode_snapshot,
    encode_message,
    encode_record,
    encode_snapshot,
)
from tests.test_layering import _import_in_fresh_interpreter

TOPIC_ID = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
SEGMENT_ID = uuid.UUID(int=0x1112131415161718191A1B1C1D1E1F20)
TIP = {"name": "foo", "id": TOPIC_ID, "partition": 3}
SEGMENT = {"topic_id_partition": TIP, "id": SEGMENT_ID}


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_string(s: str) -> bytes:
    return uvarint(len(s.encode()) + 1) + s.encode()


NO_TAGS = b"\x00"
TIP_BYTES = (compact_string("foo")    # Name, compact string
             + TOPIC_ID.bytes         # Id, uuid
             + i32(3)                 # Partition
             + NO_TAGS)               # TopicIdPartitionEntry's tagged fields
SEGMENT_ID_BYTES = (TIP_BYTES         # TopicIdPartition
                    + SEGMENT_ID.bytes  # Id, uuid
                    + NO_TAGS)        # RemoteLogSegmentIdEntry's tagged fields

SEGMENT_FIELDS = {
    "remote_log_segment_id": SEGMENT, "start_offset": 100, "end_offset": 199, "broker_id": 1,
    "max_timestamp_ms": 1_700_000_000_000, "event_timestamp_ms": 1_700_000_000_123,
    "segment_leader_epochs": [{"leader_epoch": 0, "offset": 100},
                              {"leader_epoch": 2, "offset": 150}],
    "segment_size_in_bytes": 4096, "custom_metadata": None, "remote_log_segment_state": 0,
}
SEGMENT_GOLDEN = (
    uvarint(1)                        # frame version
    + uvarint(0)                      # api key: RemoteLogSegmentMetadataRecord
    + uvarint(0)                      # version
    + SEGMENT_ID_BYTES                # RemoteLogSegmentId
    + i64(100)                        # StartOffset
    + i64(199)                        # EndOffset
    + i32(1)                          # BrokerId
    + i64(1_700_000_000_000)          # MaxTimestampMs
    + i64(1_700_000_000_123)          # EventTimestampMs
    + uvarint(2 + 1)                  # SegmentLeaderEpochs: compact array of 2
    + i32(0) + i64(100) + NO_TAGS     #   epoch 0 from offset 100
    + i32(2) + i64(150) + NO_TAGS     #   epoch 2 from offset 150
    + i32(4096)                       # SegmentSizeInBytes
    + uvarint(0)                      # CustomMetadata: null compact bytes
    + i8(0)                           # RemoteLogSegmentState: COPY_SEGMENT_STARTED
    + NO_TAGS                         # TxnIndexEmpty false: not written
)
# The same record encoded by Kafka's own protocol types (kafka-clients 4.3.0,
# org.apache.kafka.common.protocol.types with the schema above), for a check
# independent of how this file builds its bytes.
SEGMENT_FROM_JAVA = bytes.fromhex(
    "01000004666f6f0102030405060708090a0b0c0d0e0f1000000003001112131415161718191a1b1c1d1e1f20"
    "00000000000000006400000000000000c7000000010000018bcfe568000000018bcfe5687b03000000000000"
    "000000000064000000000200000000000000960000001000000000")

UPDATE_FIELDS = {"remote_log_segment_id": SEGMENT, "broker_id": 1,
                 "event_timestamp_ms": 1_700_000_000_456, "custom_metadata": b"\x01\x02\x03",
                 "remote_log_segment_state": 1}
UPDATE_GOLDEN = (
    uvarint(1) + uvarint(1) + uvarint(0)  # frame 1, RemoteLogSegmentMetadataUpdateRecord, v0
    + SEGMENT_ID_BYTES                # RemoteLogSegmentId
    + i32(1)                          # BrokerId
    + i64(1_700_000_000_456)          # EventTimestampMs
    + uvarint(3 + 1) + b"\x01\x02\x03"  # CustomMetadata: compact bytes
    + i8(1)                           # RemoteLogSegmentState: COPY_SEGMENT_FINISHED
    + NO_TAGS
)
UPDATE_FROM_JAVA = bytes.fromhex(
    "01010004666f6f0102030405060708090a0b0c0d0e0f1000000003001112131415161718191a1b1c1d1e1f20"
    "00000000010000018bcfe569c8040102030100")

DELETE_FIELDS = {"topic_id_partition": TIP, "broker_id": 2, "event_timestamp_ms": 1_700_000_000_789,
                 "remote_partition_delete_state": 0}
DELETE_GOLDEN = (
    uvarint(1) + uvarint(2) + uvarint(0)  # frame 1, RemotePartitionDeleteMetadataRecord, v0
    + TIP_BYTES                       # TopicIdPartition
    + i32(2)                          # BrokerId
    + i64(1_700_000_000_789)          # EventTimestampMs
    + i8(0)                           # RemotePartitionDeleteState: DELETE_PARTITION_MARKED
    + NO_TAGS
)
DELETE_FROM_JAVA = bytes.fromhex(
    "01020004666f6f0102030405060708090a0b0c0d0e0f100000000300000000020000018bcfe56b150000")

GOLDEN = [
    (ApiKey.REMOTE_LOG_SEGMENT_METADATA, SEGMENT_FIELDS, SEGMENT_GOLDEN, SEGMENT_FROM_JAVA),
    (ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE, UPDATE_FIELDS, UPDATE_GOLDEN, UPDATE_FROM_JAVA),
    (ApiKey.REMOTE_PARTITION_DELETE_METADATA, DELETE_FIELDS, DELETE_GOLDEN, DELETE_FROM_JAVA),
]


@pytest.mark.parametrize(("api_key", "fields", "golden", "java"), GOLDEN)
def test_encode_matches_golden_bytes_and_kafka(api_key, fields, golden, java):
    assert golden == java
    assert encode_record(api_key, fields) == golden


@pytest.mark.parametrize(("api_key", "fields", "golden", "java"), GOLDEN)
def test_decode_golden_bytes(api_key, fields, golden, java):
    record = decode_record(golden)
    assert (record.api_key, record.version) == (api_key, 0)
    assert record.message.to_dict(json=False) == {**fields, **(
        {"txn_index_empty": False} if api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA else {})}
    assert encode_record(record.api_key, record.message) == golden


def test_tagged_field_written_only_when_not_default():
    fields = {**SEGMENT_FIELDS, "custom_metadata": b"\xca\xfe", "txn_index_empty": True}
    encoded = encode_record(ApiKey.REMOTE_LOG_SEGMENT_METADATA, fields)
    tail = (uvarint(2 + 1) + b"\xca\xfe"  # CustomMetadata
            + i8(0)                       # RemoteLogSegmentState
            + uvarint(1)                  # one tagged field
            + uvarint(0) + uvarint(1) + b"\x01")  # tag 0 (TxnIndexEmpty), size 1, true
    assert encoded.endswith(tail)
    assert encoded == bytes.fromhex(  # Kafka's protocol types, as above
        "01000004666f6f0102030405060708090a0b0c0d0e0f1000000003001112131415161718191a1b1c1d1e1f20"
        "00000000000000006400000000000000c7000000010000018bcfe568000000018bcfe5687b03000000000000"
        "00000000006400000000020000000000000096000000100003cafe0001000101")
    assert decode_record(encoded).message.txn_index_empty is True


@pytest.mark.parametrize(("api_key", "fields", "golden", "java"), GOLDEN)
def test_every_truncation_and_trailing_bytes_are_refused(api_key, fields, golden, java):
    for end in range(len(golden)):
        with pytest.raises(MetadataRecordError):
            decode_record(golden[:end])
    with pytest.raises(MetadataRecordError, match="garbage"):
        decode_record(golden + b"\x00")


def test_version_1_with_tagged_fields_is_read():
    # Version 1 of the update record adds tagged BrokerLeaderEpoch (tag 0) and EndOffset (tag 1).
    body = encode_message(ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE,
                          {**UPDATE_FIELDS, "broker_leader_epoch": 7, "end_offset": 199}, version=1)
    assert body.endswith(uvarint(2) + uvarint(0) + uvarint(4) + i32(7)
                         + uvarint(1) + uvarint(8) + i64(199))
    record = decode_record(uvarint(1) + uvarint(1) + uvarint(1) + body)
    assert (record.version, record.message.broker_leader_epoch, record.message.end_offset) == (
        1, 7, 199)


def test_unknown_tags_are_skipped():
    body = UPDATE_GOLDEN[3:-1] + uvarint(1) + uvarint(9) + uvarint(2) + b"zz"
    message = decode_message(ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE, 0, body)
    assert message.remote_log_segment_state == 1


@pytest.mark.parametrize(("header", "error"), [
    (b"\x00\x00\x00", "frame version 0"),
    (b"\x02\x00\x00", "frame version 2"),
    (b"\x01\x04\x00", "api key 4"),
    (b"\x01\x00\x02", "version 2"),
    (b"\x01\x80\x80\x80\x80\x80\x01", "varint too long"),
])
def test_bad_headers_are_refused(header, error):
    with pytest.raises(MetadataRecordError, match=error):
        decode_record(header + SEGMENT_GOLDEN[3:])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_metadata_record_error(data):
    try:
        decode_record(data)
    except MetadataRecordError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=4), st.integers(0, len(SEGMENT_GOLDEN) - 1))
def test_corrupted_golden_decodes_or_raises(patch, at):
    data = SEGMENT_GOLDEN[:at] + patch + SEGMENT_GOLDEN[at + len(patch):]
    try:
        decode_record(data)
    except MetadataRecordError:
        pass


int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
tips = st.fixed_dictionaries({"name": st.text(max_size=20), "id": st.uuids(),
                              "partition": int32s})
segment_records = st.fixed_dictionaries({
    "remote_log_segment_id": st.fixed_dictionaries({"topic_id_partition": tips, "id": st.uuids()}),
    "start_offset": int64s, "end_offset": int64s, "broker_id": int32s,
    "max_timestamp_ms": int64s, "event_timestamp_ms": int64s,
    "segment_leader_epochs": st.lists(st.fixed_dictionaries(
        {"leader_epoch": int32s, "offset": int64s}), max_size=5),
    "segment_size_in_bytes": int32s, "custom_metadata": st.none() | st.binary(max_size=300),
    "remote_log_segment_state": st.integers(-128, 127), "txn_index_empty": st.booleans(),
})


@settings(max_examples=200, deadline=None)
@given(segment_records)
def test_segment_record_round_trip(fields):
    data = encode_record(ApiKey.REMOTE_LOG_SEGMENT_METADATA, fields)
    record = decode_record(data)
    assert record.message.to_dict(json=False) == fields
    assert encode_record(record.api_key, record.message) == data


@settings(max_examples=100, deadline=None)
@given(tips, int32s, int64s, st.integers(-128, 127))
def test_delete_record_round_trip(tip, broker, ts, state):
    fields = {"topic_id_partition": tip, "broker_id": broker, "event_timestamp_ms": ts,
              "remote_partition_delete_state": state}
    record = decode_record(encode_record(ApiKey.REMOTE_PARTITION_DELETE_METADATA, fields))
    assert record.message.to_dict(json=False) == fields


# -- snapshot files -------------------------------------------------------------

SNAPSHOT_ENTRY = {
    "segment_id": SEGMENT_ID, "start_offset": 0, "end_offset": 9, "broker_id": 1,
    "max_timestamp_ms": 5, "event_timestamp_ms": 6,
    "segment_leader_epochs": [{"leader_epoch": 0, "offset": 0}],
    "segment_size_in_bytes": 100, "custom_metadata": None, "remote_log_segment_state": 1,
}
SNAPSHOT_ENTRY_BYTES = (
    SEGMENT_ID.bytes                  # SegmentId
    + i64(0) + i64(9)                 # StartOffset, EndOffset
    + i32(1)                          # BrokerId
    + i64(5) + i64(6)                 # MaxTimestampMs, EventTimestampMs
    + uvarint(1 + 1) + i32(0) + i64(0) + NO_TAGS  # SegmentLeaderEpochs: [(0, 0)]
    + i32(100)                        # SegmentSizeInBytes
    + uvarint(0)                      # CustomMetadata: null
    + i8(1)                           # RemoteLogSegmentState: COPY_SEGMENT_FINISHED
    + NO_TAGS
)
DELETE_ENTRY_BYTES = DELETE_GOLDEN[3:]
SNAPSHOT_GOLDEN = (
    uvarint(0)                        # magic
    + struct.pack(">h", 3) + b"foo"   # topic name: int16 length + UTF-8
    + TOPIC_ID.bytes                  # topic id
    + uvarint(12345 * 2)              # metadata-topic-offset: zig-zag varlong 12345
    + uvarint(2 + len(SNAPSHOT_ENTRY_BYTES))  # entry length: type + version + data
    + uvarint(3) + uvarint(0)         # type 3 (RemoteLogSegmentMetadataSnapshotRecord), v0
    + SNAPSHOT_ENTRY_BYTES
    + uvarint(2 + len(DELETE_ENTRY_BYTES))
    + uvarint(2) + uvarint(0)         # type 2 (RemotePartitionDeleteMetadataRecord), v0
    + DELETE_ENTRY_BYTES
)


def _golden_snapshot() -> SnapshotFile:
    return SnapshotFile("foo", TOPIC_ID, 12345, [
        MetadataRecord(ApiKey.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT, 0, SNAPSHOT_ENTRY),
        MetadataRecord(ApiKey.REMOTE_PARTITION_DELETE_METADATA, 0, DELETE_FIELDS)])


def test_snapshot_golden_bytes():
    assert encode_snapshot(_golden_snapshot()) == SNAPSHOT_GOLDEN
    decoded = decode_snapshot(SNAPSHOT_GOLDEN)
    assert (decoded.topic_name, decoded.topic_id, decoded.metadata_offset) == (
        "foo", TOPIC_ID, 12345)
    assert [e.message.to_dict(json=False) for e in decoded.entries] == [
        {**SNAPSHOT_ENTRY, "txn_index_empty": False}, DELETE_FIELDS]


def test_snapshot_truncations_and_bad_magic_are_refused():
    # The KIP's format has no entry count or checksum: cut at an entry boundary
    # it reads as a shorter snapshot (files are replaced atomically, so a torn
    # file is never seen); cut anywhere else it is refused.
    header = 1 + 2 + 3 + 16 + 3
    boundaries = {header: 0, header + 1 + 2 + len(SNAPSHOT_ENTRY_BYTES): 1}
    for end in range(len(SNAPSHOT_GOLDEN)):
        if end in boundaries:
            assert len(decode_snapshot(SNAPSHOT_GOLDEN[:end]).entries) == boundaries[end]
            continue
        with pytest.raises(MetadataRecordError):
            decode_snapshot(SNAPSHOT_GOLDEN[:end])
    with pytest.raises(MetadataRecordError, match="magic"):
        decode_snapshot(b"\x01" + SNAPSHOT_GOLDEN[1:])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=50), st.uuids(), int64s, st.lists(segment_records, max_size=3))
def test_snapshot_round_trip(name, topic_id, offset, segments):
    entries = [MetadataRecord(ApiKey.REMOTE_LOG_SEGMENT_METADATA, 0, s) for s in segments]
    data = encode_snapshot(SnapshotFile(name, topic_id, offset, entries))
    decoded = decode_snapshot(data)
    assert (decoded.topic_name, decoded.topic_id, decoded.metadata_offset) == (
        name, topic_id, offset)
    assert [e.message.to_dict(json=False) for e in decoded.entries] == segments


def test_module_is_sans_io():
    result = _import_in_fresh_interpreter("protocol.rlmm_records")
    assert "trio" not in result["modules"]
    assert not [m for m in result["modules"]
                if m.split(".")[0] in ("broker", "storage", "replication", "config")]
    assert result["events"] == []
