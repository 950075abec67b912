"""Lookups in the remote tier that are not record reads: aborted
transactions for read_committed fetches, and ListOffsets by timestamp.

Theory of operation
-------------------
Both walk a partition's finished remote segments that lie in its own
leader-epoch lineage (``lineage.in_lineage``) in offset order, in the
metadata manager's cache, and read one small object per segment at most (a
transaction index, a time index) through the reader pool's limiter, so they
share its bound with record reads. Parsed transaction indexes are kept in a
small LRU: entries are rare, and a read_committed consumer asks for the same
segment's list once per fetch.

Concurrency: every method runs on the event loop; storage calls run in worker
threads under ``svc.reader_limiter``.

Error handling: a tier that cannot be read answers KAFKA_STORAGE_ERROR (a
``KafkaApiError`` the handler turns into the partition's error code); records
are never served without their abort list.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

import trio

from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from storage.log.log import Log
from storage.log.txn_index import AbortedTxn, CorruptTxnIndex, collect_overlapping, decode_entries
from storage.remote import reader
from storage.remote.lineage import in_lineage
from storage.remote.naming import lacks_txn_index
from storage.remote.partition_state import RemoteServices, TieredPartitions
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)

# Remote segments whose parsed transaction index is kept in memory (entries
# are 34 bytes and rare; this bounds a pathological topic).
_TXN_INDEX_CACHE_SEGMENTS = 1024


class RemoteLookups:
    def __init__(self, services: RemoteServices, partitions: TieredPartitions) -> None:
        self.svc = services
        self.partitions = partitions
        self._txn_entries: OrderedDict[uuid.UUID, list[AbortedTxn]] = OrderedDict()

    async def collect_aborted(self, tp: TopicPartition, start: int,
                              upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper) for a read_committed
        fetch served from the remote tier (Kafka's collectAbortedTransactions).

        Remote segments' transaction indexes are searched from the one holding
        ``start`` until an entry's last stable offset shows nothing later can
        start below ``upper``; then the local segments.

        Raises:
            KafkaApiError: KAFKA_STORAGE_ERROR if an index cannot be read (the
                records must not be served without their abort list).
        """
        if not self.partitions.tiered_here(tp):
            return []
        p = await self.partitions.readable(tp)
        finished = sorted((m for m in self.svc.rlmm.list_remote_log_segments(p.tip)
                           if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                           and m.end_offset >= start), key=lambda m: m.start_offset)
        entries, end = p.log.epochs.entries, p.log.end_offset
        out: list[AbortedTxn] = []
        for md in finished:
            # Called for every read_committed fetch: a segment with no
            # transaction index (most) is passed over before any lineage check.
            if lacks_txn_index(md) or not in_lineage(md, entries, end):
                continue
            found, complete = collect_overlapping(await self._aborted_entries(md), start, upper)
            out += found
            if complete:
                return out
        # Then the local segments; a tiered segment still kept locally gives
        # the same entries again, which are left out.
        local_from = max(start, p.log.local_log_start_offset)
        return out + [t for t in p.log.collect_aborted(local_from, upper) if t not in out]

    def _lineage(self, tip: TopicIdPartition, lg: Log) -> list[RemoteLogSegmentMetadata]:
        """The finished remote segments that hold ``lg``'s own data: a copy
        left by a leader whose log diverged (an unclean election) is not."""
        entries, end = lg.epochs.entries, lg.end_offset
        return [m for m in self.svc.rlmm.list_remote_log_segments(tip)
                if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                and in_lineage(m, entries, end)]

    async def _aborted_entries(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        key = md.remote_log_segment_id.id
        cached = self._txn_entries.get(key)
        if cached is not None:
            self._txn_entries.move_to_end(key)
            return cached
        if lacks_txn_index(md):
            return []  # its manifest says so: no GET (most segments)
        try:
            data = await trio.to_thread.run_sync(self.svc.rsm.fetch_index, md,
                                                 IndexType.TRANSACTION,
                                                 limiter=self.svc.reader_limiter)
            entries = decode_entries(data)
        except RemoteResourceNotFoundError:
            entries = []  # the segment had no aborted transactions
        except (RemoteStorageError, CorruptTxnIndex) as exc:
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                                f"transaction index of {md.remote_log_segment_id}: {exc}") from None
        self._txn_entries[key] = entries
        while len(self._txn_entries) > _TXN_INDEX_CACHE_SEGMENTS:
            self._txn_entries.popitem(last=False)
        return entries

    def remote_max_timestamp(self, tp: TopicPartition) -> int | None:
        """Largest record timestamp in the readable remote segments of a
        partition this broker leads; None if there are none (or it is not ready)."""
        p = self.partitions.leader(tp)
        if p is None or not p.ready:
            return None
        stamps = [m.max_timestamp_ms for m in self._lineage(p.tip, p.log)
                  if m.end_offset >= p.log.log_start_offset]
        return max(stamps) if stamps else None

    async def offset_for_timestamp(self, tp: TopicPartition,
                                   timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first remote record >= ``timestamp`` of a
        partition this broker leads, or None.

        Raises:
            KafkaApiError: KAFKA_STORAGE_ERROR if the remote tier cannot be read.
        """
        if self.partitions.leader(tp) is None:
            return None
        p = await self.partitions.readable(tp)
        finished = sorted((m for m in self._lineage(p.tip, p.log)
                           if m.end_offset >= p.log.log_start_offset
                           and m.max_timestamp_ms >= timestamp),
                          key=lambda m: m.start_offset)
        for md in finished:
            try:
                found = await trio.to_thread.run_sync(
                    reader.offset_for_timestamp_blocking, self.svc.chunks or self.svc.rsm,
                    self.svc.index_cache, md,
                    timestamp, p.log.log_start_offset, limiter=self.svc.reader_limiter)
            except RemoteStorageError as exc:
                raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
            if found is not None:
                return found
        return None
