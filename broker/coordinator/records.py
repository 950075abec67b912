"""The record formats of ``__consumer_offsets``, byte for byte as Kafka writes them.

Every key and value starts with an int16 version. The key version says what
the record is (Kafka 4 calls it the record type):

* 0 or 1: an offset commit, key ``OffsetCommitKey`` (group string, topic
  string, partition int32). We write 1, as Kafka does.
* 2: group metadata, key ``GroupMetadataKey`` (group string).

Values (a null value is a tombstone: the offset or group is gone):

* ``OffsetCommitValue`` v3: offset int64, leaderEpoch int32, metadata string,
  commitTimestamp int64. v1 (offset, metadata, commitTimestamp,
  expireTimestamp int64) is written instead when the commit carried an
  explicit retention time (OffsetCommit v2-v4), again as Kafka does.
* ``GroupMetadataValue`` v3: protocolType string, generation int32,
  protocol nullable string, leader nullable string, currentStateTimestamp
  int64, members array of (memberId, groupInstanceId nullable, clientId,
  clientHost, rebalanceTimeout int32, sessionTimeout int32, subscription
  bytes, assignment bytes).

Strings are int16-length UTF-8 (-1 for null), bytes int32-length, arrays
int32-count. We read every non-flexible version (0-3); the flexible v4
values of Kafka 3.5+ are rejected as ``RecordFormatError`` (the loader
logs and skips them).

The schemas are Kafka's group-coordinator ``OffsetCommitKey.json``,
``OffsetCommitValue.json``, ``GroupMetadataKey.json`` and
``GroupMetadataValue.json``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
# The value version that carries an explicit expireTimestamp.
OFFSET_COMMIT_VALUE_EXPIRING_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_TIMESTAMP = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value of __consumer_offsets that we cannot parse."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Absolute expiry in ms, or NO_TIMESTAMP: expire by the group's rules.
    expire_timestamp: int = NO_TIMESTAMP


@dataclass(slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


# -- writing -------------------------------------------------------------------


class _Writer:
    def __init__(self, version: int) -> None:
        self.out = bytearray(_I16.pack(version))

    def i32(self, value: int) -> _Writer:
        self.out += _I32.pack(value)
        return self

    def i64(self, value: int) -> _Writer:
        self.out += _I64.pack(value)
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            self.out += _I16.pack(-1)
        else:
            data = value.encode("utf-8")
            self.out += _I16.pack(len(data)) + data
        return self

    def bytes_(self, value: bytes) -> _Writer:
        self.out += _I32.pack(len(value)) + value
        return self

    def done(self) -> bytes:
        return bytes(self.out)


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    w = _Writer(OFFSET_COMMIT_KEY_VERSION)
    return w.string(key.group).string(key.topic).i32(key.partition).done()


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return _Writer(GROUP_METADATA_KEY_VERSION).string(key.group).done()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp != NO_TIMESTAMP:
        w = _Writer(OFFSET_COMMIT_VALUE_EXPIRING_VERSION).i64(value.offset).string(value.metadata)
        return w.i64(value.commit_timestamp).i64(value.expire_timestamp).done()
    w = _Writer(OFFSET_COMMIT_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    return w.string(value.metadata).i64(value.commit_timestamp).done()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer(GROUP_METADATA_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
    w.string(value.protocol).string(value.leader).i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return w.done()


# -- reading -------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated record")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"bad string: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self._take(n)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    """Parse a record key.

    Raises:
        RecordFormatError: unknown key version or malformed bytes.
    """
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.i32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Parse an OffsetCommitValue v0-v3.

    Raises:
        RecordFormatError: unknown version or malformed bytes.
    """
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unsupported OffsetCommitValue version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else NO_TIMESTAMP
    return OffsetCommitValue(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Parse a GroupMetadataValue v0-v3.

    Raises:
        RecordFormatError: unknown version or malformed bytes.
    """
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        # v0 has no rebalance timeout; Kafka then uses the session timeout.
        rebalance_timeout = r.i32() if version >= 1 else None
        session_timeout = r.i32()
        if rebalance_timeout is None:
            rebalance_timeout = session_timeout
        members.append(MemberRecord(member_id, instance_id, client_id, client_host,
                                    rebalance_timeout, session_timeout, r.bytes_(), r.bytes_()))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)
