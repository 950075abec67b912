"""Record batches, magic v2 (the only format Produce v3+ carries).

Layout of the 61-byte batch header (offsets in bytes)::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field
    12 partitionLeaderEpoch  int32
    16 magic                 int8    must be 2
    17 crc                   uint32  CRC-32C of bytes 21..end
    21 attributes            int16   bits 0-2 codec, 3 timestamp type,
                                     4 transactional, 5 control
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32

The hot produce path never decompresses: it validates headers and CRCs,
then rewrites ``baseOffset`` and ``partitionLeaderEpoch`` in place (both lie
before the CRC'd range, so the CRC stays valid). Only LogAppendTime topics
touch the CRC'd range (attributes and maxTimestamp) and recompute it.
Decoding individual records (``decode_records``) is for timestamp lookups and
tests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c
from kafka import codec

from protocol.errors import ErrorCode, KafkaApiError

HEADER_SIZE = 61
# Bytes before batchLength's coverage starts: baseOffset + batchLength.
LOG_OVERHEAD = 12
MAGIC_V2 = 2
CRC_START = 21

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")


class Compression:
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    NAMES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(slots=True)
class BatchHeader:
    """A parsed batch header plus its position in the buffer it came from."""

    position: int
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch including the offset and length fields."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def parse_header(buf: bytes | bytearray | memoryview, position: int) -> BatchHeader:
    """Parse the batch header at ``position``; the caller checked 61 bytes are there."""
    return BatchHeader(position, *_HEADER.unpack_from(buf, position))


def peek_offset_and_length(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Return (baseOffset, batchLength) of the batch at ``position``."""
    return _OFFSET_AND_LENGTH.unpack_from(buf, position)


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    """Whether the stored CRC-32C matches the batch bytes."""
    start = header.position + CRC_START
    end = header.position + header.size
    return crc32c.crc32c(memoryview(buf)[start:end]) == header.crc


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Yield every complete batch header in ``buf``; stops at a partial tail.

    No validation beyond sizes: a batch whose length field is smaller than a
    header ends the iteration (the caller treats what follows as garbage).
    """
    pos = 0
    n = len(buf)
    while n - pos >= HEADER_SIZE:
        _, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > n:
            return
        yield parse_header(buf, pos)
        pos += LOG_OVERHEAD + length


def validate_for_append(buf: bytes | bytearray, max_batch_bytes: int,
                        produced: bool = True) -> list[BatchHeader]:
    """Check a produced record set before it is appended.

    Args:
        buf: the ``records`` bytes of one partition in a Produce request.
        max_batch_bytes: the topic's max.message.bytes.
        produced: a client's batches (one record per offset). False for
            replicated ones, which may come from a compacted log: fewer
            records than offsets, or none (``protocol.record_filter``).

    Returns:
        The batch headers, in order.

    Raises:
        KafkaApiError: CORRUPT_MESSAGE for truncated data, a bad magic, length
            or CRC; MESSAGE_TOO_LARGE for a batch above the limit;
            INVALID_RECORD for an empty or inconsistent batch.
    """
    headers: list[BatchHeader] = []
    pos = 0
    n = len(buf)
    if n == 0:
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "truncated batch header")
        header = parse_header(buf, pos)
        if header.magic != MAGIC_V2:
            raise KafkaApiError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {header.magic}")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > n:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "batch length out of bounds")
        if header.size > max_batch_bytes:
            raise KafkaApiError(
                ErrorCode.MESSAGE_TOO_LARGE, f"batch of {header.size} bytes > {max_batch_bytes}"
            )
        if not crc_ok(buf, header):
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "CRC mismatch")
        if header.records_count < 0 or header.last_offset_delta < header.records_count - 1 or (
                produced and (header.records_count == 0
                              or header.last_offset_delta != header.records_count - 1)):
            raise KafkaApiError(ErrorCode.INVALID_RECORD, "record count and offsets disagree")
        if header.compression > Compression.ZSTD:
            raise KafkaApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(header.compression))
        headers.append(header)
        pos += header.size
    return headers


def assign_offsets(
    buf: bytearray,
    headers: Sequence[BatchHeader],
    base_offset: int,
    leader_epoch: int,
    log_append_time: int | None,
) -> None:
    """Rewrite offsets (and timestamps for LogAppendTime) in place.

    Args:
        buf: the validated record set, mutable.
        headers: as returned by ``validate_for_append`` (updated in place too).
        base_offset: offset given to the first record.
        leader_epoch: the partition's current leader epoch.
        log_append_time: broker time in ms if the topic uses LogAppendTime.
    """
    next_offset = base_offset
    for h in headers:
        _BASE_OFFSET.pack_into(buf, h.position, next_offset)
        _LEADER_EPOCH.pack_into(buf, h.position + 12, leader_epoch)
        h.base_offset = next_offset
        h.leader_epoch = leader_epoch
        if log_append_time is not None:
            h.attributes |= ATTR_LOG_APPEND_TIME
            h.max_timestamp = log_append_time
            _ATTRIBUTES.pack_into(buf, h.position + 21, h.attributes)
            _MAX_TIMESTAMP.pack_into(buf, h.position + 35, log_append_time)
            h.crc = crc32c.crc32c(memoryview(buf)[h.position + CRC_START : h.position + h.size])
            _CRC.pack_into(buf, h.position + 17, h.crc)
        next_offset += h.last_offset_delta + 1


# ---------------------------------------------------------------------------
# Individual records: decoding (timestamp lookups, tests) and building.


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "truncated varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "truncated record field")
    return bytes(buf[pos : pos + length]), pos + length


def _decompress(compression: int, data: bytes) -> bytes:
    if compression == Compression.NONE:
        return data
    if compression == Compression.GZIP:
        return codec.gzip_decode(data)
    if compression == Compression.SNAPPY:
        return codec.snappy_decode(data)
    if compression == Compression.LZ4:
        return codec.lz4_decode(data)
    if compression == Compression.ZSTD:
        return codec.zstd_decode(data)
    raise KafkaApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(compression))


def _compress(compression: int, data: bytes) -> bytes:
    if compression == Compression.NONE:
        return data
    if compression == Compression.GZIP:
        return codec.gzip_encode(data)
    if compression == Compression.SNAPPY:
        return codec.snappy_encode(data)
    if compression == Compression.LZ4:
        return codec.lz4_encode(data)
    if compression == Compression.ZSTD:
        return codec.zstd_encode(data)
    raise ValueError(f"unknown compression {compression}")


def decode_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record]:
    """Decompress and decode the records of one batch.

    Raises:
        KafkaApiError: CORRUPT_MESSAGE if the records do not parse.
    """
    body = bytes(memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size])
    try:
        data = _decompress(header.compression, body)
    except KafkaApiError:
        raise
    except Exception as exc:  # codec libraries raise assorted types
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, f"decompression failed: {exc}") from exc
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if end > len(data):
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "truncated record")
        pos += 1  # attributes, unused
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = _read_varint(data, pos)
        hdrs: list[tuple[str, bytes | None]] = []
        for _ in range(max(n_headers, 0)):
            hkey, pos = _read_bytes(data, pos)
            hval, pos = _read_bytes(data, pos)
            hdrs.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "record length mismatch")
        records.append(
            Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, hdrs)
        )
    return records


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    compression: int = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    leader_epoch: int = -1,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
) -> bytes:
    """Build a v2 batch from (key, value) pairs (control batches, tests)."""
    ts = list(timestamps) if timestamps is not None else [timestamp] * len(records)
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = bytearray(b"\x00")
        _write_varint(rec, ts[i] - ts[0])
        _write_varint(rec, i)
        for field in (key, value):
            if field is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(field))
                rec += field
        rec_headers = headers[i] if headers is not None else ()
        _write_varint(rec, len(rec_headers))
        for hkey, hval in rec_headers:
            kb = hkey.encode()
            _write_varint(rec, len(kb))
            rec += kb
            if hval is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(hval))
                rec += hval
        _write_varint(body, len(rec))
        body += rec
    payload = _compress(compression, bytes(body))
    attrs = attributes | compression
    tail = bytearray(_HEADER.size - CRC_START)
    struct.pack_into(
        ">hiqqqhii", tail, 0, attrs, len(records) - 1, ts[0], max(ts), producer_id,
        producer_epoch, base_sequence, len(records),
    )
    tail += payload
    crc = crc32c.crc32c(bytes(tail))
    batch_length = 4 + 1 + 4 + len(tail)
    head = struct.pack(">qiibI", base_offset, batch_length, leader_epoch, MAGIC_V2, crc)
    return head + bytes(tail)
