"""``list_objects`` of the built-in RSMs (ListableRemoteStorage), the listing
operator tools use; run against the filesystem RSM, S3 over HTTP to moto, GCS
to its emulator and Azure to Azurite."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from storage.remote.api import ListableRemoteStorage, SegmentObjectName, StoredObject
from storage.remote.azure import AzureRemoteStorageManager
from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.gcs import GcsRemoteStorageManager
from storage.remote.naming import ALL_SUFFIXES, uuid_str
from storage.remote.rsm import parse_object_name
from storage.remote.s3 import S3RemoteStorageManager
from storage.remote.types import RemoteLogSegmentId, TopicIdPartition
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import LocalSegment, SegmentFactory

SIZE = 3000
# A topic id whose Uuid.toString is "-_-_...": separators inside the id must
# not confuse the parsers.
DASHED_ID = uuid.UUID(bytes=b"\xfb\xff" * 8)
# How far a stored object's modification time may be from the test's clock
# (moto stamps whole seconds).
CLOCK_SLACK_S = 5.0


def _listing(backend: Backend, prefix: str = "") -> dict[str, StoredObject]:
    rsm = backend.rsm
    assert isinstance(rsm, ListableRemoteStorage)
    return {obj.key: obj for obj in rsm.list_objects(prefix)}


def _copy(backend: Backend, seg: LocalSegment) -> LocalSegment:
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    return seg


def _put_raw(backend: Backend, request: pytest.FixtureRequest, key: str, data: bytes) -> None:
    """Store ``data`` under ``key`` (relative to the tier root), bypassing the RSM."""
    rsm = backend.rsm
    if isinstance(rsm, FileSystemRemoteStorageManager):
        path = Path(rsm.root) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    elif isinstance(rsm, S3RemoteStorageManager):
        client = request.getfixturevalue("moto_server").client()
        client.put_object(Bucket=rsm.bucket, Key=rsm.prefix + key, Body=data)
    elif isinstance(rsm, GcsRemoteStorageManager):
        bucket = request.getfixturevalue("gcs_emulator").client().bucket(rsm.bucket_name)
        bucket.blob(rsm.prefix + key).upload_from_string(data)
    else:
        assert isinstance(rsm, AzureRemoteStorageManager)
        service = request.getfixturevalue("azurite").client()
        service.get_container_client(rsm.container_name).upload_blob(rsm.prefix + key, data)


def test_empty_tier_lists_nothing(backend: Backend) -> None:
    assert _listing(backend) == {}


def test_lists_every_object_with_its_segment(backend: Backend, segments: SegmentFactory) -> None:
    started = time.time()
    first = _copy(backend, segments.make(SIZE, start_offset=0))
    other_tip = TopicIdPartition(DASHED_ID, "pay-ments-7", 12)
    second = _copy(backend, segments.make(SIZE + 1, start_offset=1234, tip=other_tip))

    listed = _listing(backend)

    assert len(listed) == len(first.contents) + len(second.contents)
    for seg in (first, second):
        md = seg.metadata
        mine = {obj.name.suffix: obj for obj in listed.values()
                if obj.name is not None and obj.name.segment_id == md.remote_log_segment_id}
        assert set(mine) == set(seg.contents)
        for suffix, obj in mine.items():
            assert obj.name == SegmentObjectName(md.remote_log_segment_id, md.start_offset, suffix)
            assert obj.size == len(seg.contents[suffix])
            assert started - CLOCK_SLACK_S <= obj.modified_s <= time.time() + CLOCK_SLACK_S
            assert obj.key.endswith(f"{md.start_offset:020d}-"
                                    f"{uuid_str(md.remote_log_segment_id.id)}.{suffix}")


def test_prefix_selects_one_partition(backend: Backend, segments: SegmentFactory) -> None:
    kept = _copy(backend, segments.make(SIZE))
    _copy(backend, segments.make(SIZE, tip=TopicIdPartition(DASHED_ID, "other", 0)))
    log_key = next(key for key, obj in _listing(backend).items() if obj.name is not None
                   and obj.name.segment_id == kept.metadata.remote_log_segment_id
                   and obj.name.suffix == "log")
    partition_prefix = log_key.rsplit("/", 1)[0] + "/"

    listed = _listing(backend, partition_prefix)

    assert {obj.name.segment_id for obj in listed.values() if obj.name is not None} == {
        kept.metadata.remote_log_segment_id}
    assert len(listed) == len(kept.contents)
    assert set(_listing(backend, log_key)) == {log_key}


def test_foreign_names_are_listed_unparsed(backend: Backend, segments: SegmentFactory,
                                           request: pytest.FixtureRequest) -> None:
    seg = _copy(backend, segments.make(SIZE))
    log_key = next(key for key in _listing(backend) if key.endswith(".log"))
    partition = log_key.rsplit("/", 1)[0]
    strays = {"README": b"hello", f"{partition}/notes.txt": b"x" * 7,
              f"{partition}/00000000000000000001-tooshort.log": b""}
    for key, data in strays.items():
        _put_raw(backend, request, key, data)

    listed = _listing(backend)

    for key, data in strays.items():
        assert listed[key].name is None
        assert listed[key].size == len(data)
    assert sum(obj.name is not None for obj in listed.values()) == len(seg.contents)


def test_deleted_segment_is_no_longer_listed(backend: Backend, segments: SegmentFactory) -> None:
    gone = _copy(backend, segments.make(SIZE))
    kept = _copy(backend, segments.make(SIZE, start_offset=100))
    backend.rsm.delete_log_segment_data(gone.metadata)

    ids = {obj.name.segment_id for obj in _listing(backend).values() if obj.name is not None}

    assert ids == {kept.metadata.remote_log_segment_id}


@pytest.mark.parametrize("suffix", [*ALL_SUFFIXES, "log.tmp"])
def test_parse_object_name_round_trips(suffix: str) -> None:
    tip = TopicIdPartition(DASHED_ID, "t", 3)
    segment_id = RemoteLogSegmentId(tip, DASHED_ID)
    name = f"{42:020d}-{uuid_str(DASHED_ID)}.{suffix}"

    assert parse_object_name(tip, name) == SegmentObjectName(segment_id, 42, suffix)


@pytest.mark.parametrize("name", [
    "",
    "README",
    f"{42:020d}-{uuid_str(DASHED_ID)}",  # no suffix
    f"{42:020d}-{uuid_str(DASHED_ID)}.",  # empty suffix
    f"{42:019d}-{uuid_str(DASHED_ID)}.log",  # short offset
    f"{42:020d}_{uuid_str(DASHED_ID)}.log",  # wrong separator
    f"{42:020d}-{uuid_str(DASHED_ID)[:-1]}.log",  # short uuid
    f"{42:020d}-{'!' * 22}.log",  # not base64url
])
def test_parse_object_name_rejects_other_names(name: str) -> None:
    assert parse_object_name(TopicIdPartition(DASHED_ID, "t", 3), name) is None
