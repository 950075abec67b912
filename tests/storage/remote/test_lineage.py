"""Where the tier ends in a replica's own epoch lineage, and the epochs of the
tiered data put back from the remote metadata when a leader-epoch-checkpoint
was lost (so that expiration never takes live remote data for orphans)."""

from __future__ import annotations

import dataclasses
import uuid

from storage.remote.lineage import remote_epochs_below
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TIP = TopicIdPartition(uuid.uuid4(), "t", 0)


def segment(start: int, end: int, epochs: dict[int, int],
            state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ) -> RemoteLogSegmentMetadata:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TIP), start, end, 0, 1, 0,
                                  epochs, 100)
    return dataclasses.replace(md, state=state)


def test_epochs_of_consecutive_segments_in_offset_order():
    segs = [segment(10, 19, {1: 10, 2: 15}), segment(0, 9, {0: 0, 1: 5}),
            segment(20, 29, {2: 20})]
    assert remote_epochs_below(segs, 30) == [(0, 0), (1, 5), (2, 15)]


def test_only_data_below_the_local_cache_counts():
    segs = [segment(0, 9, {0: 0}), segment(10, 19, {3: 10})]
    assert remote_epochs_below(segs, 10) == [(0, 0)]


def test_overlapping_copies_keep_the_later_epochs_and_unfinished_copies_are_ignored():
    segs = [segment(0, 9, {0: 0}), segment(5, 14, {0: 5}),   # overlaps: skipped
            segment(10, 19, {1: 10}),
            segment(10, 19, {4: 10}, RemoteLogSegmentState.COPY_SEGMENT_STARTED)]
    assert remote_epochs_below(segs, 20) == [(0, 0), (1, 10)]


class _Epochs:
    def __init__(self, entries):
        self.entries = list(entries)

    def replace(self, entries):
        self.entries = list(entries)


class _Log:
    def __init__(self, entries, log_start, end):
        self.epochs = _Epochs(entries)
        self.log_start_offset = log_start
        self.end_offset = end


def test_a_lost_checkpoint_gets_the_tiered_epochs_back():
    from storage.remote.lineage import restore_remote_epochs

    segs = [segment(0, 9, {0: 0}), segment(10, 19, {0: 10, 1: 15})]
    # Rebuilt from the local segments only: epoch 1 seen from 20 on.
    lg = _Log([(1, 20), (2, 30)], log_start=0, end=40)
    assert restore_remote_epochs(segs, lg)
    assert lg.epochs.entries == [(0, 0), (1, 15), (2, 30)]
    # A cache that reaches the log start is left alone.
    whole = _Log([(0, 0), (1, 15)], log_start=0, end=40)
    assert not restore_remote_epochs(segs, whole)
