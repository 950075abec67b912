"""RemoteLogMetadataCache: the lifecycle tables, lookups across epochs, snapshot restore."""

from __future__ import annotations

import dataclasses
import itertools
import uuid

import pytest

from storage.remote.metadata_cache import (
    PARTITION_DELETE_TRANSITIONS,
    SEGMENT_TRANSITIONS,
    IllegalStateTransition,
    RemoteLogMetadataCache,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    UnknownSegmentError,
    check_partition_delete_transition,
    check_segment_transition,
)
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = TopicIdPartition(uuid.UUID(int=7), "2minuteaiven", 1)

# Every edge, written out independently of the module's table.
LEGAL_SEGMENT = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
}
LEGAL_PARTITION = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
}
SEGMENT_PAIRS = list(itertools.product([None, *S], S))
PARTITION_PAIRS = list(itertools.product([None, *P], P))


def seg_id(n: int, tip: TopicIdPartition = TIP) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(tip, uuid.UUID(int=n))


def segment(n: int, start: int, end: int, epochs: dict[int, int],
            tip: TopicIdPartition = TIP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(seg_id(n, tip), start, end, max_timestamp_ms=end,
                                    broker_id=1, event_timestamp_ms=0,
                                    segment_leader_epochs=epochs,
                                    segment_size_in_bytes=end - start + 1)


def update(n: int, state: S, tip: TopicIdPartition = TIP) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(seg_id(n, tip), 1, b"custom", state, 2)


def finished(cache: RemoteLogMetadataCache, *segments: RemoteLogSegmentMetadata) -> None:
    for md in segments:
        cache.apply(md)
        cache.apply(update(md.remote_log_segment_id.id.int, S.COPY_SEGMENT_FINISHED))


def ids(segments: list[RemoteLogSegmentMetadata]) -> list[int]:
    return [m.remote_log_segment_id.id.int for m in segments]


def test_tables_hold_exactly_the_legal_edges():
    assert {(c, t) for c, targets in SEGMENT_TRANSITIONS.items() for t in targets} == LEGAL_SEGMENT
    assert {(c, t) for c, targets in PARTITION_DELETE_TRANSITIONS.items()
            for t in targets} == LEGAL_PARTITION


@pytest.mark.parametrize(("current", "target"), SEGMENT_PAIRS)
def test_every_segment_transition(current, target):
    if (current, target) in LEGAL_SEGMENT:
        check_segment_transition(seg_id(1), current, target)
    else:
        with pytest.raises(IllegalStateTransition) as info:
            check_segment_transition(seg_id(1), current, target)
        assert (info.value.current, info.value.target) == (current, target)


@pytest.mark.parametrize(("current", "target"), PARTITION_PAIRS)
def test_every_partition_delete_transition(current, target):
    if (current, target) in LEGAL_PARTITION:
        check_partition_delete_transition(TIP, current, target)
    else:
        with pytest.raises(IllegalStateTransition):
            check_partition_delete_transition(TIP, current, target)


# Events that bring a fresh segment 1 to each state through legal edges.
PATH_TO = {
    S.COPY_SEGMENT_STARTED: [],
    S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED],
    S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_STARTED],
    S.DELETE_SEGMENT_FINISHED: [S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED],
}


@pytest.mark.parametrize(("current", "target"), SEGMENT_PAIRS)
def test_cache_applies_legal_and_refuses_illegal_transitions(current, target):
    cache = RemoteLogMetadataCache(TIP)
    md = segment(1, 0, 99, {0: 0})
    if current is not None:
        cache.apply(md)
        for state in PATH_TO[current]:
            cache.apply(update(1, state))
    before = cache.list_remote_log_segments()
    event = md if target == S.COPY_SEGMENT_STARTED else update(1, target)
    # DELETE_SEGMENT_FINISHED forgets the segment: the cache then knows no state for it.
    known = current not in (None, S.DELETE_SEGMENT_FINISHED)
    existing = current if known else None
    expected: type[Exception] | None
    if target != S.COPY_SEGMENT_STARTED and not known:
        expected = UnknownSegmentError
    elif (existing, target) in LEGAL_SEGMENT:
        expected = None
    else:
        expected = IllegalStateTransition
    if expected is None:
        cache.apply(event)
        listed = cache.list_remote_log_segments()
        if target == S.DELETE_SEGMENT_FINISHED:
            assert listed == []
        else:
            assert [m.state for m in listed] == [target]
    else:
        with pytest.raises(expected):
            cache.apply(event)
        assert cache.list_remote_log_segments() == before


def test_add_must_be_copy_started_and_update_must_not():
    cache = RemoteLogMetadataCache(TIP)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        cache.apply(dataclasses.replace(segment(1, 0, 9, {0: 0}), state=S.COPY_SEGMENT_FINISHED))
    cache.apply(segment(1, 0, 9, {0: 0}))
    with pytest.raises(ValueError, match="not by an update"):
        cache.apply(update(1, S.COPY_SEGMENT_STARTED))
    other = TopicIdPartition(TIP.topic_id, TIP.topic, 2)
    with pytest.raises(ValueError, match="is not"):
        cache.apply(segment(2, 0, 9, {0: 0}, tip=other))


def test_update_carries_new_state_time_broker_and_custom_metadata():
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(1, 0, 99, {0: 0}))
    md = cache.remote_log_segment_metadata(0, 50)
    assert md is not None
    assert (md.state, md.event_timestamp_ms, md.broker_id, md.custom_metadata) == (
        S.COPY_SEGMENT_FINISHED, 1, 2, b"custom")
    assert (md.start_offset, md.end_offset, md.segment_leader_epochs) == (0, 99, {0: 0})


def test_only_finished_segments_serve_reads():
    cache = RemoteLogMetadataCache(TIP)
    cache.apply(segment(1, 0, 99, {0: 0}))
    assert cache.remote_log_segment_metadata(0, 0) is None
    assert cache.highest_offset_for_epoch(0) is None
    cache.apply(update(1, S.COPY_SEGMENT_FINISHED))
    assert ids([cache.remote_log_segment_metadata(0, 99)]) == [1]
    assert cache.highest_offset_for_epoch(0) == 99
    cache.apply(update(1, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 0) is None
    assert ids(cache.list_remote_log_segments(0)) == [1]  # still listed for the deleter
    assert cache.highest_offset_for_epoch(0) == 99
    cache.apply(update(1, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments() == cache.list_remote_log_segments(0) == []
    assert cache.segment(seg_id(1)) is None


def test_lookups_across_epochs():
    # Segment 1: epoch 0 at 0..49, epoch 1 at 50..99. Segment 2: epoch 1 at 100..149,
    # epoch 3 at 150..199 (epoch 2 had no records).
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(1, 0, 99, {0: 0, 1: 50}), segment(2, 100, 199, {1: 100, 3: 150}))
    assert ids([cache.remote_log_segment_metadata(0, 0)]) == [1]
    assert ids([cache.remote_log_segment_metadata(0, 49)]) == [1]
    assert cache.remote_log_segment_metadata(0, 50) is None  # offset 50 is epoch 1's
    assert ids([cache.remote_log_segment_metadata(1, 50)]) == [1]
    assert ids([cache.remote_log_segment_metadata(1, 99)]) == [1]
    assert ids([cache.remote_log_segment_metadata(1, 100)]) == [2]
    assert ids([cache.remote_log_segment_metadata(1, 149)]) == [2]
    assert cache.remote_log_segment_metadata(1, 150) is None
    assert cache.remote_log_segment_metadata(1, 49) is None  # before epoch 1 began
    assert cache.remote_log_segment_metadata(2, 120) is None
    assert ids([cache.remote_log_segment_metadata(3, 199)]) == [2]
    assert cache.remote_log_segment_metadata(3, 200) is None
    assert [cache.highest_offset_for_epoch(e) for e in range(5)] == [49, 149, None, 199, None]
    assert ids(cache.list_remote_log_segments(1)) == [1, 2]
    assert ids(cache.list_remote_log_segments(0)) == [1]
    assert ids(cache.list_remote_log_segments(3)) == [2]
    assert cache.list_remote_log_segments(2) == []


def test_orphaned_copy_of_a_failed_leader_b33f():
    # Deep-dive example: leader A (epoch 0) starts copying the segment at 1337 as b33f
    # and dies before COPY_SEGMENT_FINISHED; leader B (epoch 1 from 5444) copies the same
    # segment as caf3 and finishes.
    b33f, caf3 = 0xB33F, 0xCAF3
    cache = RemoteLogMetadataCache(TIP)
    cache.apply(segment(b33f, 1337, 4000, {0: 1337}))
    finished(cache, segment(caf3, 1337, 4000, {0: 1337}))
    finished(cache, segment(3, 4001, 6000, {0: 4001, 1: 5444}))
    assert ids([cache.remote_log_segment_metadata(0, 2000)]) == [caf3]
    assert ids(cache.list_remote_log_segments()) in ([b33f, caf3, 3], [caf3, b33f, 3])
    assert b33f in ids(cache.list_remote_log_segments(0))
    assert b33f not in ids(cache.list_remote_log_segments(1))
    # The expirer deletes the orphan straight from COPY_SEGMENT_STARTED.
    cache.apply(update(b33f, S.DELETE_SEGMENT_STARTED))
    cache.apply(update(b33f, S.DELETE_SEGMENT_FINISHED))
    assert ids(cache.list_remote_log_segments()) == [caf3, 3]
    assert ids([cache.remote_log_segment_metadata(0, 2000)]) == [caf3]


def test_new_leader_copy_replaces_duplicate_of_same_epoch():
    # Kafka's case 1: L0 uploaded S0 0..100, L1 uploaded S1 0..200 for the same epoch.
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(10, 0, 100, {0: 0}), segment(11, 0, 200, {0: 0}))
    assert ids([cache.remote_log_segment_metadata(0, 50)]) == [11]
    assert ids(cache.list_remote_log_segments(0)) in ([10, 11], [11, 10])
    assert cache.highest_offset_for_epoch(0) == 200


def test_overlapping_copies_prefer_the_newer_lineage():
    # Kafka's case 2: S0 10..90 by L0; then S1 5..100 and S2 101..200 by L1.
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(20, 10, 90, {0: 10}), segment(21, 5, 100, {0: 5}),
             segment(22, 101, 200, {0: 101}))
    assert ids([cache.remote_log_segment_metadata(0, 95)]) == [21]
    assert ids([cache.remote_log_segment_metadata(0, 50)]) == [21]
    assert ids([cache.remote_log_segment_metadata(0, 150)]) == [22]
    assert cache.remote_log_segment_metadata(0, 4) is None


def test_unclean_election_diverging_lineages():
    # Leader of epoch 1 tiered 0..199 with epoch 1 from 100. After an unclean election the
    # new leader's log diverges at 150 (epoch 2 from 150): its copy of 100..249 holds
    # epochs {1: 100, 2: 150}. Each epoch's lookups follow that epoch's lineage.
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(1, 0, 199, {0: 0, 1: 100}))
    finished(cache, segment(2, 100, 249, {1: 100, 2: 150}))
    assert ids([cache.remote_log_segment_metadata(0, 99)]) == [1]
    assert ids([cache.remote_log_segment_metadata(1, 120)]) == [2]
    assert cache.remote_log_segment_metadata(1, 170) is None  # epoch 1 ends at 149 now
    assert ids([cache.remote_log_segment_metadata(2, 170)]) == [2]
    assert cache.highest_offset_for_epoch(1) == 199  # epoch 1 data was once tiered to 199
    assert cache.highest_offset_for_epoch(2) == 249


def test_finished_copy_of_lower_offsets_does_not_unreference_higher_ones():
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, segment(1, 100, 199, {0: 100}), segment(2, 0, 99, {0: 0}))
    assert ids([cache.remote_log_segment_metadata(0, 150)]) == [1]
    assert ids([cache.remote_log_segment_metadata(0, 50)]) == [2]
    assert ids(cache.list_remote_log_segments(0)) == [2, 1]


def test_partition_delete_state():
    cache = RemoteLogMetadataCache(TIP)

    def delete(state: P) -> RemotePartitionDeleteMetadata:
        return RemotePartitionDeleteMetadata(TIP, state, 5, 0)

    with pytest.raises(IllegalStateTransition):
        cache.apply(delete(P.DELETE_PARTITION_STARTED))
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_MARKED,
                  P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED):
        cache.apply(delete(state))
        assert cache.delete_metadata is not None and cache.delete_metadata.state == state
    with pytest.raises(IllegalStateTransition):
        cache.apply(delete(P.DELETE_PARTITION_MARKED))


def _epoch_lookups(cache: RemoteLogMetadataCache) -> list[object]:
    found = []
    for epoch in range(4):
        found.append(cache.highest_offset_for_epoch(epoch))
        found.append(ids(cache.list_remote_log_segments(epoch)))
        for offset in range(0, 320, 5):
            md = cache.remote_log_segment_metadata(epoch, offset)
            found.append(md.remote_log_segment_id.id.int if md else None)
    return found


def test_restore_from_event_order_rebuilds_the_lookups():
    cache = RemoteLogMetadataCache(TIP)
    cache.apply(segment(1, 0, 99, {0: 0}))  # orphan, still COPY_SEGMENT_STARTED
    cache.apply(segment(2, 0, 150, {0: 0, 1: 120}))  # added before 3 finishes ...
    finished(cache, segment(3, 0, 99, {0: 0}))
    cache.apply(update(2, S.COPY_SEGMENT_FINISHED))  # ... but finishes after it
    finished(cache, segment(4, 151, 300, {1: 151, 2: 200}))
    cache.apply(segment(5, 301, 310, {2: 301}))
    cache.apply(update(5, S.DELETE_SEGMENT_STARTED))
    cache.apply(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 1, 0))
    restored = RemoteLogMetadataCache(TIP)
    restored.restore(cache.segments_in_event_order(), cache.delete_metadata)
    assert _epoch_lookups(restored) == _epoch_lookups(cache)
    assert restored.list_remote_log_segments() == cache.list_remote_log_segments()
    assert restored.delete_metadata == cache.delete_metadata
    with pytest.raises(ValueError, match="non-empty"):
        restored.restore([], None)
