"""RemoteLogManager when tiering is turned off and on (KIP-950).

- remote.log.copy.disable=true: the local log is bounded by the total
  retention and the expirer keeps the remote tier consistent with it.
- remote.storage.enable=false with remote.log.delete.on.disable=true: the
  remote data is deleted under KIP-405's partition delete markers, so the
  delete is resumed after a restart; re-enabling tiering while it is pending
  waits for it, and never loses a segment copied after the re-enable.

Same setup as test_remote_log_manager.py: a real Log, the filesystem RSM
(here with deletes that fail on demand) and the topic-based RLMM over an
in-memory metadata topic.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from prometheus_client import CollectorRegistry

from protocol import records
from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.manager import RemoteLogManager, build_services
from storage.remote.metadata_cache import RemotePartitionDeleteMetadata
from storage.remote.metadata_cache import RemotePartitionDeleteState as P
from storage.remote.read_pool import RemoteReadPool
from storage.remote.rlmm import TopicBasedRemoteLogMetadataManager
from storage.remote.rlmm_serde import deserialize
from storage.remote.types import RemoteLogSegmentState, RemoteStorageError
from tests.storage.remote.test_remote_log_manager import Setup, read_all_remote


class FailingDeletes(FileSystemRemoteStorageManager):
    """The filesystem RSM whose deletes fail while ``fail`` is set."""

    fail = False

    def delete_log_segment_data(self, metadata):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RemoteStorageError("injected delete failure", retriable=True)
        super().delete_log_segment_data(metadata)


def failing_deletes(tmp_path: Path, **topic: str) -> Setup:
    s = Setup(tmp_path, **topic)
    s.rsm = s.svc.rsm = FailingDeletes({"dir": str(s.remote_root)})
    return s


def set_config(s: Setup, **changes: object) -> None:
    s.log.config = dataclasses.replace(s.log.config, **changes)


def finished(s: Setup) -> list[tuple[int, int]]:
    return sorted((m.start_offset, m.end_offset) for m in s.rlmm.list_remote_log_segments(s.tip)
                  if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def listed(s: Setup) -> list[tuple[int, int]]:
    """Every remote segment not yet deleted, whatever its state."""
    return sorted((m.start_offset, m.end_offset) for m in s.rlmm.list_remote_log_segments(s.tip))


def partition_delete_events(s: Setup) -> list[P]:
    events = [deserialize(r) for part in s.rlmm._log.partitions for r in part]
    return [e.state for e in events
            if isinstance(e, RemotePartitionDeleteMetadata) and e.topic_id_partition == s.tip]


async def tier_everything(s: Setup) -> None:
    """Copy every closed segment, then let local retention drop the tiered ones."""
    await s.cycle()
    s.log.apply_retention(s.log.end_offset)


async def check_every_offset_readable(s: Setup) -> None:
    """From the log start to the end: below the local start from the tier, the rest locally."""
    lg = s.log
    local_start = lg.local_log_start_offset
    remote = await read_all_remote(s, lg.log_start_offset, local_start)
    assert remote == list(range(lg.log_start_offset, local_start))
    offset = local_start
    while offset < lg.end_offset:
        data = lg.read(offset, 1 << 20).data
        assert data, f"nothing local at {offset}"
        offset = max(h.last_offset for h in records.iter_headers(data)) + 1


# -- remote.log.copy.disable=true ------------------------------------------------------


async def test_copy_disabled_local_retention_and_remote_expiry_keep_one_contiguous_log(tmp_path):
    s = Setup(tmp_path, **{"retention.bytes": "3000"})
    s.produce(12)
    await s.start()
    await tier_everything(s)
    tiered = finished(s)
    assert tiered and s.log.log_start_offset == 0
    set_config(s, remote_copy_disable=True)
    s.produce(40)
    await s.cycle()
    assert set(listed(s)) <= set(tiered), "nothing may be copied while copying is disabled"
    s.log.apply_retention(s.log.end_offset)
    assert s.log.size < 3000 + s.log.segments[0].size, "local log not bounded by retention.bytes"
    # Local-only data went, so the log starts locally; the older remote
    # segments are below it and the expirer deletes them.
    assert s.log.log_start_offset == s.log.local_log_start_offset > tiered[-1][1]
    await s.cycle()
    assert finished(s) == [] and s.rlmm.list_remote_log_segments(s.tip) == []
    await check_every_offset_readable(s)


async def test_copy_disabled_size_retention_counts_local_copies_of_tiered_data_once(tmp_path):
    # Tiered segments still on local disk (local.retention.bytes=-2: as large
    # as retention.bytes) are the same bytes as their remote copies.
    s = Setup(tmp_path, **{"retention.bytes": "100000", "local.retention.bytes": "-2"})
    s.produce(12)
    await s.start()
    await s.cycle()
    tiered = finished(s)
    remote_bytes = sum(m.segment_size_in_bytes for m in s.rlmm.list_remote_log_segments(s.tip))
    set_config(s, remote_copy_disable=True)
    s.produce(10)
    # The whole log (each offset counted once) fits the retention exactly,
    # the local and remote copies together do not.
    unique = s.log.size
    assert unique + remote_bytes > unique
    set_config(s, retention_bytes=unique)
    await s.cycle()
    assert s.log.apply_retention(s.log.end_offset) == 0
    assert finished(s) == tiered, "remote segments deleted for bytes counted twice"
    assert s.log.log_start_offset == 0


# -- remote.storage.enable=false with remote.log.delete.on.disable=true ----------------


def disable(s: Setup) -> None:
    set_config(s, remote_storage_enable=False, remote_delete_on_disable=True)
    s.rlm.disable_partition(s.tip, s.log)


def enable(s: Setup) -> None:
    set_config(s, remote_storage_enable=True, remote_delete_on_disable=False)
    s.p = s.rlm.start_partition(s.tip, s.log, lambda: s.log.end_offset)


async def test_reenable_while_a_disable_delete_is_pending_never_loses_new_copies(tmp_path):
    s = failing_deletes(tmp_path)
    s.produce(12)
    await s.start()
    await tier_everything(s)
    old = finished(s)
    assert old
    s.rsm.fail = True
    disable(s)
    await s.rlm._run_removals()  # the delete fails; it stays pending
    assert listed(s) == old
    assert s.log.log_start_offset == s.log.local_log_start_offset

    enable(s)  # while the old segments are still waiting to be deleted
    s.produce(12)
    for _ in range(3):
        await tier_everything(s)
        await s.rlm._run_removals()
    # Whatever was copied after the re-enable is still there...
    await check_every_offset_readable(s)

    s.rsm.fail = False  # the store recovers: the pending delete completes
    for _ in range(3):
        await s.rlm._run_removals()
        await tier_everything(s)
    # ... and still is once the old segments are gone.
    await check_every_offset_readable(s)
    assert not set(old) & set(finished(s)), "the segments of before the disable remain"
    assert finished(s), "nothing tiered after the re-enable"
    assert partition_delete_events(s) == [P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED,
                                          P.DELETE_PARTITION_FINISHED]


async def restart(s: Setup, tmp_path: Path) -> None:
    """A new metadata manager and remote log manager over the same metadata
    topic and remote store (what a broker restart keeps)."""
    metadata_log = s.rlmm._log
    s.rlmm = TopicBasedRemoteLogMetadataManager(metadata_log, str(tmp_path / "restarted"),
                                                num_partitions=3)
    s.svc = build_services(s.broker, str(tmp_path / "restarted"), s.rsm, s.rlmm,
                           CollectorRegistry(), s.clock)
    s.rlm = RemoteLogManager(s.broker, s.svc)
    s.reads = RemoteReadPool(s.svc, s.rlm)
    await s.rlmm.start()


async def test_pending_disable_delete_resumes_after_a_restart(tmp_path):
    s = failing_deletes(tmp_path)
    s.produce(12)
    await s.start()
    await tier_everything(s)
    assert finished(s)
    s.rsm.fail = True
    disable(s)
    await s.rlm._run_removals()
    assert partition_delete_events(s) == [P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED]

    await restart(s, tmp_path)
    s.rsm.fail = False
    # At start the broker hands over every partition whose tiering is off.
    s.rlm.resume_disabled_partition(s.tip, s.log)
    await s.rlm._run_removals()
    assert not any(f for _, _, f in os.walk(s.remote_root) if f)
    assert partition_delete_events(s)[-1] == P.DELETE_PARTITION_FINISHED


async def test_pending_disable_delete_blocks_tiering_reenabled_before_a_restart(tmp_path):
    s = failing_deletes(tmp_path)
    s.produce(12)
    await s.start()
    await tier_everything(s)
    old = finished(s)
    s.rsm.fail = True
    disable(s)
    await s.rlm._run_removals()
    set_config(s, remote_storage_enable=True, remote_delete_on_disable=False)

    await restart(s, tmp_path)  # tiering is on again in the restarted broker's config
    s.produce(12)
    enable(s)
    for _ in range(2):
        await tier_everything(s)
        await s.rlm._run_removals()
    assert listed(s) == old, "copied while the old segments are still to be deleted"
    s.rsm.fail = False
    for _ in range(3):
        await s.rlm._run_removals()
        await tier_everything(s)
    assert finished(s) and not set(old) & set(finished(s))
    await check_every_offset_readable(s)


async def test_disable_without_remote_data_writes_no_markers(tmp_path):
    s = Setup(tmp_path)
    s.produce(3)
    await s.start()
    disable(s)
    await s.rlm._run_removals()
    s.rlm.resume_disabled_partition(s.tip, s.log)
    await s.rlm._run_removals()
    assert partition_delete_events(s) == []
