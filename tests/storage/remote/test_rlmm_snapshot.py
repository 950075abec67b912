"""The metadata manager's files, and metadata events <-> record and snapshot bytes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rlmm_records import ApiKey, decode_record, decode_snapshot, encode_record
from storage.log.checkpoint import topic_id_to_str
from storage.remote import rlmm_snapshot
from storage.remote.metadata_cache import (
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.rlmm_serde import (
    MetadataRecordError,
    deserialize,
    parse_snapshot,
    serialize,
    snapshot_bytes,
)
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TIP = TopicIdPartition(uuid.UUID(int=42), "orders", 4)

int32s = st.integers(-(2**31), 2**31 - 1)
offsets = st.integers(0, 2**62)
tips = st.builds(TopicIdPartition, st.uuids(), st.text(min_size=1, max_size=30),
                 st.integers(0, 2**31 - 1))


@st.composite
def segments(draw: st.DrawFn, tip: st.SearchStrategy[TopicIdPartition] = tips
             ) -> RemoteLogSegmentMetadata:
    start = draw(offsets)
    end = draw(st.integers(start, start + 2**40))
    epochs = draw(st.dictionaries(st.integers(0, 2**31 - 1), st.integers(start, end),
                                  min_size=1, max_size=4))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(draw(tip), draw(st.uuids())), start, end,
        max_timestamp_ms=draw(st.integers(-1, 2**50)), broker_id=draw(int32s),
        event_timestamp_ms=draw(st.integers(0, 2**50)), segment_leader_epochs=epochs,
        segment_size_in_bytes=draw(st.integers(0, 2**31 - 1)),
        custom_metadata=draw(st.none() | st.binary(max_size=64)),
        state=draw(st.sampled_from(RemoteLogSegmentState)))


updates = st.builds(RemoteLogSegmentMetadataUpdate,
                    st.builds(RemoteLogSegmentId, tips, st.uuids()), st.integers(0, 2**50),
                    st.none() | st.binary(max_size=64), st.sampled_from(RemoteLogSegmentState),
                    int32s)
deletes = st.builds(RemotePartitionDeleteMetadata, tips,
                    st.sampled_from(RemotePartitionDeleteState), st.integers(0, 2**50), int32s)


@settings(max_examples=150, deadline=None)
@given(segments() | updates | deletes)
def test_event_round_trip(event):
    assert deserialize(serialize(event)) == event


def test_record_types_are_the_kafka_api_keys():
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.UUID(int=1)), 0, 9, 9, 1, 2,
                                  {0: 0}, 10)
    update = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 3, None,
                                            RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)
    delete = RemotePartitionDeleteMetadata(TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                                           4, 1)
    assert [decode_record(serialize(e)).api_key for e in (md, update, delete)] == [
        ApiKey.REMOTE_LOG_SEGMENT_METADATA, ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE,
        ApiKey.REMOTE_PARTITION_DELETE_METADATA]


def test_records_with_impossible_values_are_refused():
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.UUID(int=1)), 0, 9, 9, 1, 2,
                                  {0: 0}, 10)
    good = serialize(md)
    bad_state = good[:-2] + b"\x09\x00"  # RemoteLogSegmentState 9
    with pytest.raises(MetadataRecordError, match="state 9"):
        deserialize(bad_state)
    entry = decode_snapshot(snapshot_bytes(TIP, 0, [md], None)).entries[0]
    with pytest.raises(MetadataRecordError, match="snapshot entries"):
        deserialize(encode_record(entry.api_key, entry.message))


@settings(max_examples=100, deadline=None)
@given(st.lists(segments(st.just(TIP)), max_size=5), st.none() | deletes.map(
    lambda d: RemotePartitionDeleteMetadata(TIP, d.state, d.event_timestamp_ms, d.broker_id)),
    st.integers(-1, 2**62))
def test_snapshot_round_trip(segs, delete, offset):
    data = snapshot_bytes(TIP, offset, segs, delete)
    parsed = parse_snapshot(data, TIP.partition)
    assert (parsed.topic_id_partition, parsed.metadata_offset) == (TIP, offset)
    assert parsed.segments == segs
    assert parsed.delete_metadata == delete
    header = decode_snapshot(data)
    assert (header.topic_name, header.topic_id) == (TIP.topic, TIP.topic_id)


def test_snapshot_with_another_partitions_delete_state_is_refused():
    other = RemotePartitionDeleteMetadata(TopicIdPartition(uuid.UUID(int=1), "x", 0),
                                          RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 1)
    with pytest.raises(MetadataRecordError, match="delete state"):
        parse_snapshot(snapshot_bytes(TIP, 0, [], other), TIP.partition)


# -- files ----------------------------------------------------------------------------


def test_committed_offsets_file_is_kafkas_format(tmp_path: Path):
    rlmm_snapshot.write_committed_offsets(str(tmp_path), {4: 104, 0: 2022, 2: 498})
    path = tmp_path / "_rlmm_committed_offsets"
    assert path.read_text() == "0\n0 2022\n2 498\n4 104\n"
    assert rlmm_snapshot.read_committed_offsets(str(tmp_path)) == {0: 2022, 2: 498, 4: 104}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text", ["", "1\n0 5\n", "0\n0\n", "0\nx 5\n", "0\n0 5 6\n"])
def test_corrupt_committed_offsets_read_as_none(tmp_path: Path, text: str):
    (tmp_path / "_rlmm_committed_offsets").write_text(text)
    assert rlmm_snapshot.read_committed_offsets(str(tmp_path)) == {}


def test_missing_committed_offsets_read_as_none(tmp_path: Path):
    assert rlmm_snapshot.read_committed_offsets(str(tmp_path)) == {}


def test_snapshot_files_write_load_and_remove(tmp_path: Path):
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.UUID(int=1)), 0, 9, 9, 1, 2,
                                  {0: 0}, 10)
    name = rlmm_snapshot.snapshot_file_name(TIP)
    assert name == f"{topic_id_to_str(TIP.topic_id)}-4"
    assert rlmm_snapshot.parse_snapshot_file_name(name) == (TIP.topic_id, 4)
    directory = tmp_path / rlmm_snapshot.SNAPSHOT_DIR
    rlmm_snapshot.write_snapshots(str(tmp_path), {name: snapshot_bytes(TIP, 7, [md], None)}, set())
    (directory / "leftover.tmp").write_bytes(b"partial")
    (directory / "not-a-snapshot").write_bytes(b"")
    elsewhere = TopicIdPartition(uuid.UUID(int=43), "orders", 4)  # content names another tip
    (directory / rlmm_snapshot.snapshot_file_name(elsewhere)).write_bytes(
        snapshot_bytes(TIP, 7, [], None))
    loaded = rlmm_snapshot.load_snapshots(str(tmp_path))
    assert list(loaded.snapshots) == [name]
    assert loaded.snapshots[name].segments == [md]
    assert loaded.snapshots[name].metadata_offset == 7
    assert sorted(loaded.corrupt) == sorted(
        ["not-a-snapshot", rlmm_snapshot.snapshot_file_name(elsewhere)])
    assert not (directory / "leftover.tmp").exists()
    rlmm_snapshot.remove_snapshots(str(tmp_path), {name, "never-existed-1"})
    assert name not in rlmm_snapshot.load_snapshots(str(tmp_path)).snapshots
