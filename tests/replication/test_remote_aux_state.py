"""Which remote segment a follower rebuilds from: the copy of the offset below
the leader's local start written in the leader's epoch there (after an unclean
election the tier also keeps another lineage's copy of the same offsets)."""

from __future__ import annotations

import dataclasses
import uuid

from replication.remote_aux_state import segment_holding
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


def test_the_copy_in_the_leaders_epoch_wins_over_another_lineage():
    ours = segment(2, 3, {0: 2})      # the leader's lineage: offset 3 in epoch 0
    theirs = segment(2, 3, {1: 2})    # an unclean leader's copy, epoch 1
    assert segment_holding([theirs, ours], 3, 0) is ours
    assert segment_holding([theirs, ours], 3, 1) is theirs
    assert segment_holding([theirs, ours], 3, 2) is None


def test_unfinished_copies_and_other_offsets_do_not_count():
    started = segment(0, 9, {0: 0}, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    before = segment(0, 4, {0: 0})
    assert segment_holding([started, before], 7, 0) is None
    longer = segment(5, 12, {0: 5})
    shorter = segment(5, 9, {0: 5})
    assert segment_holding([shorter, longer, started], 7, 0) is longer
