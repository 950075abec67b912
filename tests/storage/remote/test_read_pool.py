"""The reader pool over a real Log, the filesystem RSM and the topic-based RLMM
(``test_remote_log_manager.Setup``): reads start at the batch holding the
offset, sequential reads need no index, failures become result values, the
queue bound fails fast. De-duplication and parking are the remote-fetch
purgatory's (tests/replication/test_purgatory.py).
"""

from __future__ import annotations

import os

import pytest
import trio

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.remote.read_pool import ReadKey
from storage.remote.reader import NextPositions
from storage.remote.types import IndexType
from tests.storage.remote.test_remote_log_manager import Completion, Setup, offsets_of, read


async def test_read_inside_a_segment_starts_at_the_batch_holding_the_offset(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    for offset in range(0, s.log.highest_tiered_offset + 1):
        async with trio.open_nursery() as nursery:
            await nursery.start(s.reads.run)
            data = await read(s, offset, 1)
            nursery.cancel_scope.cancel()
        assert offsets_of(data)[0] == offset  # one record per batch here


class IndexFetches:
    """The real storage manager, counting ``fetch_index`` calls by type."""

    def __init__(self, rsm) -> None:
        self.rsm = rsm
        self.calls: list[IndexType] = []

    def fetch_log_segment(self, md, start, end=None):
        return self.rsm.fetch_log_segment(md, start, end)

    def fetch_index(self, md, index_type):
        self.calls.append(index_type)
        return self.rsm.fetch_index(md, index_type)


async def test_a_sequential_remote_read_needs_no_offset_index(tmp_path):
    # Several batches per segment, read one batch at a time from offset 0:
    # each read starts where the last ended (or at a segment's first offset).
    s = Setup(tmp_path, **{"segment.bytes": "3000"})
    s.produce(40)
    await s.start()
    await s.cycle()
    s.log.apply_retention(s.log.end_offset)
    counting = IndexFetches(s.svc.chunks.rsm)
    s.svc.chunks.rsm = counting
    end = s.log.local_log_start_offset
    assert len(s.log.segments) == 1 and end > 10
    got: list[int] = []
    offset = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        while offset < end:
            data = await read(s, offset, 1)
            got += offsets_of(data)
            offset = got[-1] + 1
        assert got == list(range(end))
        assert counting.calls == []
        # A jump into the middle of a segment (no read ended there; the
        # positions are forgotten) uses its offset index once.
        s.reads._positions = NextPositions()
        await read(s, 5, 1)
        nursery.cancel_scope.cancel()
    assert counting.calls.count(IndexType.OFFSET) == 1


async def test_corrupt_and_missing_remote_objects_are_errors_not_records(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    first, second = sorted((m for m in s.rlmm.list_remote_log_segments(s.tip)),
                           key=lambda m: m.start_offset)[:2]
    path = s.rsm.object_path(first, "log")
    data = bytearray(open(path, "rb").read())
    data[records.HEADER_SIZE + 5] ^= 0xFF  # flip a record byte: the CRC no longer matches
    open(path, "wb").write(data)
    os.unlink(s.rsm.object_path(second, "log"))
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        with pytest.raises(KafkaApiError) as corrupt:
            await read(s, first.start_offset, 10_000)
        with pytest.raises(KafkaApiError) as missing:
            await read(s, second.start_offset, 10_000)
        nursery.cancel_scope.cancel()
    assert corrupt.value.code == ErrorCode.CORRUPT_MESSAGE
    assert missing.value.code == ErrorCode.KAFKA_STORAGE_ERROR



async def test_reader_queue_bound_fails_fast(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    s.svc.reader_max_pending = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        with pytest.raises(KafkaApiError) as exc:
            await read(s, 0, 1000)
        nursery.cancel_scope.cancel()
    assert exc.value.code == ErrorCode.KAFKA_STORAGE_ERROR


class CrashingReads:
    """A storage manager whose reads fail with one of our own bugs."""

    def fetch_log_segment(self, md, start, end=None):
        raise ValueError("a bug")

    def fetch_index(self, md, index_type):
        raise ValueError("a bug")


async def test_a_crashing_read_completes_with_an_error_value(tmp_path):
    # Our own bug in a read still completes its waiter (with
    # UNKNOWN_SERVER_ERROR), and the read leaves the pending count.
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    s.svc.chunks = None
    s.svc.rsm = CrashingReads()
    first = s.rlmm.list_remote_log_segments(s.tip)[0].start_offset
    done = Completion()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        p = await s.reads.partition(("t", 0))
        assert s.reads.start(p, ReadKey(("t", 0), first, 10_000, True), done)
        assert s.reads.in_flight == 1
        await done.done.wait()
        nursery.cancel_scope.cancel()
    assert done.result is not None and done.result.error is not None
    assert done.result.error.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert s.reads.in_flight == 0
    assert s.svc.metrics.fetch_errors.labels("t")._value.get() == 1


async def test_a_read_of_an_offset_no_segment_holds_is_refused(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        with pytest.raises(KafkaApiError) as exc:
            await read(s, s.log.end_offset + 100, 1000)
        nursery.cancel_scope.cancel()
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert s.reads.in_flight == 0
