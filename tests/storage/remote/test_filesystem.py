"""Filesystem RSM specifics: the on-disk layout, atomic writes, directories."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from storage.remote.filesystem import TMP_SUFFIX, FileSystemRemoteStorageManager
from storage.remote.naming import uuid_str
from tests.storage.remote.segments import SegmentFactory


def test_layout_matches_local_tiered_storage(tmp_path: Path, segments: SegmentFactory) -> None:
    rsm = FileSystemRemoteStorageManager({"dir": str(tmp_path / "tier")})
    seg = segments.make(500, start_offset=77)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    tip = seg.metadata.topic_id_partition
    directory = tmp_path / "tier" / f"orders-0-{uuid_str(tip.topic_id)}"
    stem = f"{77:020d}-{uuid_str(seg.metadata.remote_log_segment_id.id)}"
    assert sorted(os.listdir(directory)) == sorted(
        f"{stem}.{s}" for s in
        ["log", "index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint",
         "indexes"])
    for suffix, content in seg.contents.items():
        assert (directory / f"{stem}.{suffix}").read_bytes() == content
    # Layout 2's one-GET copy of both indexes.
    assert (directory / f"{stem}.indexes").read_bytes() == \
        seg.contents["index"] + seg.contents["timeindex"]


def test_delete_removes_leftover_temp_files_and_empty_directory(
        tmp_path: Path, segments: SegmentFactory) -> None:
    rsm = FileSystemRemoteStorageManager({"dir": str(tmp_path / "tier")})
    seg = segments.make(500)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    leftover = Path(rsm.object_path(seg.metadata, "snapshot") + TMP_SUFFIX)
    leftover.write_bytes(b"half")  # as a crash mid-copy would leave it
    rsm.delete_log_segment_data(seg.metadata)
    assert not os.path.exists(rsm.partition_dir(seg.metadata.topic_id_partition))
    assert os.listdir(tmp_path / "tier") == []


def test_copy_recreates_directory_removed_by_concurrent_delete(
        tmp_path: Path, segments: SegmentFactory) -> None:
    """Copies and deletes in one partition race on its directory; no copy fails."""
    rsm = FileSystemRemoteStorageManager({"dir": str(tmp_path / "tier")})
    segs = [segments.make(200, start_offset=i * 100) for i in range(40)]
    errors: list[BaseException] = []

    def churn(part: list) -> None:  # type: ignore[type-arg]
        try:
            for seg in part:
                rsm.copy_log_segment_data(seg.metadata, seg.data)
                rsm.delete_log_segment_data(seg.metadata)
        except BaseException as exc:  # noqa: B036 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(segs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keep = segments.make(200)
    rsm.copy_log_segment_data(keep.metadata, keep.data)
    assert rsm.fetch_log_segment(keep.metadata, 0) == keep.log
