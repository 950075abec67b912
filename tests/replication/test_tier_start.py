"""Where a rebuilt follower's local log restarts (``replication.tier_start``):
KIP-1023's last tiered offset + 1, KIP-405's earliest local offset, or nowhere."""

from __future__ import annotations

from replication.tier_start import UNKNOWN, LeaderBounds, restart_point

# A leader whose log starts at 0, keeps 80-99 locally (epoch 3 from 70) and has
# tiered up to 94: 95 is the first offset not uploaded.
LEADER = LeaderBounds(log_start=0, local_start=80, local_epoch=3, pending_upload=95,
                      pending_epoch=3)


def test_last_tiered_mode_restarts_after_the_tier_not_at_the_local_start():
    assert restart_point(LEADER, follower_end=0, last_tiered=True) == (95, 3)
    # Below the leader's local start (OFFSET_MOVED_TO_TIERED_STORAGE) as well.
    assert restart_point(LEADER, follower_end=40, last_tiered=True) == (95, 3)


def test_kip405_mode_restarts_at_the_local_start_and_only_below_it():
    assert restart_point(LEADER, follower_end=40, last_tiered=False) == (80, 3)
    assert restart_point(LEADER, follower_end=80, last_tiered=False) is None
    assert restart_point(LEADER, follower_end=0, last_tiered=False) == (80, 3)


def test_a_follower_holding_the_tiered_offsets_keeps_fetching():
    # Its own log reaches the tier's end or beyond: nothing worth dropping it for.
    assert restart_point(LEADER, follower_end=95, last_tiered=True) is None
    assert restart_point(LEADER, follower_end=97, last_tiered=True) is None


def test_an_unknown_tier_end_falls_back_to_the_local_start():
    unknown = LeaderBounds(0, 80, 3, UNKNOWN, UNKNOWN)
    assert restart_point(unknown, follower_end=10, last_tiered=True) == (80, 3)
    # An empty follower of a leader holding everything locally: plain fetching.
    assert restart_point(LeaderBounds(0, 0, 0), follower_end=0, last_tiered=True) is None


def test_nothing_tiered_above_the_log_start_means_nothing_to_rebuild():
    # Nothing uploaded yet: -6 is the log start.
    assert restart_point(LeaderBounds(30, 30, 1, 30, 1), follower_end=0,
                         last_tiered=True) is None
    # A pending offset below the local start (the log start moved past the
    # tier, e.g. DeleteRecords) never puts the follower below the leader's data.
    assert restart_point(LeaderBounds(50, 50, 2, 40, 1), follower_end=0,
                         last_tiered=True) is None
