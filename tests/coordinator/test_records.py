"""__consumer_offsets record formats: golden bytes field by field, old versions, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator import records as rec


def test_golden_offset_commit_key_v1():
    key = rec.encode_offset_commit_key(rec.OffsetCommitKey("g", "t", 7))
    assert key == (b"\x00\x01"           # key version 1: offset commit
                   b"\x00\x01g"          # group
                   b"\x00\x01t"          # topic
                   b"\x00\x00\x00\x07")  # partition
    assert rec.decode_key(key) == rec.OffsetCommitKey("g", "t", 7)


def test_key_version_0_is_an_offset_commit_too():
    assert rec.decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x02") == \
        rec.OffsetCommitKey("g", "t", 2)


def test_golden_group_metadata_key_v2():
    key = rec.encode_group_metadata_key(rec.GroupMetadataKey("grp"))
    assert key == b"\x00\x02" b"\x00\x03grp"  # key version 2, group
    assert rec.decode_key(key) == rec.GroupMetadataKey("grp")


def test_golden_offset_commit_value_v3():
    value = rec.OffsetCommitValue(offset=5, leader_epoch=2, metadata="m", commit_timestamp=9)
    data = rec.encode_offset_commit_value(value)
    assert data == (b"\x00\x03"                            # value version 3
                    b"\x00\x00\x00\x00\x00\x00\x00\x05"    # offset
                    b"\x00\x00\x00\x02"                    # leaderEpoch
                    b"\x00\x01m"                           # metadata
                    b"\x00\x00\x00\x00\x00\x00\x00\x09")   # commitTimestamp
    assert rec.decode_offset_commit_value(data) == value


def test_offset_with_explicit_expiry_is_written_as_value_v1():
    value = rec.OffsetCommitValue(5, -1, "", 9, expire_timestamp=20)
    data = rec.encode_offset_commit_value(value)
    assert data == (b"\x00\x01"                            # value version 1
                    b"\x00\x00\x00\x00\x00\x00\x00\x05"    # offset
                    b"\x00\x00"                            # metadata ""
                    b"\x00\x00\x00\x00\x00\x00\x00\x09"    # commitTimestamp
                    b"\x00\x00\x00\x00\x00\x00\x00\x14")   # expireTimestamp
    assert rec.decode_offset_commit_value(data) == value


def test_offset_commit_value_v0_has_no_epoch():
    data = b"\x00\x00" + (3).to_bytes(8, "big") + b"\x00\x02md" + (4).to_bytes(8, "big")
    assert rec.decode_offset_commit_value(data) == rec.OffsetCommitValue(3, -1, "md", 4)


GOLDEN_GROUP_V3 = (
    b"\x00\x03"                             # value version 3
    b"\x00\x08consumer"                     # protocolType
    b"\x00\x00\x00\x04"                     # generation
    b"\x00\x05range"                        # protocol
    b"\x00\x02m1"                           # leader
    b"\x00\x00\x00\x00\x00\x00\x00\x63"     # currentStateTimestamp 99
    b"\x00\x00\x00\x01"                     # members: 1
    b"\x00\x02m1"                           #   memberId
    b"\xff\xff"                             #   groupInstanceId null
    b"\x00\x01c"                            #   clientId
    b"\x00\x0a/127.0.0.1"                   #   clientHost
    b"\x00\x00\x75\x30"                     #   rebalanceTimeout 30000
    b"\x00\x00\x27\x10"                     #   sessionTimeout 10000
    b"\x00\x00\x00\x02su"                   #   subscription
    b"\x00\x00\x00\x01a"                    #   assignment
)


def test_golden_group_metadata_value_v3():
    value = rec.GroupMetadataValue("consumer", 4, "range", "m1", 99, [
        rec.MemberRecord("m1", None, "c", "/127.0.0.1", 30000, 10000, b"su", b"a")])
    assert rec.encode_group_metadata_value(value) == GOLDEN_GROUP_V3
    assert rec.decode_group_metadata_value(GOLDEN_GROUP_V3) == value


def test_group_metadata_value_v0_uses_session_timeout_as_rebalance_timeout():
    data = (b"\x00\x00" b"\x00\x08consumer" b"\x00\x00\x00\x01" b"\xff\xff" b"\xff\xff"
            b"\x00\x00\x00\x01" b"\x00\x02m1" b"\x00\x01c" b"\x00\x01h"
            b"\x00\x00\x27\x10" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00")
    value = rec.decode_group_metadata_value(data)
    assert value.protocol is None and value.leader is None
    assert value.current_state_timestamp == rec.NO_TIMESTAMP
    assert value.members == [rec.MemberRecord("m1", None, "c", "h", 10000, 10000, b"", b"")]


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\x00\x07\x00\x01g",          # empty, short, unknown key version
    b"\x00\x01\x00\x05g",                        # string longer than the buffer
    b"\x00\x02\xff\xff",                         # null group
])
def test_bad_keys_raise_record_format_error(data):
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(data)


def test_flexible_values_are_rejected():
    with pytest.raises(rec.RecordFormatError):
        rec.decode_offset_commit_value(b"\x00\x04" + bytes(30))
    with pytest.raises(rec.RecordFormatError):
        rec.decode_group_metadata_value(b"\x00\x04" + bytes(30))


def test_every_truncation_of_a_group_value_raises():
    for n in range(len(GOLDEN_GROUP_V3)):
        with pytest.raises(rec.RecordFormatError):
            rec.decode_group_metadata_value(GOLDEN_GROUP_V3[:n])


_text = st.text(max_size=20)
_members = st.builds(rec.MemberRecord, _text, st.none() | _text, _text, _text,
                     st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1),
                     st.binary(max_size=30), st.binary(max_size=30))


@given(st.builds(rec.GroupMetadataValue, _text, st.integers(-1, 2**31 - 1), st.none() | _text,
                 st.none() | _text, st.integers(-1, 2**62), st.lists(_members, max_size=3)))
def test_group_metadata_value_round_trip(value):
    assert rec.decode_group_metadata_value(rec.encode_group_metadata_value(value)) == value


@given(st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), _text, st.integers(0, 2**62),
       st.sampled_from([rec.NO_TIMESTAMP, 0, 2**40]))
def test_offset_commit_value_round_trip(offset, epoch, metadata, ts, expire):
    value = rec.OffsetCommitValue(offset, epoch if expire == rec.NO_TIMESTAMP else -1, metadata,
                                  ts, expire)
    assert rec.decode_offset_commit_value(rec.encode_offset_commit_value(value)) == value
