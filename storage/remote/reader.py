"""Reading records from the remote tier for consumer fetches and timestamp lookups.

Theory of operation: a fetch below the local log start finds the remote
segment holding the offset (through the metadata manager, by the offset's
leader epoch), maps the offset to a byte position with the segment's offset
index (RemoteIndexCache), reads a byte range from the storage manager, skips
batches below the offset and returns whole batches within the byte budget.

Every batch handed back is checked: CRC-32C, magic, offsets inside the
segment's range and increasing. A missing or corrupt object raises
``RemoteStorageError``: the fetch answers that partition with an error,
never with garbage or an empty result that would look like the end of the
log.

A consumer reads on where its last fetch ended, so each read remembers
where the next batch starts (``NextPositions``: segment, next offset ->
byte position) and a read starting there needs no index; nor does one
starting at the segment's first offset (byte 0). The offset index is
fetched only for a read that jumps (a seek, a new consumer).

A read whose bytes are all in the chunk cache runs on the event loop
(``read_cached``): no store call, no thread hop.

Concurrency: ``read_blocking`` and ``offset_for_timestamp_blocking`` run in
worker threads behind the reader limiter; they touch only the storage
manager, the index cache and ``NextPositions`` (thread-safe) and their
arguments.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import cast

from protocol import records
from protocol.errors import KafkaApiError
from storage.remote.api import RemoteStorageManager
from storage.remote.chunk_cache import ChunkCache, NotCached
from storage.remote.index_cache import CachedIndexes, RemoteIndexCache
from storage.remote.naming import index_lengths
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

# Extra bytes read past the budget so the scan from the indexed position can
# skip the batches below the wanted offset in the same request (the index has
# an entry every index.interval.bytes = 4 KiB by default).
_SCAN_SLACK = 64 * 1024


# Read positions remembered (a few per partition being read).
_NEXT_POSITIONS = 4096


class NextPositions:
    """(segment id, offset) -> byte position of the batch starting at that
    offset, where earlier reads ended; least recently used out."""

    def __init__(self, capacity: int = _NEXT_POSITIONS) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, segment: uuid.UUID, offset: int) -> int | None:
        with self._lock:
            return self._entries.get((segment, offset))

    def put(self, segment: uuid.UUID, offset: int, position: int) -> None:
        with self._lock:
            self._entries[(segment, offset)] = position
            self._entries.move_to_end((segment, offset))
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


class CorruptRemoteDataError(RemoteStorageError):
    """Remote bytes that are not the records the metadata promises."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


def fetch_offset_and_time_indexes(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata
                                  ) -> tuple[bytes, bytes]:
    """Both indexes of ``md``: one GET of its ``indexes`` object where its
    manifest names one (layout 2), else one GET each (layout 1).

    Raises:
        RemoteStorageError: as ``fetch_index``; CorruptRemoteDataError when the
            ``indexes`` object disagrees with the manifest.
    """
    lengths = index_lengths(md)
    fetch_combined = getattr(rsm, "fetch_combined_indexes", None)
    if lengths is not None and fetch_combined is not None:
        try:
            blob = fetch_combined(md)
        except RemoteResourceNotFoundError:
            pass  # removed by hand, or a store without it: the separate objects
        else:
            if len(blob) != sum(lengths):
                raise CorruptRemoteDataError(
                    f"indexes object of {md.remote_log_segment_id} is {len(blob)} bytes, "
                    f"its manifest says {sum(lengths)}")
            return blob[:lengths[0]], blob[lengths[0]:]
    return rsm.fetch_index(md, IndexType.OFFSET), rsm.fetch_index(md, IndexType.TIMESTAMP)


def indexes_for(cache: RemoteIndexCache, rsm: RemoteStorageManager,
                md: RemoteLogSegmentMetadata) -> CachedIndexes:
    seg_id = md.remote_log_segment_id.id
    try:
        return cache.get(str(seg_id), md.start_offset,
                         lambda: fetch_offset_and_time_indexes(rsm, md))
    except ValueError as exc:
        raise CorruptRemoteDataError(
            f"corrupt remote index of {md.remote_log_segment_id}: {exc}") from None


def _fetch(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int,
           length: int) -> bytes:
    end = min(start + length, md.segment_size_in_bytes) - 1
    if end < start:
        return b""
    return rsm.fetch_log_segment(md, start, end)


def _check_batch(buf: bytes, header: records.BatchHeader, md: RemoteLogSegmentMetadata,
                 previous_last: int) -> None:
    if (header.magic != records.MAGIC_V2 or not records.crc_ok(buf, header)
            or header.base_offset < md.start_offset or header.last_offset > md.end_offset
            or header.base_offset <= previous_last):
        raise CorruptRemoteDataError(
            f"corrupt batch at offset {header.base_offset} in remote segment "
            f"{md.remote_log_segment_id}")


def read_blocking(rsm: RemoteStorageManager, cache: RemoteIndexCache,
                  md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                  min_one_batch: bool, positions: NextPositions | None = None) -> bytes:
    """Whole batches of ``md`` starting with the one that holds ``offset``.

    Where to start reading: ``positions``' entry for ``offset``, else byte 0
    for the segment's first offset, else the offset index.

    Returns:
        Up to ``max_bytes`` of batches (the first batch even if larger, when
        ``min_one_batch``); b"" if the budget cannot hold the first batch.

    Raises:
        RemoteStorageError: missing object, corrupt data, store failure.
    """
    seg = md.remote_log_segment_id.id
    position = positions.get(seg, offset) if positions is not None else None
    if position is None and offset <= md.start_offset:
        position = 0
    if position is None:
        position = indexes_for(cache, rsm, md).position_for(offset)
        length = max(max_bytes, records.HEADER_SIZE) + _SCAN_SLACK
    else:
        length = _exact_read_length(rsm, md, position, max_bytes, min_one_batch)
    data, end, next_offset = _read_from(rsm, md, offset, max_bytes, min_one_batch, position,
                                        length)
    if positions is not None and data and next_offset <= md.end_offset:
        positions.put(seg, next_offset, end)
    return data


def read_cached(chunks: ChunkCache | None, cache: RemoteIndexCache,
                md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                min_one_batch: bool, positions: NextPositions) -> bytes | None:
    """``read_blocking`` if every byte it needs is in the chunk cache and no
    index is needed (a consumer reading on); None if the store would be asked.

    Concurrency: makes no store call and never waits, so the event loop may
    call it, sparing a sequential read the hop to a reader thread.

    Raises:
        RemoteStorageError: corrupt data (as ``read_blocking``).
    """
    if chunks is None or (offset > md.start_offset
                          and positions.get(md.remote_log_segment_id.id, offset) is None):
        return None
    try:
        with chunks.cached_only():
            # The chunk cache reads with the storage manager's contract.
            return read_blocking(cast(RemoteStorageManager, chunks), cache, md, offset,
                                 max_bytes, min_one_batch, positions)
    except NotCached:
        return None


def _exact_read_length(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, position: int,
                       max_bytes: int, min_one_batch: bool) -> int:
    """Bytes to read from ``position``, where the wanted batch starts: the
    budget, or the first batch if it is larger and may be returned alone.

    Through the chunk cache its length field is read first (a cold chunk
    streams in, so this costs no GET of its own), and a reader whose first
    batch is most of its budget waits for that batch, not the whole budget
    and the slack; straight to the store it is not (it would be a GET).
    """
    if not isinstance(rsm, ChunkCache):
        return max(max_bytes, records.HEADER_SIZE) + _SCAN_SLACK
    head = _fetch(rsm, md, position, records.LOG_OVERHEAD)
    if len(head) < records.LOG_OVERHEAD:
        return max(max_bytes, records.HEADER_SIZE)  # _read_from says what is wrong
    _, length = records.peek_offset_and_length(head, 0)
    first = records.LOG_OVERHEAD + max(length, 0)
    return max(max_bytes, first if min_one_batch else records.HEADER_SIZE, records.HEADER_SIZE)


def _read_from(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, offset: int,
               max_bytes: int, min_one_batch: bool, position: int,
               length: int) -> tuple[bytes, int, int]:
    """(batches, byte position after them, offset after them) from ``position``
    on, reading ``length`` bytes at a time."""
    size = md.segment_size_in_bytes
    previous_last = md.start_offset - 1
    while position < size:
        chunk = _fetch(rsm, md, position, length)
        consumed = 0
        for header in records.iter_headers(chunk):
            if header.last_offset >= offset:
                return _collect(rsm, md, chunk, header, position, max_bytes, min_one_batch,
                                previous_last)
            _check_batch(chunk, header, md, previous_last)
            previous_last = header.last_offset
            consumed = header.position + header.size
        if consumed == 0:
            # The batch at ``position`` is larger than the chunk: fetch it whole.
            batch = _whole_batch_at(rsm, md, chunk, position)
            header = records.parse_header(batch, 0)
            if header.last_offset >= offset:
                return _collect(rsm, md, batch, header, position, max_bytes, min_one_batch,
                                previous_last)
            _check_batch(batch, header, md, previous_last)
            previous_last = header.last_offset
            consumed = header.size
        position += consumed
    raise CorruptRemoteDataError(f"offset {offset} not found in remote segment "
                             f"{md.remote_log_segment_id} ({md.start_offset}..{md.end_offset})")


def _whole_batch_at(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, chunk: bytes,
                    position: int) -> bytes:
    if len(chunk) < records.HEADER_SIZE:
        raise CorruptRemoteDataError(f"truncated batch header in {md.remote_log_segment_id}")
    _, length = records.peek_offset_and_length(chunk, 0)
    if length < records.HEADER_SIZE - records.LOG_OVERHEAD:
        raise CorruptRemoteDataError(f"corrupt batch length in {md.remote_log_segment_id}")
    batch = _fetch(rsm, md, position, records.LOG_OVERHEAD + length)
    if len(batch) < records.LOG_OVERHEAD + length:
        raise CorruptRemoteDataError(f"truncated batch in {md.remote_log_segment_id}")
    return batch


def _collect(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, chunk: bytes,
             first: records.BatchHeader, chunk_position: int, max_bytes: int,
             min_one_batch: bool, previous_last: int) -> tuple[bytes, int, int]:
    """Whole batches from ``first`` within the budget, every one checked; with
    the byte position and the offset right after them."""
    if first.size > max_bytes and not min_one_batch:
        return b"", chunk_position + first.position, first.base_offset
    if first.position + first.size > len(chunk):
        chunk_position += first.position
        chunk = _whole_batch_at(rsm, md, chunk[first.position:], chunk_position)
        first = records.parse_header(chunk, 0)
    start = first.position
    end = start
    for header in records.iter_headers(memoryview(chunk)[start:]):
        header.position += start
        if end > start and header.position + header.size - start > max_bytes:
            break
        _check_batch(chunk, header, md, previous_last)
        previous_last = header.last_offset
        end = header.position + header.size
    return bytes(chunk[start:end]), chunk_position + end, previous_last + 1


def offset_for_timestamp_blocking(rsm: RemoteStorageManager, cache: RemoteIndexCache,
                                  md: RemoteLogSegmentMetadata, timestamp: int,
                                  floor_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record >= ``timestamp`` in ``md``, at or above
    ``floor_offset`` (the log start), or None.

    Raises:
        RemoteStorageError: missing object, corrupt data, store failure.
    """
    indexes = indexes_for(cache, rsm, md)
    start_offset = max(indexes.offset_for_timestamp(timestamp), floor_offset, md.start_offset)
    position = indexes.position_for(start_offset)
    data = bytes(_fetch(rsm, md, position, md.segment_size_in_bytes - position))
    previous_last = md.start_offset - 1
    parsed_to = 0
    for header in records.iter_headers(data):
        _check_batch(data, header, md, previous_last)
        previous_last = header.last_offset
        parsed_to = header.position + header.size
        if header.last_offset < start_offset or header.max_timestamp < timestamp:
            continue
        append_time = header.attributes & records.ATTR_LOG_APPEND_TIME
        try:
            decoded = records.decode_records(data, header)
        except KafkaApiError as exc:
            raise CorruptRemoteDataError(f"undecodable batch in {md.remote_log_segment_id}: "
                                     f"{exc}") from None
        for rec in decoded:
            ts = header.max_timestamp if append_time else rec.timestamp
            if ts >= timestamp and rec.offset >= start_offset:
                return rec.offset, ts
    if parsed_to != len(data):
        # The batches stopped short of the segment's end: a length field lies.
        # Answering None would send the caller to a later segment (a wrong offset).
        raise CorruptRemoteDataError(
            f"unparseable batch at byte {position + parsed_to} of remote segment "
            f"{md.remote_log_segment_id}")
    return None
