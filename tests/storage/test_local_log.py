"""LocalLog on its own: segments, append, roll, read bounds, recovery, truncation, flush.

Offsets are assigned here by hand, as the log view (``storage.log.log``) does
before it hands batches to the local log; the view's behaviour through the
same code is in ``test_log.py``.
"""

from __future__ import annotations

import os

import pytest

from protocol import records
from storage.log.local_log import LocalLog, StaleSegments
from tests.helpers import T0, FakeClock, batch, decode_all, log_config

HUGE = 1 << 30


class Env:
    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        self.dir = str(tmp_path / "topic-0")
        os.makedirs(self.dir)
        self.clock = FakeClock()
        self.opened: list[LocalLog] = []

    def open(self, recovery_point: int = 0, clean_shutdown: bool = False,
             **config: object) -> tuple[LocalLog, list[int]]:
        """A loaded LocalLog (one empty segment at 0 if there were none) and
        the base offsets of the segments its load re-validated."""
        local = LocalLog(self.dir, "topic", 0, log_config(**config), self.clock)
        recovered = local.load(recovery_point, clean_shutdown)
        if not local.segments:
            local.add_segment(0)
        self.opened.append(local)
        return local, [s.base_offset for s in recovered]


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    for local in e.opened:
        local.close()


def append(local: LocalLog, values: list[bytes], timestamp: int = T0) -> int:
    """Append one batch at the log end, offsets assigned; returns its first offset."""
    data = batch(values, timestamp=timestamp)
    headers = records.validate_for_append(data, HUGE)
    first = local.end_offset
    records.assign_offsets(data, headers, first, 0, None)
    local.append(data, headers)
    return first


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_all(data)]


def test_a_new_log_is_one_empty_segment(env):
    local, recovered = env.open()
    assert recovered == []
    assert [s.base_offset for s in local.segments] == [0]
    assert (local.base_offset, local.end_offset, local.size) == (0, 0, 0)


def test_append_roll_and_read_across_segments(env):
    local, _ = env.open()
    append(local, [b"a", b"b"])
    assert local.roll(local.end_offset) is local.active
    append(local, [b"c"])
    assert [s.base_offset for s in local.segments] == [0, 2]
    assert offsets(local.read(0, HUGE, local.end_offset, True, False)) == [0, 1]
    assert offsets(local.read(2, HUGE, local.end_offset, True, False)) == [2]
    assert [s.base_offset for s in local.segments_from(1)] == [0, 2]
    assert [s.base_offset for s in local.segments_from(2)] == [2]
    assert [(s.base_offset, b.base_offset) for s, b in local.batches_from(0)] == [(0, 0), (2, 2)]
    assert [(s.base_offset, b.base_offset) for s, b in local.batches_from(2)] == [(2, 2)]


def test_read_never_returns_a_batch_at_or_past_the_upper_bound(env):
    local, _ = env.open()
    for v in (b"a", b"b", b"c"):
        append(local, [v])
    assert offsets(local.read(0, HUGE, 2, True, False)) == [0, 1]
    assert local.read(2, HUGE, 2, True, False) == b""
    assert local.read(3, HUGE, local.end_offset, True, False) == b""


def test_read_over_budget_returns_nothing_without_min_one_batch(env):
    local, _ = env.open()
    append(local, [b"x" * 100])
    append(local, [b"y"])
    assert local.read(0, 10, local.end_offset, False, False) == b""
    assert offsets(local.read(0, 10, local.end_offset, True, False)) == [0]


def test_roll_seals_the_previous_segment_with_its_largest_timestamp(env):
    # The time index is sparse (an entry per index.interval.bytes): a small segment
    # has none until the roll writes its largest timestamp.
    local, _ = env.open()
    append(local, [b"a"], timestamp=T0 + 5)
    append(local, [b"b"], timestamp=T0 + 9)
    first = local.active
    assert list(first.time_index.timestamps) == []
    local.roll(local.end_offset)
    assert list(first.time_index.timestamps) == [T0 + 9]
    assert list(first.time_index.offsets) == [1]


def test_roll_at_the_base_of_an_empty_active_segment_is_none(env):
    local, _ = env.open()
    assert local.roll(0) is None
    append(local, [b"a"])
    seg = local.roll(1)
    assert seg is not None and local.roll(1) is None and local.active is seg


def test_roll_due_by_size_age_and_compaction_lag(env):
    local, _ = env.open(segment_bytes=1_000, segment_ms=60_000)
    headers = records.validate_for_append(batch([b"a"]), HUGE)
    assert not local.roll_due(2_000, headers, T0, 0)  # an empty segment never rolls
    append(local, [b"a"])
    assert not local.roll_due(10, headers, T0, 1)
    assert local.roll_due(1_000, headers, T0, 1)
    assert local.roll_due(10, headers, T0 + 60_001, 1)
    assert local.roll_due(10, headers, T0, 2**31)  # relative offsets would overflow
    local.config = log_config(segment_ms=60_000, cleanup_policy=("compact",),
                              max_compaction_lag_ms=1_000)
    assert local.roll_due(10, headers, T0 + 1_001, 1)


def test_load_re_validates_only_what_the_recovery_point_does_not_cover(env):
    local, _ = env.open(index_interval_bytes=0)
    for v in (b"a", b"b"):
        append(local, [v])
    local.roll(local.end_offset)
    for v in (b"c", b"d"):  # two batches a segment: the second is indexed
        append(local, [v])
    local.close()
    assert env.open(recovery_point=2, index_interval_bytes=0)[1] == [2]
    env.opened.pop().close()
    assert env.open(recovery_point=0, index_interval_bytes=0)[1] == [0, 2]
    env.opened.pop().close()
    again, recovered = env.open(clean_shutdown=True, index_interval_bytes=0)
    assert recovered == [] and again.end_offset == 4


def test_load_drops_the_segments_after_a_torn_one(env):
    local, _ = env.open()
    append(local, [b"a"])
    append(local, [b"b"])
    torn = local.active
    local.roll(local.end_offset)
    append(local, [b"c"])
    path, size = torn.log_path, torn.size
    local.close()
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    again, recovered = env.open()
    assert recovered == [0]
    assert [s.base_offset for s in again.segments] == [0]
    assert again.end_offset == 1


def test_truncate_to_drops_later_segments_and_lowers_the_recovery_point(env):
    local, _ = env.open()
    for v in (b"a", b"b", b"c"):
        append(local, [v])
        local.roll(local.end_offset)
    local.recovery_point = 3
    local.truncate_to(1)
    assert [s.base_offset for s in local.segments] == [0]
    assert (local.end_offset, local.recovery_point, local.truncated_below) == (1, 1, 1)


def test_truncate_fully_and_start_at(env):
    local, _ = env.open()
    append(local, [b"a", b"b"])
    old = local.active.log_path
    local.truncate_fully_and_start_at(10)
    assert not os.path.exists(old)
    assert [s.base_offset for s in local.segments] == [10]
    assert (local.end_offset, local.recovery_point, local.truncated_below) == (10, 10, 0)


def test_remove_first_segment_deletes_its_files(env):
    local, _ = env.open()
    append(local, [b"a"])
    local.roll(local.end_offset)
    append(local, [b"b"])
    gone = local.remove_first_segment()
    assert not os.path.exists(gone.log_path)
    assert local.base_offset == 1
    assert offsets(local.read(1, HUGE, local.end_offset, True, False)) == [1]


def test_replace_segments_refuses_segments_no_longer_the_logs(env):
    local, _ = env.open()
    append(local, [b"a"])
    local.roll(local.end_offset)
    append(local, [b"b"])
    first = local.segments[0]
    local.remove_first_segment()
    with pytest.raises(StaleSegments):
        local.replace_segments([first], 0)


def test_offset_for_timestamp_starts_at_the_given_offset(env):
    local, _ = env.open()
    for i in range(4):
        append(local, [b"v"], timestamp=T0 + 10 * i)
    assert local.offset_for_timestamp(T0 + 15, 0) == (2, T0 + 20)
    assert local.offset_for_timestamp(T0, 3) == (3, T0 + 30)
    assert local.offset_for_timestamp(T0 + 31, 0) is None
    assert local.max_timestamp_offset(0) == (3, T0 + 30)


async def test_flush_fsyncs_and_moves_the_recovery_point(env):
    local, _ = env.open(flush_messages=2)
    append(local, [b"a"])
    assert not local.flush_due(env.clock())
    append(local, [b"b"])
    assert local.flush_due(env.clock())
    await local.flush()
    assert local.recovery_point == 2 and not local.flush_due(env.clock())
    local.roll(local.end_offset)
    assert local.flush_due(env.clock())  # a roll asks for a flush of the closed segment
