"""RemoteLogManager over a real Log, the filesystem RSM and the topic-based RLMM
(the reader pool's own tests, ``test_read_pool.py``, share this setup).

The metadata topic is the in-memory MetadataLog of the RLMM unit tests (the
broker's own adapter is exercised by the system tests); everything else is
real: segment files, remote files, index cache on disk, worker threads.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry

from config import BrokerConfig, TopicConfigs
from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.log import Log
from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.lineage import in_lineage
from storage.remote.manager import RemoteLogManager, build_services
from storage.remote.read_pool import ReadKey, RemoteReadPool, RemoteReadResult
from storage.remote.rlmm import TopicBasedRemoteLogMetadataManager
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    TopicIdPartition,
)
from tests.storage.remote.test_rlmm import InMemoryMetadataLog

T0 = 1_700_000_000_000
VALUE = b"v" * 150


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def broker_config(**extra: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({"remote.log.storage.system.enable": "true", **extra})


def log_config(broker: BrokerConfig, **overrides: str):
    return TopicConfigs(broker, {"remote.storage.enable": "true", "segment.bytes": "600",
                                 "local.retention.bytes": "1", **overrides}).log_config()


class Setup:
    def __init__(self, tmp_path: Path, **topic: str) -> None:
        self.clock = Clock()
        self.broker = broker_config()
        self.log = Log.open(str(tmp_path / "t-0"), "t", 0, log_config(self.broker, **topic),
                            self.clock)
        self.remote_root = tmp_path / "remote"
        self.rsm = FileSystemRemoteStorageManager({"dir": str(self.remote_root)})
        self.rlmm_log = InMemoryMetadataLog()
        self.rlmm = TopicBasedRemoteLogMetadataManager(self.rlmm_log, str(tmp_path),
                                                       num_partitions=3)
        self.svc = build_services(self.broker, str(tmp_path), self.rsm, self.rlmm,
                                  CollectorRegistry(), self.clock)
        self.rlm = RemoteLogManager(self.broker, self.svc)
        self.reads = RemoteReadPool(self.svc, self.rlm)
        self.tip = TopicIdPartition(uuid.uuid4(), "t", 0)

    def produce(self, count: int, epoch: int = 0, ts_step: int = 1) -> None:
        for _ in range(count):
            ts = self.clock.now
            self.log.append_as_leader(bytearray(records.build_batch([(None, VALUE)], timestamp=ts)),
                                      epoch)
            self.clock.now += ts_step

    async def start(self) -> None:
        await self.rlmm.start()
        self.p = self.rlm.start_partition(self.tip, self.log, lambda: self.log.end_offset)

    async def cycle(self) -> None:
        await self.rlm._cycle(self.p)


def offsets_of(data: bytes) -> list[int]:
    return [o for h in records.iter_headers(data) for o in range(h.base_offset, h.last_offset + 1)]


class Completion:
    """Stands in for the remote-fetch purgatory's entry: keeps the result."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: RemoteReadResult | None = None

    def complete(self, result: RemoteReadResult) -> None:
        assert self.result is None, "completed twice"
        self.result = result
        self.done.set()


async def read(s: Setup, offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes:
    """One remote read of partition t-0 through the reader pool (running in
    the caller's nursery); an error result is raised."""
    p = await s.reads.partition(("t", 0))
    done = Completion()
    assert s.reads.start(p, ReadKey(("t", 0), offset, max_bytes, min_one_batch), done)
    await done.done.wait()
    assert done.result is not None
    if done.result.error is not None:
        raise done.result.error
    return done.result.records


async def read_all_remote(s: Setup, start: int, end: int) -> list[int]:
    got: list[int] = []
    offset = start
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        while offset < end:
            data = await read(s, offset, 10_000)
            assert data, f"no data at {offset}"
            for h in records.iter_headers(data):
                assert records.crc_ok(data, h)
            batch_offsets = [o for o in offsets_of(data) if o >= offset]
            got += batch_offsets
            offset = batch_offsets[-1] + 1
        nursery.cancel_scope.cancel()
    return got


async def test_copies_closed_segments_and_serves_them_after_local_deletion(tmp_path):
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    closed = s.log.segments[:-1]
    assert closed, "segment.bytes=600 must have rolled"
    assert s.log.highest_tiered_offset == closed[-1].last_offset
    finished = [m for m in s.rlmm.list_remote_log_segments(s.tip)
                if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    assert [(m.start_offset, m.end_offset) for m in finished] == [
        (seg.base_offset, seg.last_offset) for seg in closed]
    assert s.log.apply_retention(s.log.end_offset) == len(closed)
    assert len(s.log.segments) == 1 and s.log.log_start_offset == 0
    with pytest.raises(KafkaApiError) as exc:
        s.log.read(0, 1000)
    assert exc.value.code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert await read_all_remote(s, 0, s.log.local_log_start_offset) == list(
        range(s.log.local_log_start_offset))


class FailingCopies(FileSystemRemoteStorageManager):
    fail = True

    def copy_log_segment_data(self, metadata, data):  # type: ignore[no-untyped-def]
        if self.fail:
            os.makedirs(self.partition_dir(metadata.topic_id_partition), exist_ok=True)
            open(self.object_path(metadata, "log"), "wb").write(b"partial")
            raise RemoteStorageError("injected", retriable=True)
        return super().copy_log_segment_data(metadata, data)


async def test_failed_copy_leaves_no_finished_metadata_keeps_local_and_retries(tmp_path):
    s = Setup(tmp_path)
    s.rsm = s.svc.rsm = FailingCopies({"dir": str(s.remote_root)})
    s.produce(20)
    await s.start()
    await s.cycle()
    assert s.log.highest_tiered_offset == -1
    states = {m.state for m in s.rlmm.list_remote_log_segments(s.tip)}
    assert RemoteLogSegmentState.COPY_SEGMENT_FINISHED not in states
    assert not any(f for _, _, f in os.walk(s.remote_root) if f), "partial objects remain"
    assert s.log.apply_retention(s.log.end_offset) == 0, "untiered local data was deleted"
    assert s.p.copy_backoff.failures == 1 and s.p.copy_backoff.next_attempt_ms > s.clock.now
    s.rsm.fail = False
    s.clock.now = s.p.copy_backoff.next_attempt_ms
    await s.cycle()
    assert s.log.highest_tiered_offset == s.log.segments[-2].last_offset


class GatedCopies(FileSystemRemoteStorageManager):
    """Copies wait at a gate: an upload still running when leadership moves."""

    def __init__(self, config: dict[str, str]) -> None:
        super().__init__(config)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def copy_log_segment_data(self, metadata, data):  # type: ignore[no-untyped-def]
        self.entered.set()
        assert self.gate.wait(10)
        return super().copy_log_segment_data(metadata, data)


async def test_a_copy_finished_after_leadership_moved_leaves_no_objects(tmp_path):
    """The new leader's expirer removes this attempt's metadata after a grace
    period; an upload slower than that must not leave its objects behind."""
    s = Setup(tmp_path)
    gated = GatedCopies({"dir": str(s.remote_root)})
    s.rsm = s.svc.rsm = gated
    s.produce(20)
    await s.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(s.cycle)
        await trio.to_thread.run_sync(gated.entered.wait, 10)
        s.rlm.stop_partition(("t", 0))  # deposed while the upload runs
        gated.gate.set()
    assert s.log.highest_tiered_offset == -1
    states = [m.state for m in s.rlmm.list_remote_log_segments(s.tip)]
    assert states == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]  # the new leader's to delete
    assert not any(f for _, _, f in os.walk(s.remote_root) if f), "the upload's objects remain"


async def test_retention_bytes_deletes_oldest_remote_segments_and_moves_log_start(tmp_path):
    s = Setup(tmp_path, **{"retention.bytes": "1500"})
    s.produce(30)
    await s.start()
    await s.cycle()  # copies, and expiration runs in the same cycle
    await s.cycle()
    remaining = [m for m in s.rlmm.list_remote_log_segments(s.tip)]
    local_untiered = sum(seg.size for seg in s.log.segments
                         if seg.last_offset > s.log.highest_tiered_offset)
    assert sum(m.segment_size_in_bytes for m in remaining) + local_untiered <= 1500 + max(
        m.segment_size_in_bytes for m in remaining)
    assert s.log.log_start_offset == min(m.start_offset for m in remaining) > 0
    with pytest.raises(KafkaApiError) as exc:
        s.log.read(0, 100)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_retention_ms_expires_by_newest_record_time(tmp_path):
    s = Setup(tmp_path, **{"retention.ms": "60000", "local.retention.ms": "1000",
                           "local.retention.bytes": "-2"})
    s.produce(20, ts_step=10_000)
    await s.start()
    await s.cycle()
    s.clock.now = T0 + 20 * 10_000 + 60_001 - 10 * 10_000  # the first ~half has expired
    await s.cycle()
    left = sorted(m.start_offset for m in s.rlmm.list_remote_log_segments(s.tip))
    assert left and left[0] > 0
    assert s.log.log_start_offset == left[0]


def _md(epochs: dict[int, int], start: int, end: int) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), start, end, T0, 0, T0,
                                    epochs, 100, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def test_lineage_accepts_segments_of_the_leader_history():
    cache = [(0, 0), (2, 100), (5, 200)]
    assert in_lineage(_md({0: 0}, 0, 99), cache, 300)
    assert in_lineage(_md({0: 50, 2: 100}, 50, 150), cache, 300)
    assert in_lineage(_md({5: 200}, 200, 299), cache, 300)


def test_lineage_rejects_orphans_of_an_unclean_election():
    cache = [(0, 0), (2, 100), (5, 200)]
    # Epoch 1 never made it into this log's history (the deep-dive's b33f case).
    assert not in_lineage(_md({1: 80}, 80, 120), cache, 300)
    # Epoch 0 data past where epoch 0 ended here: written by a diverged leader.
    assert not in_lineage(_md({0: 90}, 90, 120), cache, 300)
    # Epoch 2 copied beyond where epoch 5 began.
    assert not in_lineage(_md({2: 150}, 150, 250), cache, 300)


async def test_the_metadata_partition_owner_removes_a_deleted_topic_once(tmp_path):
    from storage.remote.metadata_cache import (
        RemotePartitionDeleteMetadata,
        RemotePartitionDeleteState,
    )
    from storage.remote.rlmm_serde import deserialize

    P = RemotePartitionDeleteState
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    assert s.rlmm.list_remote_log_segments(s.tip)
    # The topic is deleted: its replica stops, the controller marks the partition.
    s.rlm.stop_partition(("t", 0))
    s.rlmm.on_stop_partitions([s.tip])
    await s.rlmm.mark_partition_deleted(
        RemotePartitionDeleteMetadata(s.tip, P.DELETE_PARTITION_MARKED, 1, 9))
    deleted: set[TopicIdPartition] = set()
    s.rlm.topic_deleted = lambda tip: tip in deleted
    s.rlmm.on_metadata_partition_leadership(s.rlmm.partition_for(s.tip), True)
    assert await s.rlmm.catch_up_pending()
    await s.rlm._run_removals()  # the topic is not gone from the metadata yet: nothing
    assert s.rlmm.partition_delete_state(s.tip) == P.DELETE_PARTITION_MARKED
    deleted.add(s.tip)
    await s.rlm._run_removals()
    assert s.rlmm.partition_delete_state(s.tip) is None  # FINISHED
    assert not any(f.is_file() for f in s.remote_root.rglob("*"))
    topic = s.rlmm_log.partitions[s.rlmm.partition_for(s.tip)]
    assert [e.state for e in map(deserialize, topic)
            if isinstance(e, RemotePartitionDeleteMetadata)] == [
        P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED]
    written = len(topic)
    await s.rlm._run_removals()  # finished: nothing adopted, nothing written
    assert len(topic) == written
