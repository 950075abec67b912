"""Remote storage value types: KIP numbering, validation, string forms."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)

TIP = TopicIdPartition(uuid.UUID(int=1), "orders", 3)


def metadata(**overrides: object) -> RemoteLogSegmentMetadata:
    fields: dict[str, object] = dict(
        remote_log_segment_id=RemoteLogSegmentId(TIP, uuid.UUID(int=2)), start_offset=0,
        end_offset=9, max_timestamp_ms=5, broker_id=1, event_timestamp_ms=6,
        segment_leader_epochs={0: 0}, segment_size_in_bytes=100)
    fields.update(overrides)
    return RemoteLogSegmentMetadata(**fields)  # type: ignore[arg-type]


def test_state_ids_are_the_kips() -> None:
    assert [(s.name, s.value) for s in RemoteLogSegmentState] == [
        ("COPY_SEGMENT_STARTED", 0), ("COPY_SEGMENT_FINISHED", 1),
        ("DELETE_SEGMENT_STARTED", 2), ("DELETE_SEGMENT_FINISHED", 3)]


def test_metadata_defaults_and_update() -> None:
    md = metadata()
    assert md.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert md.custom_metadata is None and md.topic_id_partition == TIP
    done = dataclasses.replace(md, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    assert done.remote_log_segment_id == md.remote_log_segment_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        md.start_offset = 3  # type: ignore[misc]


@pytest.mark.parametrize("bad", [
    {"start_offset": -1}, {"end_offset": -1}, {"segment_leader_epochs": {}},
    {"segment_size_in_bytes": -1},
])
def test_metadata_validation(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        metadata(**bad)


def test_string_forms_use_kafka_uuids() -> None:
    assert str(TIP) == "AAAAAAAAAAAAAAAAAAAAAQ:orders-3"
    assert str(RemoteLogSegmentId(TIP, uuid.UUID(int=2))) == \
        "AAAAAAAAAAAAAAAAAAAAAQ:orders-3:AAAAAAAAAAAAAAAAAAAAAg"
    assert RemoteLogSegmentId.generate(TIP) != RemoteLogSegmentId.generate(TIP)


def test_errors() -> None:
    assert RemoteStorageError("x", retriable=True).retriable
    assert not RemoteStorageError("x").retriable
    missing = RemoteResourceNotFoundError("gone")
    assert isinstance(missing, RemoteStorageError) and not missing.retriable
