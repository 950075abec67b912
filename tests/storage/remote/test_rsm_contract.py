"""The RemoteStorageManager contract (KIP-405), run against every built-in RSM.

The ``backend`` fixture is parametrised over the filesystem RSM, the S3 RSM
talking HTTP to a moto server process, the GCS RSM talking to a
gcp-storage-emulator process and the Azure RSM talking to Azurite.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import trio

from storage.remote.naming import INDEX_SUFFIXES, lacks_txn_index, uuid_str
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentId,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import SegmentFactory

SIZE = 10_000


def test_copy_then_fetch_whole_segment(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    manifest = backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert manifest is not None and len(manifest) <= 128  # Kafka's custom metadata limit
    assert backend.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    assert backend.rsm.fetch_log_segment(seg.metadata, 0, SIZE - 1) == seg.log


@pytest.mark.parametrize(("start", "end"), [
    (0, 0),  # first byte
    (10, 99),  # inside
    (100, None),  # to the end
    (SIZE - 1, None),  # last byte
    (SIZE - 1, SIZE - 1),
    (5000, SIZE + 1_000_000),  # end past the end is clipped
])
def test_ranged_fetch(backend: Backend, segments: SegmentFactory, start: int,
                      end: int | None) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    stop = SIZE if end is None else min(end, SIZE - 1) + 1
    assert backend.rsm.fetch_log_segment(seg.metadata, start, end) == seg.log[start:stop]


@pytest.mark.parametrize("start,end", [(0, None), (100, 5000), (SIZE - 1, None),
                                       (5000, SIZE + 1_000_000)])
def test_open_log_segment_streams_the_range(backend: Backend, segments: SegmentFactory,
                                            start: int, end: int | None) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    stop = SIZE if end is None else min(end, SIZE - 1) + 1
    stream = backend.rsm.open_log_segment(seg.metadata, start, end)
    got = bytearray()
    try:
        while piece := stream.read(1000):
            got += piece
    finally:
        stream.close()
    assert bytes(got) == seg.log[start:stop]


def test_bad_ranges(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(ValueError):
        backend.rsm.fetch_log_segment(seg.metadata, -1)
    with pytest.raises(ValueError):
        backend.rsm.fetch_log_segment(seg.metadata, 10, 9)
    with pytest.raises(RemoteStorageError, match="past the end"):
        backend.rsm.fetch_log_segment(seg.metadata, SIZE)


@pytest.mark.parametrize("index_type", list(IndexType))
def test_fetch_each_index(backend: Backend, segments: SegmentFactory,
                          index_type: IndexType) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert backend.rsm.fetch_index(seg.metadata, index_type) == seg.index(index_type)


@pytest.mark.parametrize("index_type", [IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT])
def test_absent_optional_index_is_not_found(backend: Backend, segments: SegmentFactory,
                                            index_type: IndexType) -> None:
    seg = segments.make(SIZE, transaction_index=False, producer_snapshot=False)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_index(seg.metadata, index_type)
    assert backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET) == seg.index(IndexType.OFFSET)


@pytest.mark.parametrize("with_txn_index", [True, False])
def test_the_manifest_says_whether_a_transaction_index_was_copied(
        backend: Backend, segments: SegmentFactory, with_txn_index: bool) -> None:
    seg = segments.make(SIZE, transaction_index=with_txn_index)
    manifest = backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    recorded = dataclasses.replace(seg.metadata, custom_metadata=manifest)
    assert lacks_txn_index(recorded) is not with_txn_index
    # Without a manifest (older copies, rebuilt metadata), or one not
    # understood, nothing is assumed: the index is asked for.
    for unknown in (None, b"", b"\x00garbage", b"{not json", b'{"v": 99, "txn": false}'):
        assert not lacks_txn_index(dataclasses.replace(seg.metadata, custom_metadata=unknown))


def test_fetch_of_segment_never_copied_is_not_found(backend: Backend,
                                                     segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_log_segment(seg.metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET)


def test_delete_is_idempotent_and_fetch_after_delete_is_not_found(
        backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert len(backend.stored(seg.metadata)) == len(seg.contents)
    backend.rsm.delete_log_segment_data(seg.metadata)
    backend.rsm.delete_log_segment_data(seg.metadata)
    assert backend.stored(seg.metadata) == []
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_log_segment(seg.metadata, 0)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            backend.rsm.fetch_index(seg.metadata, index_type)


def test_delete_of_segment_never_copied_succeeds(backend: Backend,
                                                  segments: SegmentFactory) -> None:
    backend.rsm.delete_log_segment_data(segments.make(SIZE).metadata)


def test_copy_is_idempotent(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert backend.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    assert len(backend.stored(seg.metadata)) == len(seg.contents)


def test_copy_again_overwrites(backend: Backend, segments: SegmentFactory) -> None:
    first = segments.make(SIZE)
    second = segments.make(SIZE)  # other bytes, same size
    backend.rsm.copy_log_segment_data(first.metadata, first.data)
    backend.rsm.copy_log_segment_data(first.metadata, second.data)
    assert backend.rsm.fetch_log_segment(first.metadata, 0) == second.log
    assert backend.rsm.fetch_index(first.metadata, IndexType.OFFSET) == \
        second.index(IndexType.OFFSET)


def test_failed_copy_leaves_nothing(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    # The snapshot goes up after the log and two indexes: it fails midway.
    broken = dataclasses.replace(seg.data, producer_snapshot_index="/nonexistent/x.snapshot")
    with pytest.raises(RemoteStorageError) as info:
        backend.rsm.copy_log_segment_data(seg.metadata, broken)
    assert not info.value.retriable
    assert backend.stored(seg.metadata) == []


def test_failed_retry_of_copy_leaves_nothing(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    broken = dataclasses.replace(seg.data, time_index="/nonexistent/x.timeindex")
    with pytest.raises(RemoteStorageError):
        backend.rsm.copy_log_segment_data(seg.metadata, broken)
    assert backend.stored(seg.metadata) == []


def test_copy_refuses_log_of_other_size_than_metadata(backend: Backend,
                                                       segments: SegmentFactory) -> None:
    seg = segments.make(SIZE)
    wrong = dataclasses.replace(seg.metadata, segment_size_in_bytes=SIZE + 1)
    with pytest.raises(RemoteStorageError, match="says"):
        backend.rsm.copy_log_segment_data(wrong, seg.data)
    assert backend.stored(wrong) == []


@pytest.mark.parametrize("stored_size", [SIZE // 2, SIZE + 7, 0])
def test_stored_log_of_wrong_size_is_an_error_not_data(backend: Backend, segments: SegmentFactory,
                                                        stored_size: int) -> None:
    seg = segments.make(SIZE)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    backend.overwrite(seg.metadata, "log", (seg.log * 2)[:stored_size])
    for start, end in [(0, None), (0, 99), (SIZE // 2 - 10, SIZE // 2 + 10)]:
        with pytest.raises(RemoteStorageError) as info:
            backend.rsm.fetch_log_segment(seg.metadata, start, end)
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        with pytest.raises(RemoteStorageError) as info:
            backend.rsm.open_log_segment(seg.metadata, start, end).close()
        assert not isinstance(info.value, RemoteResourceNotFoundError)


def test_segments_are_isolated(backend: Backend, segments: SegmentFactory) -> None:
    """Same start offset in another topic id / partition, and a neighbour
    segment: deleting one leaves the others intact."""
    tip = segments.tip
    same_name_new_id = TopicIdPartition(uuid.uuid4(), tip.topic, 0)  # topic re-created
    a = segments.make(SIZE, start_offset=0)
    b = segments.make(SIZE, start_offset=100)
    c = segments.make(SIZE, start_offset=0, tip=same_name_new_id)
    d = segments.make(SIZE, start_offset=0, tip=TopicIdPartition(tip.topic_id, tip.topic, 1))
    for seg in (a, b, c, d):
        backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    backend.rsm.delete_log_segment_data(a.metadata)
    for seg in (b, c, d):
        assert backend.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    # A new copy attempt of the same offsets gets a new uuid: its own objects.
    retry = dataclasses.replace(b.metadata, remote_log_segment_id=RemoteLogSegmentId.generate(tip))
    backend.rsm.copy_log_segment_data(retry, b.data)
    backend.rsm.delete_log_segment_data(b.metadata)
    assert backend.rsm.fetch_log_segment(retry, 0) == b.log


async def test_concurrent_calls_from_worker_threads(backend: Backend,
                                                    segments: SegmentFactory) -> None:
    """The documented way to call an RSM: trio.to_thread behind a limiter."""
    segs = [segments.make(SIZE, start_offset=100 * i) for i in range(8)]
    limiter = trio.CapacityLimiter(4)
    results: dict[int, bytes] = {}

    async def cycle(i: int) -> None:
        seg = segs[i]
        await trio.to_thread.run_sync(backend.rsm.copy_log_segment_data, seg.metadata, seg.data,
                                      limiter=limiter)
        results[i] = await trio.to_thread.run_sync(backend.rsm.fetch_log_segment, seg.metadata,
                                                   i, None, limiter=limiter)
        if i % 2:
            await trio.to_thread.run_sync(backend.rsm.delete_log_segment_data, seg.metadata,
                                          limiter=limiter)

    async with trio.open_nursery() as nursery:
        for i in range(len(segs)):
            nursery.start_soon(cycle, i)
    for i, seg in enumerate(segs):
        assert results[i] == seg.log[i:]
        assert (backend.stored(seg.metadata) == []) == bool(i % 2)


def test_stored_names_follow_the_layout(backend: Backend, segments: SegmentFactory) -> None:
    seg = segments.make(SIZE, start_offset=1234)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    names = [name.rsplit("/", 1)[-1] for name in backend.stored(seg.metadata)]
    stem = f"{1234:020d}-{uuid_str(seg.metadata.remote_log_segment_id.id)}"
    assert sorted(names) == sorted(f"{stem}.{s}" for s in ["log", *INDEX_SUFFIXES.values(),
                                                          "indexes"])
