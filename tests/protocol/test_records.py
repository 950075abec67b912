"""Record batches (magic v2): golden bytes, validation, offset assignment, round trips."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from protocol.records import Compression

ALL_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
              Compression.ZSTD]


def _golden_batch() -> bytes:
    """Two records, written field by field as Kafka's DefaultRecordBatch lays them out."""
    record0 = bytes.fromhex(
        "00"      # attributes (unused, 0)
        "00"      # timestampDelta varint(0)
        "00"      # offsetDelta varint(0)
        "02" "6b"  # keyLength varint(1), key b"k"
        "02" "76"  # valueLength varint(1), value b"v"
        "00"      # headers count varint(0)
    )
    record1 = bytes.fromhex(
        "00"      # attributes
        "0a"      # timestampDelta varint(5)  (zigzag 10)
        "02"      # offsetDelta varint(1)     (zigzag 2)
        "01"      # keyLength varint(-1): null key
        "0a" "68656c6c6f"  # valueLength varint(5), b"hello"
        "02"      # headers count varint(1)
        "02" "68"  # header key length varint(1), "h"
        "02" "78"  # header value length varint(1), b"x"
    )
    body = (
        bytes([len(record0) * 2]) + record0   # record length varint(8) = 0x10
        + bytes([len(record1) * 2]) + record1  # record length varint(15) = 0x1e
    )
    crcd = (
        bytes.fromhex("0000")                  # attributes: no codec, CreateTime
        + bytes.fromhex("00000001")            # lastOffsetDelta = 1
        + bytes.fromhex("00000000000003e8")    # baseTimestamp = 1000
        + bytes.fromhex("00000000000003ed")    # maxTimestamp = 1005
        + bytes.fromhex("0000000000001234")    # producerId = 0x1234
        + bytes.fromhex("0003")                # producerEpoch = 3
        + bytes.fromhex("00000007")            # baseSequence = 7
        + bytes.fromhex("00000002")            # recordsCount = 2
        + body
    )
    batch_length = 4 + 1 + 4 + len(crcd)  # partitionLeaderEpoch + magic + crc + the CRC'd part
    return (
        bytes.fromhex("0000000000000064")      # baseOffset = 100
        + struct.pack(">i", batch_length)      # batchLength: bytes after this field
        + bytes.fromhex("00000005")            # partitionLeaderEpoch = 5
        + bytes.fromhex("02")                  # magic = 2
        + struct.pack(">I", crc32c.crc32c(crcd))  # crc: CRC-32C of attributes..end
        + crcd
    )


def _build_golden_via_api() -> bytes:
    return records.build_batch(
        [(b"k", b"v"), (None, b"hello")],
        base_offset=100, timestamps=[1000, 1005], producer_id=0x1234, producer_epoch=3,
        base_sequence=7, leader_epoch=5, headers=[[], [("h", b"x")]],
    )


def test_build_batch_matches_golden_bytes():
    golden = _golden_batch()
    assert len(golden) == records.HEADER_SIZE + 9 + 16
    assert _build_golden_via_api() == golden


def test_parse_header_of_golden_bytes():
    golden = _golden_batch()
    h = records.parse_header(golden, 0)
    assert (h.base_offset, h.batch_length, h.leader_epoch, h.magic) == (100, len(golden) - 12, 5, 2)
    assert h.crc == crc32c.crc32c(golden[records.CRC_START:])
    assert (h.attributes, h.last_offset_delta) == (0, 1)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1005)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (0x1234, 3, 7, 2)
    assert h.size == len(golden)
    assert h.last_offset == 101
    assert h.compression == Compression.NONE
    assert not h.is_transactional and not h.is_control
    assert records.crc_ok(golden, h)
    assert records.peek_offset_and_length(golden, 0) == (100, len(golden) - 12)


def test_decode_records_of_golden_bytes():
    golden = _golden_batch()
    recs = records.decode_records(golden, records.parse_header(golden, 0))
    assert recs == [
        records.Record(100, 1000, b"k", b"v", []),
        records.Record(101, 1005, None, b"hello", [("h", b"x")]),
    ]


def test_golden_bytes_agree_with_kafka_python_parser():
    golden = _golden_batch()
    theirs = DefaultRecordBatch(golden)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (100, 1000, b"k", b"v", []),
        (101, 1005, None, b"hello", [("h", b"x")]),
    ]


def test_header_parsed_at_a_position_inside_a_buffer():
    golden = _golden_batch()
    buf = b"\xff" * 7 + golden
    h = records.parse_header(buf, 7)
    assert h.position == 7 and h.base_offset == 100
    assert records.crc_ok(buf, h)
    assert [r.value for r in records.decode_records(buf, h)] == [b"v", b"hello"]


def test_iter_headers_stops_at_partial_tail_and_tiny_length():
    a = records.build_batch([(None, b"a")], base_offset=0)
    b = records.build_batch([(None, b"bb")], base_offset=1)
    assert [h.base_offset for h in records.iter_headers(a + b)] == [0, 1]
    assert [h.base_offset for h in records.iter_headers(a + b[:-1])] == [0]
    tiny = struct.pack(">qi", 5, 10) + b"\x00" * 60  # length below a header
    assert [h.base_offset for h in records.iter_headers(a + tiny)] == [0]


# -- validate_for_append ------------------------------------------------------


def _code(buf: bytes | bytearray, limit: int = 1 << 20) -> ErrorCode:
    with pytest.raises(KafkaApiError) as info:
        records.validate_for_append(buf, limit)
    return info.value.code


def test_validate_accepts_several_batches():
    a = records.build_batch([(None, b"a")] * 3)
    b = records.build_batch([(None, b"b")])
    headers = records.validate_for_append(a + b, 1 << 20)
    assert [(h.position, h.records_count) for h in headers] == [(0, 3), (len(a), 1)]


def test_validate_rejects_empty_and_truncated():
    good = records.build_batch([(None, b"value")])
    assert _code(b"") == ErrorCode.CORRUPT_MESSAGE
    assert _code(good[:40]) == ErrorCode.CORRUPT_MESSAGE
    assert _code(good[:-1]) == ErrorCode.CORRUPT_MESSAGE
    assert _code(good + good[:30]) == ErrorCode.CORRUPT_MESSAGE


def test_validate_rejects_bad_magic():
    buf = bytearray(records.build_batch([(None, b"v")]))
    buf[16] = 1
    assert _code(buf) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_validate_rejects_length_below_header():
    buf = bytearray(records.build_batch([(None, b"v")]))
    struct.pack_into(">i", buf, 8, 10)
    assert _code(buf) == ErrorCode.CORRUPT_MESSAGE


def test_validate_rejects_batch_over_max_message_bytes():
    buf = records.build_batch([(None, b"x" * 100)])
    assert records.validate_for_append(buf, len(buf))
    assert _code(buf, len(buf) - 1) == ErrorCode.MESSAGE_TOO_LARGE


def test_validate_rejects_count_and_offset_delta_disagreeing():
    buf = bytearray(records.build_batch([(None, b"a"), (None, b"b")]))
    struct.pack_into(">i", buf, 57, 3)  # recordsCount 3, lastOffsetDelta still 1
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    assert _code(buf) == ErrorCode.INVALID_RECORD


def test_validate_rejects_unknown_codec():
    buf = records.build_batch([(None, b"a")], attributes=5)  # codec id 5 does not exist
    assert _code(buf) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_every_single_bit_flip_in_crc_range_is_detected():
    good = records.build_batch([(b"key", b"value"), (None, b"v2")], producer_id=9,
                               producer_epoch=0, base_sequence=0, headers=[[("a", b"b")], []])
    records.validate_for_append(good, 1 << 20)
    # The crc field itself, then attributes..end.
    for byte in range(records.CRC_START - 4, len(good)):
        for bit in range(8):
            bad = bytearray(good)
            bad[byte] ^= 1 << bit
            assert _code(bad) == ErrorCode.CORRUPT_MESSAGE, (byte, bit)


# -- assign_offsets -------------------------------------------------------------


def test_assign_offsets_rewrites_offsets_and_epoch_keeping_crc():
    a = records.build_batch([(None, b"a")] * 3, timestamp=50)
    b = records.build_batch([(None, b"b")] * 2, timestamp=60)
    buf = bytearray(a + b)
    headers = records.validate_for_append(buf, 1 << 20)
    records.assign_offsets(buf, headers, 1000, 7, None)
    assert buf[records.CRC_START:len(a)] == a[records.CRC_START:]  # CRC'd range untouched
    reparsed = records.validate_for_append(buf, 1 << 20)
    assert [(h.base_offset, h.last_offset, h.leader_epoch) for h in reparsed] == [
        (1000, 1002, 7), (1003, 1004, 7)]
    assert [(h.base_offset, h.leader_epoch) for h in headers] == [(1000, 7), (1003, 7)]
    offsets = [r.offset for h in reparsed for r in records.decode_records(buf, h)]
    assert offsets == [1000, 1001, 1002, 1003, 1004]


def test_assign_offsets_with_log_append_time_recomputes_crc():
    buf = bytearray(records.build_batch([(None, b"a"), (None, b"b")], timestamps=[10, 20]))
    headers = records.validate_for_append(buf, 1 << 20)
    records.assign_offsets(buf, headers, 5, 2, 999_999)
    (h,) = records.validate_for_append(buf, 1 << 20)  # the CRC is valid again
    assert h.attributes & records.ATTR_LOG_APPEND_TIME
    assert h.max_timestamp == 999_999 and headers[0].max_timestamp == 999_999
    assert h.crc == headers[0].crc
    assert h.base_timestamp == 10  # Kafka leaves baseTimestamp alone
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert [r.timestamp for r in theirs] == [999_999, 999_999]


# -- round trips ----------------------------------------------------------------

_maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
_record = st.tuples(_maybe_bytes, _maybe_bytes,
                    st.lists(st.tuples(st.text(max_size=8), _maybe_bytes), max_size=3))


@st.composite
def _batches(draw):
    recs = draw(st.lists(_record, min_size=1, max_size=12))
    base_ts = draw(st.one_of(st.just(-1), st.integers(0, 2**42)))
    timestamps = [base_ts + draw(st.integers(-10**6, 10**6)) if i else base_ts
                  for i in range(len(recs))]
    codec = draw(st.sampled_from(ALL_CODECS))
    return recs, timestamps, codec


_settings = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(_batches(), st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_build_validate_decode_round_trip(batch, base_offset, epoch):
    recs, timestamps, codec = batch
    buf = bytearray(records.build_batch([(k, v) for k, v, _ in recs], timestamps=timestamps,
                                        compression=codec, headers=[h for _, _, h in recs]))
    (h,) = records.validate_for_append(buf, 1 << 24)
    assert h.compression == codec and h.records_count == len(recs)
    assert h.max_timestamp == max(timestamps) and h.base_timestamp == timestamps[0]
    records.assign_offsets(buf, [h], base_offset, epoch, None)
    (h,) = records.validate_for_append(buf, 1 << 24)
    decoded = records.decode_records(buf, h)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, timestamps[i], k, v, hs) for i, (k, v, hs) in enumerate(recs)]
    # An independent parser (kafka-python) reads the same thing.
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc() and theirs.leader_epoch == epoch
    assert [(r.offset, r.key, r.value) for r in theirs] == [
        (base_offset + i, k, v) for i, (k, v, _) in enumerate(recs)]


@_settings
@given(_batches())
def test_kafka_python_built_batches_validate_and_decode(batch):
    recs, timestamps, codec = batch
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=77, producer_epoch=1, base_sequence=10,
                                        batch_size=1 << 24)
    for i, ((k, v, hs), ts) in enumerate(zip(recs, timestamps, strict=True)):
        builder.append(i, timestamp=ts, key=k, value=v, headers=hs)
    buf = bytes(builder.build())
    (h,) = records.validate_for_append(buf, 1 << 24)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 1, 10)
    decoded = records.decode_records(buf, h)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, timestamps[i], k, v, hs) for i, (k, v, hs) in enumerate(recs)]


@_settings
@given(_batches(), st.integers(0, 2**41))
def test_log_append_time_round_trip(batch, now):
    recs, timestamps, codec = batch
    buf = bytearray(records.build_batch([(k, v) for k, v, _ in recs], timestamps=timestamps,
                                        compression=codec))
    headers = records.validate_for_append(buf, 1 << 24)
    records.assign_offsets(buf, headers, 3, 1, now)
    (h,) = records.validate_for_append(buf, 1 << 24)
    assert h.max_timestamp == now and h.attributes & records.ATTR_LOG_APPEND_TIME
    assert h.compression == codec
    assert len(records.decode_records(buf, h)) == len(recs)


@_settings
@given(_batches(), st.data())
def test_any_bit_flip_is_corrupt_message(batch, data):
    recs, timestamps, codec = batch
    buf = bytearray(records.build_batch([(k, v) for k, v, _ in recs], timestamps=timestamps,
                                        compression=codec))
    bit = data.draw(st.integers((records.CRC_START - 4) * 8, len(buf) * 8 - 1))
    buf[bit // 8] ^= 1 << (bit % 8)
    assert _code(buf, 1 << 24) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_compressed_batch_body_is_actually_compressed(codec):
    value = b"abcdefgh" * 200
    buf = records.build_batch([(None, value)] * 5, compression=codec)
    h = records.parse_header(buf, 0)
    assert h.compression == codec
    if codec != Compression.NONE:
        assert len(buf) < len(value)
    assert [r.value for r in records.decode_records(buf, h)] == [value] * 5


def test_decode_garbage_compressed_body_is_corrupt_message():
    body = b"\x00" * 20
    tail = struct.pack(">hiqqqhii", Compression.GZIP, 0, 0, 0, -1, -1, -1, 1) + body
    buf = struct.pack(">qiibI", 0, 9 + len(tail), -1, 2, crc32c.crc32c(tail)) + tail
    with pytest.raises(KafkaApiError) as info:
        records.decode_records(buf, records.parse_header(buf, 0))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_decode_truncated_records_is_corrupt_message():
    buf = bytearray(records.build_batch([(None, b"v")]))
    struct.pack_into(">i", buf, 57, 2)  # claims two records, carries one
    with pytest.raises(KafkaApiError) as info:
        records.decode_records(buf, records.parse_header(buf, 0))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
