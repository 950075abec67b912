"""One log segment: ``<base offset>.log`` plus its ``.index``, ``.timeindex``
and (once a transaction aborts in it) ``.txnindex``.

The .log file holds record batches back to back, exactly as they go over
the wire, so a fetch is a ``pread`` of a byte range. Writes are plain
``os.write`` calls (page cache); durability comes from ``fsync``, which the
log calls through a worker thread as the flush policy says.

Locating an offset: the offset index gives the last indexed batch at or
below the target; from there we hop over batch headers (27 bytes read each)
to the first batch whose last offset reaches the target. A one-entry hint
remembers where the previous read ended, so sequential consumers skip the
search entirely.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import structlog

from protocol import records
from storage.log.file_deleter import DELETED_SUFFIX, Discard, unlink_all
from storage.log.file_slice import FileSlice
from storage.log.index import OffsetIndex, TimeIndex
from storage.log.txn_index import TransactionIndex

log = structlog.get_logger(__name__)

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
_PEEK = struct.Struct(">qiibIhi")
# Recovery reads the log in chunks this large (bounded memory for big segments).
_RECOVERY_CHUNK = 8 * 1024 * 1024


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


# Below this many bytes a zero-copy read is a pread after all: a slice costs a
# dup, a sendfile, a send of the bytes around it and a close, against one
# small copy into a response sent whole. Replicating single records to
# thousands of partitions is all small reads.
SENDFILE_MIN_BYTES = 8 * 1024


@dataclass(slots=True)
class BatchPosition:
    """Where a batch sits in the segment file."""

    position: int
    base_offset: int
    last_offset: int
    size: int


class LogSegment:
    """An open segment. Not thread-safe: used from the event loop only,
    except ``fsync`` which a worker thread may call."""

    def __init__(self, directory: str, base_offset: int, index_max_bytes: int,
                 index_interval_bytes: int, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        prefix = os.path.join(directory, filename_prefix(base_offset))
        self.log_path = prefix + ".log"
        self.index = OffsetIndex(prefix + ".index", base_offset, index_max_bytes)
        self.time_index = TimeIndex(prefix + ".timeindex", base_offset, index_max_bytes)
        self.txn_index = TransactionIndex(prefix + ".txnindex")
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.created_ms = created_ms
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.last_offset = base_offset - 1
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0
        self._hint: tuple[int, int] | None = None

    # -- writing ------------------------------------------------------------

    def append(self, data: bytes | bytearray, headers: list[records.BatchHeader]) -> None:
        """Append validated batches whose offsets are already assigned."""
        position = self.size
        os.write(self.fd, data)
        for h in headers:
            self._track_timestamp(h.max_timestamp, h.last_offset)
            if self._bytes_since_index > self.index_interval_bytes:
                self._index_entry(h.last_offset, position + h.position)
            self._bytes_since_index += h.size
        self.size += len(data)
        self.last_offset = headers[-1].last_offset

    def _track_timestamp(self, ts: int, offset: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = ts
        if ts > self.max_timestamp:
            self.max_timestamp = ts
            self.offset_of_max_timestamp = offset

    def _index_entry(self, last_offset: int, position: int) -> None:
        """One entry in each index, every ``index.interval.bytes`` of log (as in
        Kafka): the batch's position, and the largest timestamp so far. The time
        index is as sparse as the offset index; ``seal`` adds its last entry."""
        self.index.append(last_offset, position)
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        self._bytes_since_index = 0

    def seal(self) -> None:
        """The segment is no longer active (rolled, or closed): write the largest
        timestamp to the time index, where a reopened segment (and the remote
        tier's copy) reads it from."""
        if self.max_timestamp >= 0 and self.fd >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    def fsync(self) -> None:
        """Flush the log and index files to disk (blocking; call off the loop).

        Concurrency: runs in a worker thread while the event loop may close
        the segment (truncation, retention, a rebuild from the remote tier);
        each descriptor is read once, so a segment closed meanwhile fails with
        EBADF and is skipped (``os.fsync(-1)`` would raise ValueError).
        """
        fd = self.fd
        if fd < 0:
            return
        try:
            os.fsync(fd)
            self.index.fsync()
            self.time_index.fsync()
            self.txn_index.fsync()
        except OSError as exc:
            # The segment was closed (deleted or truncated) while we waited.
            log.debug("fsync skipped", segment=self.log_path, error=str(exc))

    # -- reading ------------------------------------------------------------

    def _peek(self, position: int) -> BatchPosition | None:
        head = os.pread(self.fd, _PEEK.size, position)
        if len(head) < _PEEK.size:
            return None
        base, length, _, _, _, _, last_delta = _PEEK.unpack(head)
        return BatchPosition(position, base, base + last_delta, records.LOG_OVERHEAD + length)

    def find(self, offset: int, limit: int | None = None) -> BatchPosition | None:
        """First batch whose last offset is >= ``offset``, or None."""
        end = self.size if limit is None else min(limit, self.size)
        if self._hint is not None and self._hint[0] == offset:
            position = self._hint[1]
        else:
            _, position = self.index.lookup(offset)
        while position < end:
            batch = self._peek(position)
            if batch is None or batch.size < records.HEADER_SIZE:
                return None
            if batch.last_offset >= offset:
                return batch
            position += batch.size
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None,
             min_one_batch: bool, zero_copy: bool = False
             ) -> tuple[bytes | FileSlice, int] | None:
        """Read whole batches starting with the one holding ``offset``.

        Args:
            offset: first offset wanted.
            max_bytes: byte budget; whole batches only.
            max_position: do not read at or past this file position (the
                high watermark's position), None for the segment end.
            min_one_batch: return the first batch even if larger than max_bytes.
            zero_copy: return a ``FileSlice`` of the batches instead of their
                bytes (the network layer sends it with sendfile), if they
                come to ``SENDFILE_MIN_BYTES`` or more.

        Returns:
            (bytes or slice, first batch position); empty when the batch
            holding ``offset`` exceeds the budget and ``min_one_batch`` is off.
            None if no batch at or after ``offset`` is readable in this segment.
        """
        limit = self.size if max_position is None else min(max_position, self.size)
        first = self.find(offset, limit)
        if first is None:
            return None
        if first.size > max_bytes:
            if not min_one_batch:
                return b"", first.position
            length, last_offset = min(first.size, limit - first.position), first.last_offset
        else:
            length, last_offset = self._whole_batches(first, max_bytes, limit)
        if zero_copy and length >= SENDFILE_MIN_BYTES:
            return FileSlice(self.fd, first.position, length, last_offset), first.position
        return os.pread(self.fd, length, first.position), first.position

    def _whole_batches(self, first: BatchPosition, max_bytes: int, limit: int
                       ) -> tuple[int, int]:
        """(bytes, last offset) of consecutive whole batches from ``first``
        within the budget."""
        length = first.size
        batch = first
        while first.position + length < limit:
            nxt = self._peek(first.position + length)
            if nxt is None or length + nxt.size > max_bytes:
                break
            length += nxt.size
            batch = nxt
        self._hint = (batch.last_offset + 1, first.position + length)
        return length, batch.last_offset

    def position_of(self, offset: int) -> int:
        """Byte position of the batch holding ``offset``, or the size if beyond."""
        batch = self.find(offset)
        return self.size if batch is None else batch.position

    def iter_batches(self, start_position: int = 0):
        """Yield BatchPosition of every batch from ``start_position``."""
        position = start_position
        while position < self.size:
            batch = self._peek(position)
            if batch is None or batch.size < records.HEADER_SIZE:
                return
            yield batch
            position += batch.size

    def read_batch_bytes(self, batch: BatchPosition) -> bytes:
        return os.pread(self.fd, batch.size, batch.position)

    def read_batch_bytes_header(self, batch: BatchPosition) -> records.BatchHeader:
        """The parsed 61-byte header of ``batch`` (no record bytes read)."""
        return records.parse_header(os.pread(self.fd, records.HEADER_SIZE, batch.position), 0)

    # -- loading, recovery, truncation -------------------------------------

    def load_indexes(self) -> bool:
        """Trust the on-disk indexes (clean shutdown). False if unusable."""
        if not self.index.load(self.size):
            return False
        _, position = self.index.lookup(2**63 - 1)
        last = self._scan_tail(position)
        if last is None or not self.time_index.load(last):
            return False
        ts = self.time_index.timestamps
        if len(ts):
            self.max_timestamp = ts[-1]
            self.offset_of_max_timestamp = self.time_index.offsets[-1]
        first = next(self.iter_batches(0), None)
        if first is not None:
            self.first_batch_timestamp = self.read_batch_bytes_header(first).max_timestamp
        return True

    def _scan_tail(self, position: int) -> int | None:
        """Walk headers from ``position`` to the end, restoring in-memory state."""
        last = self.base_offset - 1
        since = 0
        for batch in self.iter_batches(position):
            last = batch.last_offset
            since += batch.size
        if position + since != self.size and self.size:
            return None
        self.last_offset = last
        self._bytes_since_index = since
        return last

    def recover(self, max_batch_bytes: int) -> int:
        """Validate every batch, rebuild indexes, truncate an invalid tail.

        The aborted-transaction index is emptied here; the log's producer-state
        replay fills it again from the markers it meets.

        Returns:
            bytes truncated (0 if the segment was intact).
        """
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        self.last_offset = self.base_offset - 1
        self._bytes_since_index = 0
        self._hint = None
        position = 0
        valid_end = 0
        while position < self.size:
            chunk = os.pread(self.fd, max(_RECOVERY_CHUNK, max_batch_bytes + 64), position)
            consumed = self._recover_chunk(chunk, position)
            if consumed == 0:
                break
            position += consumed
            valid_end = position
        truncated = self.size - valid_end
        if truncated:
            log.warning("truncating invalid log tail", segment=self.log_path,
                        valid_bytes=valid_end, truncated_bytes=truncated)
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        return truncated

    def _recover_chunk(self, chunk: bytes, base_position: int) -> int:
        consumed = 0
        for header in records.iter_headers(chunk):
            if (header.magic != records.MAGIC_V2 or not records.crc_ok(chunk, header)
                    or header.base_offset <= self.last_offset
                    or header.base_offset < self.base_offset):
                break
            self._track_timestamp(header.max_timestamp, header.last_offset)
            if self._bytes_since_index > self.index_interval_bytes:
                self._index_entry(header.last_offset, base_position + header.position)
            self._bytes_since_index += header.size
            self.last_offset = header.last_offset
            consumed = header.position + header.size
        return consumed

    def truncate_to(self, offset: int) -> int:
        """Remove batches with base offset >= ``offset``; returns bytes removed.

        A batch straddling ``offset`` is kept whole (Kafka truncates at batch
        boundaries too).
        """
        position = self.size
        for batch in self.iter_batches(self.index.lookup(offset)[1]):
            if batch.base_offset >= offset:
                position = batch.position
                break
        removed = self.size - position
        if removed:
            os.ftruncate(self.fd, position)
            self.size = position
            self.index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self._hint = None
            self._rescan_after_truncate()
        return removed

    def _rescan_after_truncate(self) -> None:
        """The largest timestamp and last offset of what is left (the indexes
        were cut at the truncation point)."""
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.last_offset = self.base_offset - 1
        for batch in self.iter_batches(0):
            header = self.read_batch_bytes_header(batch)
            self._track_timestamp(header.max_timestamp, header.last_offset)
            self.last_offset = batch.last_offset

    def close(self) -> None:
        self.seal()
        for closer in (self.index.close, self.time_index.close):
            closer()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self, discard: Discard | None = None) -> None:
        """Close and remove all files of this segment: at once, or (with
        ``discard``, ``storage.log.file_deleter``) renamed ``*.deleted`` now
        and handed to ``discard`` to be unlinked later."""
        self.close()
        paths = (self.log_path, self.index.path, self.time_index.path, self.txn_index.path)
        if discard is None:
            unlink_all(paths)
            return
        renamed = []
        for path in paths:
            try:
                os.rename(path, path + DELETED_SUFFIX)
            except FileNotFoundError:
                continue
            renamed.append(path + DELETED_SUFFIX)
        discard(renamed)

    @property
    def is_empty(self) -> bool:
        return self.size == 0
