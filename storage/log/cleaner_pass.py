"""One cleaning pass over one partition's closed segments (Kafka's ``Cleaner``).

Theory of operation. A compacted log has a clean head (cleaned before, up
to the first dirty offset, which the cleaner checkpoints) and a dirty tail.
A pass:

1. ``build_map``: reads the dirty section [first dirty, first uncleanable)
   and maps each key (a 16-byte BLAKE2b digest, as Kafka maps an MD5) to the
   offset of its last record. Records of aborted transactions and control
   batches are not mapped. The map is bounded (log.cleaner.dedupe.buffer.size
   over the cleaner threads); when it is full the pass stops at a batch
   boundary and covers only [first dirty, map end): the next pass goes on
   from there.
2. ``clean_group`` for each group of consecutive segments from the log start
   up to the one holding the map end (grouped so a cleaned segment stays
   within segment.bytes): every batch is copied to ``<base>.log.cleaned``,
   keeping a record only if no later record has its key (offset >= the
   map's), dropping aborted transactional data, tombstones and transaction
   markers once their delete horizon passed (``protocol.record_filter``), and
   records without a key (a compacted log cannot hold them). The offset,
   time and aborted-transaction indexes are written beside it and all are
   fsynced; the broker then swaps them in (``storage.log.swap``).

Tombstones are removed only below the map end: above it, older values of
the key may still be in the log (the map has not seen the tombstone), and
dropping the tombstone would resurrect them.

Transactions (Kafka's ``CleanedTransactionMetadata``): an aborted
transaction's data goes; its ABORT marker stays, with its index entry, as
long as the pass saw data of it; a COMMIT marker stays while the pass kept
data of its transaction. A marker that may go is first stamped with a
delete horizon and removed in a pass after it, so a read_committed consumer
reading from the start within delete.retention.ms sees the same records.
The last data batch of each producer the log still tracks is never removed:
if none of its records stay, it stays as an empty batch (a header with no
records, Kafka's RETAIN_EMPTY), so a replica or a replay rebuilding producer
state from the log still finds the producer's last sequence and epoch.

Runs in a cleaner worker process (``storage.log.cleaner_process``): it reads
segment files by path, never the broker's objects. Every input is in the
``PassSpec``; the broker checks the segments are still the ones it named
before swapping anything in.

Error handling: a batch that fails its CRC or does not parse raises
``CorruptLog``; the broker marks the partition uncleanable.

Why one module over ~450 lines: it is one pass, in order (map, filter, write,
swap), each step using the previous one's state; Kafka's Cleaner is one class
for the same reason.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from protocol import records
from protocol.control import decode_marker
from protocol.errors import KafkaApiError
from protocol.record_filter import RawRecord, delete_horizon, rebuild_batch, records_body, scan_records
from storage.log.index import OffsetIndex, TimeIndex
from storage.log.segment import filename_prefix
from storage.log.swap import CLEANED, remove_cleaned
from storage.log.txn_index import AbortedTxn

# Memory one map entry takes in the worker: a dict slot plus a 16-byte bytes
# key and an int, measured with tracemalloc at 200k entries (~137 bytes),
# rounded up for the dict's slack right after it grows.
BYTES_PER_MAP_ENTRY = 160
KEY_DIGEST_BYTES = 16
_INDEX_ENTRY = OffsetIndex.entry
_TIME_ENTRY = TimeIndex.entry


class CorruptLog(Exception):
    """A batch in a segment the cleaner read is corrupt."""


@dataclass(frozen=True, slots=True)
class PassSpec:
    """What a pass needs to know about the log, taken on the broker's event loop."""

    directory: str
    bases: list[int]  # closed segments from the log start, below the first uncleanable
    sizes: list[int]  # their sizes when the pass started (never read past)
    first_dirty: int
    first_uncleanable: int
    aborted: list[AbortedTxn]  # overlapping the segments above, by first offset
    last_data_offsets: dict[int, int]  # producer id -> offset of its last data batch
    now_ms: int
    delete_retention_ms: int
    map_memory_bytes: int
    map_load_factor: float
    io_buffer_bytes: int
    io_max_bytes_per_second: float
    max_message_bytes: int
    index_interval_bytes: int


@dataclass(frozen=True, slots=True)
class MapResult:
    map_end: int  # the pass covers offsets below this
    entries: int
    utilization: float  # of the map's capacity
    bytes_read: int


@dataclass(slots=True)
class GroupResult:
    base: int
    size: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    invalid_records: int = 0  # records without a key: dropped


class OffsetMap:
    """Key digest -> offset of the key's latest record, bounded in entries."""

    def __init__(self, memory_bytes: int, load_factor: float) -> None:
        self.capacity = max(1, int(memory_bytes * load_factor) // BYTES_PER_MAP_ENTRY)
        self._offsets: dict[bytes, int] = {}

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=KEY_DIGEST_BYTES).digest()

    def __len__(self) -> int:
        return len(self._offsets)

    def room_for(self, count: int) -> bool:
        return len(self._offsets) + count <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[self.digest(key)] = offset

    def get(self, key: bytes) -> int:
        """The mapped offset of ``key``, -1 if the map has none."""
        return self._offsets.get(self.digest(key), -1)


@dataclass(slots=True)
class _Aborted:
    txn: AbortedTxn
    seen_data: bool = False


@dataclass(slots=True)
class TxnTracker:
    """Which transactions a pass is inside of, read in offset order."""

    pending: deque[AbortedTxn]
    aborted: dict[int, _Aborted] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, aborted: list[AbortedTxn]) -> TxnTracker:
        return cls(deque(sorted(aborted, key=lambda t: t.first_offset)))

    def _consume_up_to(self, offset: int) -> None:
        while self.pending and self.pending[0].first_offset <= offset:
            txn = self.pending.popleft()
            self.aborted[txn.producer_id] = _Aborted(txn)

    def on_data(self, header: records.BatchHeader) -> bool:
        """Read a data batch; True if it belongs to an aborted transaction."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self.aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.seen_data = True
            return True
        self.committed.add(header.producer_id)
        return False

    def on_marker(self, header: records.BatchHeader, committed: bool | None
                  ) -> tuple[bool, AbortedTxn | None]:
        """Read a control batch (``committed`` None: not a transaction marker).

        Returns:
            (whether the marker may go once its horizon passes, the aborted
            transaction to index beside it when it stays).
        """
        self._consume_up_to(header.last_offset)
        pid = header.producer_id
        if committed is None:
            return False, None
        if committed:
            had_data = pid in self.committed
            self.committed.discard(pid)
            return not had_data, None
        ongoing = self.aborted.pop(pid, None)
        if ongoing is not None and ongoing.seen_data:
            return False, ongoing.txn
        return True, None


class _Throttle:
    """log.cleaner.io.max.bytes.per.second over the reads and writes of a pass."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.started = time.monotonic()
        self.done = 0

    def account(self, nbytes: int) -> None:
        self.done += nbytes
        if self.rate <= 0 or self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            time.sleep(ahead)


def _marker_kind(buf: bytes, header: records.BatchHeader) -> bool | None:
    """True COMMIT, False ABORT, None for other control records."""
    try:
        decoded = records.decode_records(buf, header)
        if len(decoded) != 1:
            raise CorruptLog(f"control batch at {header.base_offset} holds {len(decoded)} records")
        marker = decode_marker(decoded[0].key, decoded[0].value)
    except KafkaApiError as exc:
        raise CorruptLog(f"control batch at {header.base_offset}: {exc.message}") from None
    return None if marker is None else marker.committed


class _CleanedWriter:
    """Writes ``<base>.log.cleaned`` and its indexes, as ``LogSegment.append`` would."""

    def __init__(self, directory: str, base: int, index_interval: int, buffer_bytes: int) -> None:
        self.prefix = os.path.join(directory, filename_prefix(base))
        self.base = base
        self.index_interval = index_interval
        self.buffer_bytes = buffer_bytes
        self.fd = os.open(self.prefix + ".log" + CLEANED,
                          os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size = 0
        self._pending = bytearray()
        self._index = bytearray()
        self._time_index = bytearray()
        self._txn_index = bytearray()
        self._since_index = 0
        self._last_indexed = -1
        self._max_ts = -1

    def write(self, batch: bytes | memoryview, header: records.BatchHeader) -> None:
        position = self.size
        if self._since_index > self.index_interval and header.last_offset > self._last_indexed:
            self._index += _INDEX_ENTRY.pack(header.last_offset - self.base, position)
            self._last_indexed = header.last_offset
            self._since_index = 0
        self._since_index += len(batch)
        if header.max_timestamp > self._max_ts:
            self._max_ts = header.max_timestamp
            self._time_index += _TIME_ENTRY.pack(header.max_timestamp, header.last_offset - self.base)
        self._pending += batch
        self.size += len(batch)
        if len(self._pending) >= self.buffer_bytes:
            self._flush()

    def add_aborted(self, txn: AbortedTxn) -> None:
        self._txn_index += txn.encode()

    def _flush(self) -> None:
        view = memoryview(self._pending)
        while view:
            view = view[os.write(self.fd, view):]
        self._pending = bytearray()

    def finish(self) -> None:
        """Write the indexes and fsync everything (the swap's precondition)."""
        self._flush()
        os.fsync(self.fd)
        os.close(self.fd)
        for suffix, data in ((".index", self._index), (".timeindex", self._time_index),
                             (".txnindex", self._txn_index)):
            if suffix == ".txnindex" and not data:
                continue
            fd = os.open(self.prefix + suffix + CLEANED,
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def abandon(self) -> None:
        os.close(self.fd)
        remove_cleaned(os.path.dirname(self.prefix), self.base)


class CleaningPass:
    """The worker side of one pass: ``build_map`` once, then ``clean_group``s in order."""

    def __init__(self, spec: PassSpec) -> None:
        self.spec = spec
        self.map = OffsetMap(spec.map_memory_bytes, spec.map_load_factor)
        self.map_end = spec.first_dirty
        self._sizes = dict(zip(spec.bases, spec.sizes, strict=True))
        self._txns = TxnTracker.of(spec.aborted)
        self._throttle = _Throttle(spec.io_max_bytes_per_second)

    # -- reading -------------------------------------------------------------

    def _batches(self, base: int, position: int = 0
                 ) -> Iterator[tuple[records.BatchHeader, bytes]]:
        """(header, buffer) of each batch of segment ``base`` from ``position``.

        Raises:
            CorruptLog: a batch with a bad length or CRC.
        """
        path = os.path.join(self.spec.directory, filename_prefix(base) + ".log")
        size = self._sizes[base]
        limit = self.spec.max_message_bytes + records.LOG_OVERHEAD + records.HEADER_SIZE
        fd = os.open(path, os.O_RDONLY)
        try:
            while position < size:
                chunk = os.pread(fd, min(self.spec.io_buffer_bytes, size - position), position)
                consumed = 0
                for header in records.iter_headers(chunk):
                    if not records.crc_ok(chunk, header):
                        raise CorruptLog(f"CRC mismatch at offset {header.base_offset} in {path}")
                    yield header, chunk
                    consumed = header.position + header.size
                if consumed == 0:
                    if len(chunk) < records.HEADER_SIZE:
                        raise CorruptLog(f"truncated batch at byte {position} of {path}")
                    _, length = records.peek_offset_and_length(chunk, 0)
                    need = records.LOG_OVERHEAD + length
                    if length < records.HEADER_SIZE - records.LOG_OVERHEAD or need > limit \
                            or position + need > size:
                        raise CorruptLog(f"bad batch length {length} at byte {position} of {path}")
                    chunk = os.pread(fd, need, position)
                    header = records.parse_header(chunk, 0)
                    if not records.crc_ok(chunk, header):
                        raise CorruptLog(f"CRC mismatch at offset {header.base_offset} in {path}")
                    yield header, chunk
                    consumed = need
                position += consumed
                self._throttle.account(consumed)
        finally:
            os.close(fd)

    def _start_position(self, base: int, offset: int) -> int:
        """A batch position at or before ``offset`` in segment ``base``, from its offset index."""
        path = os.path.join(self.spec.directory, filename_prefix(base) + ".index")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0
        entries = [(base + rel, pos) for rel, pos in
                   _INDEX_ENTRY.iter_unpack(data[:len(data) - len(data) % _INDEX_ENTRY.size])]
        i = bisect.bisect_right([o for o, _ in entries], offset) - 1
        if i < 0 or entries[i][1] >= self._sizes[base]:
            return 0
        return entries[i][1]

    # -- 1. the offset map ----------------------------------------------------

    def build_map(self) -> MapResult:
        spec = self.spec
        txns = TxnTracker.of(spec.aborted)
        read = 0
        full = False
        dirty = [b for b in spec.bases if b < spec.first_uncleanable]
        first = max(0, bisect.bisect_right(dirty, spec.first_dirty) - 1)
        for base in dirty[first:]:
            start = self._start_position(base, spec.first_dirty) if base <= spec.first_dirty else 0
            for header, buf in self._batches(base, start):
                if header.base_offset >= spec.first_uncleanable:
                    break
                read += header.size
                if header.is_control:
                    txns.on_marker(header, _marker_kind(buf, header))
                elif not txns.on_data(header) and header.last_offset >= spec.first_dirty:
                    if not self.map.room_for(header.records_count) and len(self.map):
                        full = True
                        break
                    self._map_batch(buf, header)
                if header.last_offset >= spec.first_dirty:
                    self.map_end = header.last_offset + 1
            if full:
                break
        return MapResult(self.map_end, len(self.map), len(self.map) / self.map.capacity, read)

    def _map_batch(self, buf: bytes, header: records.BatchHeader) -> None:
        try:
            body = records_body(buf, header)
            found = scan_records(body, header.records_count)
        except KafkaApiError as exc:
            raise CorruptLog(f"batch at offset {header.base_offset}: {exc.message}") from None
        for rec in found:
            offset = header.base_offset + rec.offset_delta
            if rec.key is not None and offset >= self.spec.first_dirty:
                self.map.put(rec.key, offset)

    # -- 2. cleaning ----------------------------------------------------------

    def clean_group(self, bases: list[int]) -> GroupResult:
        """Write the cleaned copy of segments ``bases`` (consecutive, in order)."""
        spec = self.spec
        result = GroupResult(bases[0], 0)
        out = _CleanedWriter(spec.directory, bases[0], spec.index_interval_bytes,
                             spec.io_buffer_bytes)
        try:
            for base in bases:
                for header, buf in self._batches(base):
                    result.bytes_read += header.size
                    kept = self._clean_batch(buf, header, out, result)
                    if kept is not None:
                        out.write(kept, header)
                        self._throttle.account(len(kept))
            out.finish()
        except BaseException:
            out.abandon()
            raise
        result.size = out.size
        result.bytes_written = out.size
        return result

    def _clean_batch(self, buf: bytes, header: records.BatchHeader, out: _CleanedWriter,
                     result: GroupResult) -> bytes | memoryview | None:
        """The bytes to write for one batch (None: drop it)."""
        whole = memoryview(buf)[header.position:header.position + header.size]
        now = self.spec.now_ms
        horizon = delete_horizon(header)
        if header.is_control:
            result.records_read += header.records_count
            may_go, indexed = self._txns.on_marker(header, _marker_kind(buf, header))
            if indexed is not None:
                out.add_aborted(indexed)
            if not may_go:
                result.records_kept += header.records_count
                return whole
            if horizon is not None and horizon <= now:
                return None
            result.records_kept += header.records_count
            if horizon is not None:
                return whole
            body = records_body(buf, header)
            return rebuild_batch(buf, header, body, scan_records(body, header.records_count),
                                 now + self.spec.delete_retention_ms)
        aborted = self._txns.on_data(header)
        result.records_read += header.records_count
        last_of_producer = (header.producer_id >= 0 and
                            self.spec.last_data_offsets.get(header.producer_id) == header.last_offset)
        if aborted:
            return rebuild_batch(buf, header, b"", []) if last_of_producer else None
        try:
            body = records_body(buf, header)
            found = scan_records(body, header.records_count)
        except KafkaApiError as exc:
            raise CorruptLog(f"batch at offset {header.base_offset}: {exc.message}") from None
        kept: list[RawRecord] = []
        stamp = False
        for rec in found:
            if rec.key is None:
                result.invalid_records += 1
                continue
            offset = header.base_offset + rec.offset_delta
            if offset < self.map.get(rec.key):
                continue
            if not rec.has_value and offset < self.map_end:
                if horizon is not None and horizon <= now:
                    continue
                stamp = stamp or horizon is None
            kept.append(rec)
        result.records_kept += len(kept)
        if not kept:
            return rebuild_batch(buf, header, b"", []) if last_of_producer else None
        if len(kept) == len(found) and not stamp:
            return whole
        return rebuild_batch(buf, header, body, kept,
                             now + self.spec.delete_retention_ms if stamp else None)
