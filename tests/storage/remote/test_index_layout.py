"""Layout 2: both indexes a seek needs in one ``indexes`` object, located by the
segment's manifest; layout 1 copies (no such object, a version 1 or no
manifest) stay readable, one GET per index as before."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from storage.remote.naming import INDEXES_SUFFIX, index_lengths
from storage.remote.reader import CorruptRemoteDataError, fetch_offset_and_time_indexes
from storage.remote.types import IndexType, RemoteLogSegmentMetadata
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import SegmentFactory

SIZE = 10_000


class Counting:
    """The backend's storage manager, with its index reads counted."""

    def __init__(self, rsm: Any) -> None:
        self.rsm = rsm
        self.calls: list[str] = []

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self.calls.append(index_type.name)
        return self.rsm.fetch_index(md, index_type)

    def fetch_combined_indexes(self, md: RemoteLogSegmentMetadata) -> bytes:
        self.calls.append("combined")
        return self.rsm.fetch_combined_indexes(md)


def _copied(backend: Backend, segments: SegmentFactory) -> tuple[Any, RemoteLogSegmentMetadata]:
    seg = segments.make(SIZE)
    manifest = backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    return seg, dataclasses.replace(seg.metadata, custom_metadata=manifest)


def test_a_layout_2_segment_gives_both_indexes_in_one_get(
        backend: Backend, segments: SegmentFactory) -> None:
    seg, md = _copied(backend, segments)
    assert index_lengths(md) == (len(seg.index(IndexType.OFFSET)),
                                 len(seg.index(IndexType.TIMESTAMP)))
    rsm = Counting(backend.rsm)
    assert fetch_offset_and_time_indexes(rsm, md) == (seg.index(IndexType.OFFSET),
                                                      seg.index(IndexType.TIMESTAMP))
    assert rsm.calls == ["combined"]


@pytest.mark.parametrize("manifest", [None, json.dumps({"v": 1, "txn": True, "snap": True})])
def test_a_layout_1_segment_is_read_from_its_separate_indexes(
        backend: Backend, segments: SegmentFactory, manifest: str | None) -> None:
    seg, md = _copied(backend, segments)
    # As a copy made before layout 2: no indexes object, an older manifest or none.
    backend.overwrite(md, INDEXES_SUFFIX, b"")
    old = dataclasses.replace(md, custom_metadata=None if manifest is None else manifest.encode())
    assert index_lengths(old) is None
    rsm = Counting(backend.rsm)
    assert fetch_offset_and_time_indexes(rsm, old) == (seg.index(IndexType.OFFSET),
                                                       seg.index(IndexType.TIMESTAMP))
    assert rsm.calls == ["OFFSET", "TIMESTAMP"]


def test_an_indexes_object_of_the_wrong_size_is_corrupt_data(
        backend: Backend, segments: SegmentFactory) -> None:
    seg, md = _copied(backend, segments)
    backend.overwrite(md, INDEXES_SUFFIX, seg.index(IndexType.OFFSET))  # the time index lost
    with pytest.raises(CorruptRemoteDataError, match="manifest"):
        fetch_offset_and_time_indexes(backend.rsm, md)
