"""Rewriting a v2 record batch with only some of its records (log compaction).

The log cleaner keeps a batch's identity when it drops records from it, as
Kafka's does (``MemoryRecords.filterTo``): the base offset, last offset
delta, producer id, epoch and base sequence stay, so offsets never move and
an idempotent producer's sequence range is unchanged; only the record count,
the records, the max timestamp, the CRC and the length change. A batch may
therefore hold fewer records than its offset range (every client handles
that: it is what a compacted topic looks like in Kafka).

Delete horizon (KIP-534): the first time the cleaner keeps a tombstone, or
a transaction marker it could drop, it stamps the batch with the time after
which that record may go: attribute bit 6 set and the first-timestamp field
holding the horizon. Record timestamps are stored as deltas from that field,
so they are rebased to keep every record's absolute timestamp; clients read
the same timestamps as before.

Pure: bytes in, bytes out (kafka-python's codecs for compression).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError

# Attribute bit 6: the first-timestamp field holds the delete horizon (KIP-534).
ATTR_DELETE_HORIZON = 0x40
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count (after the CRC)
_HEAD = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc


@dataclass(slots=True)
class RawRecord:
    """One record of a decompressed batch body, located but not copied.

    ``start``..``end`` is the whole record including its length prefix;
    ``rest`` is where the bytes after the timestamp delta begin.
    """

    start: int
    end: int
    attributes_at: int
    rest: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool


def delete_horizon(header: records.BatchHeader) -> int | None:
    """The batch's delete horizon in ms, None if it has none."""
    if header.attributes & ATTR_DELETE_HORIZON:
        return header.base_timestamp
    return None


def records_body(buf: bytes | bytearray | memoryview, header: records.BatchHeader) -> bytes:
    """The decompressed record bytes of the batch at ``header``.

    Raises:
        KafkaApiError: CORRUPT_MESSAGE if decompression fails.
    """
    body = bytes(memoryview(buf)[header.position + records.HEADER_SIZE:
                                 header.position + header.size])
    try:
        return records._decompress(header.compression, body)
    except KafkaApiError:
        raise
    except Exception as exc:  # codec libraries raise assorted types
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, f"decompression failed: {exc}") from exc


def scan_records(body: bytes, count: int) -> list[RawRecord]:
    """Locate ``count`` records in ``body``, reading only offsets, timestamps and keys.

    Raises:
        KafkaApiError: CORRUPT_MESSAGE for a record that does not parse.
    """
    read_varint = records._read_varint
    out: list[RawRecord] = []
    pos = 0
    for _ in range(count):
        start = pos
        length, pos = read_varint(body, pos)
        end = pos + length
        if length < 1 or end > len(body):
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "truncated record")
        attributes_at = pos
        ts_delta, rest = read_varint(body, pos + 1)
        off_delta, pos = read_varint(body, rest)
        key_len, pos = read_varint(body, pos)
        key = None
        if key_len >= 0:
            key = body[pos:pos + key_len]
            pos += key_len
        value_len, pos = read_varint(body, pos)
        if pos > end or (value_len > 0 and pos + value_len > end):
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "record fields overrun the record")
        out.append(RawRecord(start, end, attributes_at, rest, off_delta, ts_delta, key,
                             value_len >= 0))
        pos = end
    return out


def rebuild_batch(buf: bytes | bytearray | memoryview, header: records.BatchHeader, body: bytes,
                  kept: list[RawRecord], set_horizon: int | None = None) -> bytes:
    """The batch at ``header`` holding only ``kept`` (in order; empty keeps only
    the header, which is how a producer's last batch keeps its sequence numbers).

    Args:
        buf: the bytes holding the original batch (for its fields).
        body: its decompressed records (``records_body``).
        kept: the records to keep, as ``scan_records`` located them in ``body``.
        set_horizon: stamp this delete horizon (ms) on the batch, rebasing
            record timestamps; None keeps the batch's timestamps as they are.
    """
    base_ts = header.base_timestamp
    new_base = base_ts if set_horizon is None else set_horizon
    parts: list[bytes] = []
    max_ts = records.NO_TIMESTAMP
    for rec in kept:
        ts = base_ts + rec.timestamp_delta
        max_ts = max(max_ts, ts)
        if new_base == base_ts:
            parts.append(body[rec.start:rec.end])
            continue
        inner = bytearray(body[rec.attributes_at:rec.attributes_at + 1])
        records._write_varint(inner, ts - new_base)
        inner += body[rec.rest:rec.end]
        prefix = bytearray()
        records._write_varint(prefix, len(inner))
        parts.append(bytes(prefix + inner))
    attributes = header.attributes | (ATTR_DELETE_HORIZON if set_horizon is not None else 0)
    if header.attributes & records.ATTR_LOG_APPEND_TIME or not kept:
        max_ts = header.max_timestamp
    if kept:
        payload = records._compress(header.compression, b"".join(parts))
    else:
        # An empty batch (Kafka's RETAIN_EMPTY): a header and no records section.
        attributes &= ~records.ATTR_COMPRESSION_MASK
        payload = b""
    tail = _TAIL.pack(attributes, header.last_offset_delta, new_base, max_ts,
                      header.producer_id, header.producer_epoch, header.base_sequence,
                      len(kept)) + payload
    crc = crc32c.crc32c(tail)
    length = records.HEADER_SIZE - records.LOG_OVERHEAD + len(payload)
    return _HEAD.pack(header.base_offset, length, header.leader_epoch, records.MAGIC_V2,
                      crc) + tail
