"""``tierd admin``'s fold of ``__remote_log_metadata`` (broker/admin/remote_store.py's
MetadataView) over a compacted topic: it begins with a restatement, which proves it
complete and is folded; later restatements are skipped as the brokers skip them."""

from __future__ import annotations

import dataclasses

from broker.admin.remote_store import MetadataView
from storage.remote import rlmm_compaction
from storage.remote.rlmm_api import restatement_key
from storage.remote.rlmm_serde import serialize
from tests.storage.remote.test_rlmm import NUM_PARTITIONS, A, S, segment, update


def finished(n: int):
    md = segment(A, n, n * 100, n * 100 + 99)
    return md, update(md, S.COPY_SEGMENT_FINISHED)


def test_a_view_beginning_with_a_restatement_is_complete():
    (one, _), (two, two_done) = finished(1), finished(2)
    done = dataclasses.replace(one, state=S.COPY_SEGMENT_FINISHED)
    restated = rlmm_compaction.restatement_values([([done], None)])
    view = MetadataView({}, NUM_PARTITIONS)
    view.start(NUM_PARTITIONS, {0: 40, 3: 0})
    assert not view.complete  # partition 0 does not start at 0: not proven yet
    for i, value in enumerate(restated):
        view.fold(0, 40 + i, restatement_key(40, len(restated)), value)
    assert view.complete
    view.fold(0, 42, None, serialize(two))
    view.fold(0, 43, None, serialize(two_done))
    # A later restatement (say a compaction whose log start did not move yet) says
    # nothing new: skipped, not refused.
    later = rlmm_compaction.restatement_values([([done], None)])
    for i, value in enumerate(later):
        view.fold(0, 44 + i, restatement_key(44, len(later)), value)
    assert view.dropped == 0
    assert [md.remote_log_segment_id for md in view.segments()] == [
        one.remote_log_segment_id, two.remote_log_segment_id]
    assert all(md.state == S.COPY_SEGMENT_FINISHED for md in view.segments())


def test_a_view_beginning_elsewhere_above_zero_is_incomplete():
    md, md_done = finished(1)
    view = MetadataView({}, NUM_PARTITIONS)
    view.start(NUM_PARTITIONS, {0: 7})
    view.fold(0, 7, None, serialize(md_done))  # retention removed its COPY_SEGMENT_STARTED
    # A restatement further on does not prove what came before it complete.
    view.fold(0, 8, restatement_key(8, 1), serialize(md))
    assert not view.complete and view.dropped == 1
