"""Local segments with known bytes, and their RemoteLogSegmentMetadata, for RSM tests."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path

from storage.log.checkpoint import format_epochs
from storage.remote.naming import INDEX_SUFFIXES, INDEXES_SUFFIX, LOG_SUFFIX
from storage.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

T0 = 1_700_000_000_000
BROKER_ID = 1


@dataclass
class LocalSegment:
    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    contents: dict[str, bytes]  # suffix -> bytes of every file copied

    @property
    def log(self) -> bytes:
        return self.contents[LOG_SUFFIX]

    def index(self, index_type: IndexType) -> bytes:
        return self.contents[INDEX_SUFFIXES[index_type]]


class SegmentFactory:
    """Writes segment files under ``directory``; bytes are seeded, so reproducible."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
        self._seed = 0

    def make(self, size: int = 4096, *, start_offset: int = 0, tip: TopicIdPartition | None = None,
             transaction_index: bool = True, producer_snapshot: bool = True) -> LocalSegment:
        self._seed += 1
        rng = random.Random(self._seed)
        tip = tip or self.tip
        contents = {
            LOG_SUFFIX: rng.randbytes(size),
            INDEX_SUFFIXES[IndexType.OFFSET]: rng.randbytes(8 * 16),
            INDEX_SUFFIXES[IndexType.TIMESTAMP]: rng.randbytes(12 * 16),
            INDEX_SUFFIXES[IndexType.LEADER_EPOCH]:
                format_epochs([(3, start_offset), (4, start_offset + 10)]).encode(),
        }
        if transaction_index:
            contents[INDEX_SUFFIXES[IndexType.TRANSACTION]] = rng.randbytes(34 * 2)
        if producer_snapshot:
            contents[INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT]] = rng.randbytes(100)
        base = self.directory / f"{tip.topic}-{tip.partition}-{self._seed}"
        base.mkdir()
        paths: dict[str, Path] = {}
        for suffix, content in contents.items():
            if suffix != INDEX_SUFFIXES[IndexType.LEADER_EPOCH]:
                paths[suffix] = base / f"{start_offset:020d}.{suffix}"
                paths[suffix].write_bytes(content)
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate(tip), start_offset=start_offset,
            end_offset=start_offset + 99, max_timestamp_ms=T0 + 99, broker_id=BROKER_ID,
            event_timestamp_ms=T0 + 1000, segment_leader_epochs={3: start_offset,
                                                                4: start_offset + 10},
            segment_size_in_bytes=size)
        data = LogSegmentData(
            log_segment=paths[LOG_SUFFIX], offset_index=paths["index"],
            time_index=paths["timeindex"], transaction_index=paths.get("txnindex"),
            producer_snapshot_index=paths.get("snapshot"),
            leader_epoch_index=contents[INDEX_SUFFIXES[IndexType.LEADER_EPOCH]])
        # Layout 2's copy of both indexes in one object.
        contents[INDEXES_SUFFIX] = contents["index"] + contents["timeindex"]
        return LocalSegment(metadata, data, contents)
