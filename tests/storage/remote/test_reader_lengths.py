"""How much a remote read asks the chunk cache for: a read starting where its
batch starts (a segment's first offset, or where the previous read ended)
reads the first batch's length field, then asks for the budget or that batch,
whichever is larger, and no scan slack; a read from an indexed position keeps
the slack to skip the batches below its offset. The answers are the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from protocol import records
from storage.remote.chunk_cache import ChunkCache
from storage.remote.index_cache import RemoteIndexCache
from storage.remote.reader import _SCAN_SLACK, NextPositions, read_blocking
from storage.remote.types import RemoteLogSegmentMetadata
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import SegmentFactory


class Asked(ChunkCache):
    """The chunk cache, with every range asked of it recorded."""

    asked: list[tuple[int, int | None]]

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        self.asked.append((start_position, end_position))
        return super().fetch_log_segment(metadata, start_position, end_position)


def batches() -> list[bytes]:
    """A 20 KiB batch, then ten small ones; offsets 0..10."""
    out = [records.build_batch([(None, b"x" * 20_000)], base_offset=0)]
    out += [records.build_batch([(None, b"y" * 100)], base_offset=i) for i in range(1, 11)]
    return [bytes(b) for b in out]


def stored(backend: Backend, segments: SegmentFactory) -> tuple[Any, RemoteLogSegmentMetadata,
                                                                   list[bytes]]:
    parts = batches()
    log = b"".join(parts)
    seg = segments.make(len(log))
    Path(seg.data.log_segment).write_bytes(log)
    for index in (seg.data.offset_index, seg.data.time_index):  # empty: seeks start at 0
        Path(index).write_bytes(b"")
    md = dataclasses.replace(seg.metadata, start_offset=0, end_offset=10)
    backend.rsm.copy_log_segment_data(md, seg.data)
    return backend.rsm, md, parts


def test_a_read_at_a_batch_start_asks_for_its_batch_not_the_budget_and_slack(
        backend: Backend, segments: SegmentFactory, tmp_path: Path) -> None:
    rsm, md, parts = stored(backend, segments)
    chunks = Asked(rsm, {"fetch.prefetch.chunks": "0"})
    chunks.asked = []
    index_cache = RemoteIndexCache(str(tmp_path), 1 << 20)
    positions = NextPositions()
    first = len(parts[0])
    # The first batch is larger than the budget: returned alone (min one batch),
    # after asking for its 12-byte length field and then exactly its bytes.
    assert read_blocking(chunks, index_cache, md, 0, 1000, True, positions) == parts[0]
    assert chunks.asked == [(0, records.LOG_OVERHEAD - 1), (0, first - 1)]
    # Not the first partition of the fetch (no min one batch): nothing.
    chunks.asked = []
    assert read_blocking(chunks, index_cache, md, 0, 1000, False, None) == b""
    assert chunks.asked[:2] == [(0, records.LOG_OVERHEAD - 1), (0, 1000 - 1)]
    # Reading on where the first read ended: the budget, no slack.
    chunks.asked = []
    assert read_blocking(chunks, index_cache, md, 1, 350, True, positions) == \
        b"".join(parts[1:3])
    assert chunks.asked[-1] == (first, first + 350 - 1)
    # A seek into the segment goes through the offset index and keeps the slack.
    chunks.asked = []
    assert read_blocking(chunks, index_cache, md, 5, 10_000, True, None) == \
        b"".join(parts[5:])
    # (budget + slack reaches past the segment's end: the rest of it from 0)
    assert 10_000 + _SCAN_SLACK > md.segment_size_in_bytes
    assert chunks.asked == [(0, md.segment_size_in_bytes - 1)]
    chunks.close()
