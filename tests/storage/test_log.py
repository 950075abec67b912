"""Log: appends and reads across segments, retention, truncation, timestamps, recovery."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.epoch_cache import FILE_NAME as EPOCH_FILE
from storage.log.log import Log
from tests.helpers import LogEnv, batch, decode_all, log_config

HUGE = 1 << 30


@pytest.fixture
def env(tmp_path):
    e = LogEnv(tmp_path)
    yield e
    for lg in e.opened:
        lg.close()


def produce(lg: Log, values, epoch: int = 0, **kw):
    kw.setdefault("timestamp", lg._clock())
    return lg.append_as_leader(batch(values, **kw), epoch)


def fill(lg: Log, count: int, per_batch: int = 2, size: int = 20) -> list[bytes]:
    """``count`` batches of ``per_batch`` records; returns the values in offset order."""
    values = []
    for i in range(count):
        vals = [f"{i:04d}-{k}".encode().ljust(size, b".") for k in range(per_batch)]
        produce(lg, vals)
        values.extend(vals)
    return values


def read_all(lg: Log, start: int | None = None, max_offset: int | None = None,
             max_bytes: int = HUGE) -> list[records.Record]:
    """Everything from ``start`` to the end (or max_offset), each read checked for corruption."""
    offset = lg.log_start_offset if start is None else start
    out: list[records.Record] = []
    while True:
        got = lg.read(offset, max_bytes, max_offset)
        if not got.data:
            return out
        recs = [r for r in decode_all(got.data) if r.offset >= offset]
        assert recs and recs[0].offset == offset, "read skipped or repeated offsets"
        out.extend(recs)
        offset = recs[-1].offset + 1


def _error(fn, *args, **kw) -> ErrorCode:
    with pytest.raises(KafkaApiError) as info:
        fn(*args, **kw)
    return info.value.code


# -- append and read -------------------------------------------------------------


def test_empty_log(env):
    lg = env.open()
    assert (lg.log_start_offset, lg.end_offset, lg.size) == (0, 0, 0)
    assert lg.read(0, 100).data == b""
    assert env.files(".log") == ["00000000000000000000.log"]


def test_append_assigns_offsets(env):
    lg = env.open()
    r1 = produce(lg, [b"a", b"b", b"c"], epoch=2)
    r2 = produce(lg, [b"d"], epoch=2)
    assert (r1.first_offset, r1.last_offset, r2.first_offset, r2.last_offset) == (0, 2, 3, 3)
    assert r1.log_append_time == -1 and r1.log_start_offset == 0
    assert lg.end_offset == 4
    recs = read_all(lg)
    assert [(r.offset, r.value) for r in recs] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    header = records.parse_header(lg.read(0, HUGE).data, 0)
    assert header.leader_epoch == 2


def test_append_and_read_across_segment_rolls(env):
    lg = env.open(config={"segment_bytes": 600, "index_interval_bytes": 64})
    values = fill(lg, 60)
    assert len(lg.segments) >= 6
    assert all(s.size <= 600 for s in lg.segments)
    for prev, nxt in zip(lg.segments, lg.segments[1:], strict=False):
        assert nxt.base_offset == prev.last_offset + 1
    assert env.files(".log") == [f"{s.base_offset:020d}.log" for s in lg.segments]
    assert any(len(s.index) for s in lg.segments)  # lookups go through the offset index
    recs = read_all(lg)
    assert [r.offset for r in recs] == list(range(120))
    assert [r.value for r in recs] == values
    for offset in range(120):  # every offset, with a one-byte budget: its own batch
        (h,) = records.iter_headers(lg.read(offset, 1).data)
        assert h.base_offset <= offset <= h.last_offset


def test_read_stops_at_max_offset(env):
    lg = env.open(config={"segment_bytes": 400})
    fill(lg, 20)  # offsets 0..39 in two-record batches, several segments
    for hw in (0, 2, 10, 24, 40):
        recs = read_all(lg, 0, max_offset=hw)
        assert [r.offset for r in recs] == list(range(hw))
    assert lg.read(10, HUGE, max_offset=10).data == b""
    assert lg.read(12, HUGE, max_offset=10).data == b""  # above the HW but below LEO: empty


def test_read_min_one_batch(env):
    lg = env.open()
    produce(lg, [b"x" * 500])
    produce(lg, [b"y"])
    got = lg.read(0, 10, min_one_batch=True)
    assert [r.offset for r in decode_all(got.data)] == [0]
    assert lg.read(0, 10, min_one_batch=False).data == b""


def test_read_without_min_one_batch_never_skips_a_batch(env):
    # The batch at the requested offset is too big for the budget and ends its segment;
    # the read must come back empty, not with the next segment's batch (the consumer
    # would silently skip offset 0). Fetch passes min_one_batch=False for every
    # partition after the first one that returned data.
    lg = env.open(config={"segment_bytes": 300})
    produce(lg, [b"x" * 400])
    produce(lg, [b"y"])
    assert len(lg.segments) == 2
    got = lg.read(0, 150, min_one_batch=False)
    assert [r.offset for r in decode_all(got.data)] in ([], [0])


def test_read_at_log_end_is_empty_and_beyond_is_out_of_range(env):
    lg = env.open()
    fill(lg, 3)
    assert lg.read(6, HUGE).data == b""
    assert _error(lg.read, 7, HUGE) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _error(lg.read, -1, HUGE) == ErrorCode.OFFSET_OUT_OF_RANGE


def test_invalid_produce_is_rejected_and_nothing_is_written(env):
    lg = env.open(config={"max_message_bytes": 200})
    bad = batch([b"v"])
    bad[-1] ^= 1
    assert _error(lg.append_as_leader, bad, 0) == ErrorCode.CORRUPT_MESSAGE
    assert _error(lg.append_as_leader, batch([b"v" * 300]), 0) == ErrorCode.MESSAGE_TOO_LARGE
    assert lg.end_offset == 0 and lg.size == 0


def test_timestamps_outside_the_window_are_invalid(env):
    lg = env.open(config={"timestamp_before_max_ms": 1000, "timestamp_after_max_ms": 500})
    now = env.clock.now
    produce(lg, [b"ok"], timestamp=now - 1000)
    produce(lg, [b"ok"], timestamp=now + 500)
    produce(lg, [b"no timestamp"], timestamp=-1)
    assert _error(produce, lg, [b"old"], timestamp=now - 1001) == ErrorCode.INVALID_TIMESTAMP
    assert _error(produce, lg, [b"future"], timestamp=now + 501) == ErrorCode.INVALID_TIMESTAMP


def test_log_append_time(env):
    lg = env.open(config={"log_append_time": True})
    result = produce(lg, [b"a", b"b"], timestamp=5)
    assert result.log_append_time == env.clock.now
    data = lg.read(0, HUGE).data
    h = records.parse_header(data, 0)
    assert h.max_timestamp == env.clock.now and h.attributes & records.ATTR_LOG_APPEND_TIME
    assert records.crc_ok(data, h)


def test_append_as_follower_keeps_offsets(env):
    lg = env.open()
    data = bytearray(records.build_batch([(None, b"a"), (None, b"b")], base_offset=0,
                                         leader_epoch=3, timestamp=env.clock.now))
    data += records.build_batch([(None, b"c")], base_offset=2, leader_epoch=4,
                                timestamp=env.clock.now)
    assert lg.append_as_follower(data) == 3
    assert lg.epochs.entries == [(3, 0), (4, 2)]
    old = bytearray(records.build_batch([(None, b"z")], base_offset=1))
    assert _error(lg.append_as_follower, old) == ErrorCode.CORRUPT_MESSAGE
    assert [r.value for r in read_all(lg)] == [b"a", b"b", b"c"]


def test_truncating_at_the_log_end_drops_an_epoch_with_no_records(env):
    """A leader assigns its epoch at the log end on taking the lead; if it loses
    the lead before an append, truncating to the log end (the new leader's
    divergence answer) drops that empty epoch, as Kafka does; otherwise the
    follower keeps naming it as its last fetched epoch and diverges forever."""
    lg = env.open()
    produce(lg, [b"a"], epoch=0)
    lg.epochs.assign(1, lg.end_offset)  # led epoch 1, wrote nothing
    assert lg.epochs.entries == [(0, 0), (1, 1)]
    lg.truncate_to(1)
    assert lg.epochs.entries == [(0, 0)] and lg.end_offset == 1
    assert [r.value for r in read_all(lg)] == [b"a"]


# -- rolling ---------------------------------------------------------------------------


def test_roll_by_segment_ms(env):
    lg = env.open(config={"segment_ms": 60_000})
    produce(lg, [b"a"])
    env.clock.advance(59_000)
    produce(lg, [b"b"])
    assert len(lg.segments) == 1
    env.clock.advance(2_000)
    produce(lg, [b"c"])
    assert [s.base_offset for s in lg.segments] == [0, 2]


def test_roll_by_segment_ms_survives_a_clean_restart(env):
    # Kafka rolls by the first batch's timestamp (LogSegment.rollingBasedTimestamp, loaded
    # again after a restart), not by when the broker reopened the segment.
    lg = env.open(config={"segment_ms": 60_000, "index_interval_bytes": 0})
    produce(lg, [b"a"])
    produce(lg, [b"b"])  # indexed, so the clean restart trusts the indexes
    env.clock.advance(50_000)
    lg = env.reopen(lg, clean_shutdown=True)
    env.clock.advance(20_000)  # 70 s after the first batch
    produce(lg, [b"c"])
    assert [s.base_offset for s in lg.segments] == [0, 2]


def test_roll_when_offset_index_is_full(env):
    # 24 bytes: 3 offset-index entries (2 time-index entries; equal timestamps use one).
    lg = env.open(config={"segment_index_bytes": 24, "index_interval_bytes": 0})
    fill(lg, 6, per_batch=1)  # every batch after a segment's first is indexed
    assert [s.base_offset for s in lg.segments] == [0, 4]
    assert list(lg.segments[0].index.offsets) == [1, 2, 3]
    assert [r.offset for r in read_all(lg)] == list(range(6))


def test_roll_before_relative_offsets_overflow(env):
    lg = env.open()
    far = 3_000_000_000  # more than 2**31 - 1 above the segment's base offset
    lg.append_as_follower(bytearray(records.build_batch([(None, b"a")], base_offset=0,
                                                        timestamp=env.clock.now)))
    lg.append_as_follower(bytearray(records.build_batch([(None, b"b")], base_offset=far,
                                                        timestamp=env.clock.now)))
    assert [s.base_offset for s in lg.segments] == [0, far]
    assert lg.end_offset == far + 1
    assert [r.value for r in decode_all(lg.read(far, HUGE).data)] == [b"b"]


def test_explicit_roll(env):
    lg = env.open()
    fill(lg, 2)
    seg = lg.roll()
    assert seg.base_offset == 4 and lg.active is seg
    assert lg.roll() is seg  # an empty active segment at LEO is reused
    produce(lg, [b"x"])
    assert [r.offset for r in read_all(lg)] == [0, 1, 2, 3, 4]


# -- retention, DeleteRecords, truncation ---------------------------------------------------


def test_retention_by_bytes_deletes_whole_segments(env):
    lg = env.open(config={"segment_bytes": 400, "retention_bytes": 1000})
    fill(lg, 30)
    before = list(lg.segments)
    deleted = lg.apply_retention(high_watermark=lg.end_offset)
    assert deleted > 0
    assert lg.segments == before[deleted:]
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert lg.size - lg.segments[0].size < 1000 <= lg.size  # Kafka's rule, to the segment
    for seg in before[:deleted]:
        assert not os.path.exists(seg.log_path) and not os.path.exists(seg.index.path)
    assert _error(lg.read, lg.log_start_offset - 1, HUGE) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert read_all(lg)[0].offset == lg.log_start_offset
    assert lg.apply_retention(lg.end_offset) == 0


def test_retention_by_time(env):
    lg = env.open(config={"segment_bytes": 400, "retention_ms": 10_000})
    fill(lg, 10)  # offsets 0..19
    env.clock.advance(6_000)
    values = fill(lg, 10)  # offsets 20..39
    assert lg.apply_retention(lg.end_offset) == 0
    expired = [s for s in lg.segments if s.last_offset < 20]
    assert 0 < len(expired) < len(lg.segments)
    env.clock.advance(5_000)  # the first ten batches are now 11 s old, the rest 5 s
    assert lg.apply_retention(lg.end_offset) == len(expired)
    assert lg.segments[0].last_offset >= 20
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert [r.value for r in read_all(lg)][-20:] == values


def test_retention_never_passes_the_high_watermark(env):
    lg = env.open(config={"segment_bytes": 400, "retention_bytes": 0})
    fill(lg, 20)
    hw = lg.segments[2].base_offset + 1
    lg.apply_retention(high_watermark=hw)
    assert lg.segments[0].last_offset >= hw
    assert lg.log_start_offset <= hw


def test_retention_of_an_expired_active_segment_rolls_it(env):
    lg = env.open(config={"retention_ms": 1_000})
    fill(lg, 3)
    env.clock.advance(2_000)
    assert lg.apply_retention(lg.end_offset) == 1
    assert lg.log_start_offset == lg.end_offset == 6
    assert lg.read(6, HUGE).data == b""
    assert produce(lg, [b"next"]).first_offset == 6


def test_retention_by_time_after_a_clean_restart(env):
    lg = env.open(config={"segment_bytes": 400, "retention_ms": 10_000,
                          "index_interval_bytes": 0})  # indexed: the restart trusts them
    fill(lg, 20)
    count = len(lg.segments)
    lg = env.reopen(lg, clean_shutdown=True)
    env.clock.advance(20_000)  # every record is 20 s old
    assert lg.apply_retention(lg.end_offset) == count
    assert lg.log_start_offset == lg.end_offset == 40


def test_no_retention_without_delete_policy(env):
    lg = env.open(config={"segment_bytes": 400, "retention_bytes": 0,
                          "cleanup_policy": ("compact",)})
    for _ in range(20):
        produce(lg, [b"x" * 20, b"y" * 20], keys=[b"a", b"b"])
    assert lg.apply_retention(lg.end_offset) == 0


# KIP-950 / KAFKA-17236: a tiered topic with remote.log.copy.disable=true
# applies the total retention (retention.*) to its local segments, tiered or
# not; local.retention.* only applies while copying is on.
TIERED_COPY_OFF = {"segment_bytes": 400, "remote_storage_enable": True,
                   "remote_copy_disable": True, "local_retention_bytes": 1,
                   "local_retention_ms": 1}


def test_copy_disabled_deletes_untiered_local_segments_by_retention_bytes(env):
    lg = env.open(config={**TIERED_COPY_OFF, "retention_bytes": 1000})
    fill(lg, 10)
    lg.highest_tiered_offset = lg.segments[1].last_offset  # two segments were tiered
    fill(lg, 30)  # copying is off: the rest is local only
    before = list(lg.segments)
    deleted = lg.apply_retention(high_watermark=lg.end_offset)
    assert deleted > 2, "untiered local segments must go by retention.bytes"
    assert lg.segments == before[deleted:]
    assert lg.size - lg.segments[0].size < 1000 <= lg.size
    # Local-only data was deleted: what the tier holds below it is no longer
    # contiguous with the log, so the log starts at the first local offset.
    assert lg.log_start_offset == lg.local_log_start_offset == lg.segments[0].base_offset
    assert lg.apply_retention(lg.end_offset) == 0


def test_copy_disabled_deletes_by_retention_ms_not_local_retention(env):
    lg = env.open(config={**TIERED_COPY_OFF, "retention_ms": 10_000})
    fill(lg, 10)  # offsets 0..19
    lg.highest_tiered_offset = lg.segments[0].last_offset
    env.clock.advance(6_000)
    values = fill(lg, 10)  # offsets 20..39
    # local.retention.ms=1 would delete the tiered segment; retention.ms keeps it.
    assert lg.apply_retention(lg.end_offset) == 0
    expired = [s for s in lg.segments if s.last_offset < 20]
    env.clock.advance(5_000)
    assert lg.apply_retention(lg.end_offset) == len(expired)
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert [r.value for r in read_all(lg)][-20:] == values


def test_copy_disabled_deleting_only_tiered_segments_keeps_the_log_start(env):
    lg = env.open(config={**TIERED_COPY_OFF, "retention_ms": 10_000})
    fill(lg, 10)
    tiered = [s for s in lg.segments[:-1]]
    lg.highest_tiered_offset = tiered[-1].last_offset
    env.clock.advance(11_000)
    fill(lg, 10)
    assert lg.apply_retention(lg.end_offset) == len(tiered)
    # The deleted segments are in the remote tier: the log still starts there.
    assert lg.log_start_offset == 0
    assert lg.local_log_start_offset == tiered[-1].last_offset + 1


def test_copy_disabled_never_deletes_past_the_high_watermark(env):
    lg = env.open(config={**TIERED_COPY_OFF, "retention_bytes": 0})
    fill(lg, 20)
    hw = lg.segments[2].base_offset + 1
    lg.apply_retention(high_watermark=hw)
    assert lg.segments[0].last_offset >= hw
    assert lg.log_start_offset <= hw


def test_copy_enabled_keeps_untiered_segments_whatever_retention_says(env):
    lg = env.open(config={**TIERED_COPY_OFF, "remote_copy_disable": False,
                          "retention_bytes": 0, "retention_ms": 0})
    fill(lg, 20)
    env.clock.advance(1_000)
    assert lg.apply_retention(lg.end_offset) == 0
    assert lg.log_start_offset == 0


def test_delete_records(env):
    lg = env.open(config={"segment_bytes": 400})
    fill(lg, 20)
    third = lg.segments[2].base_offset
    assert lg.delete_records(third + 1, high_watermark=lg.end_offset) == third + 1
    assert lg.segments[0].base_offset == third  # wholly deleted segments are gone
    assert _error(lg.read, third, HUGE) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert read_all(lg)[0].offset == third + 1
    assert lg.delete_records(2, lg.end_offset) == third + 1  # never moves backwards
    assert _error(lg.delete_records, lg.end_offset + 1, lg.end_offset) == \
        ErrorCode.OFFSET_OUT_OF_RANGE


def test_delete_records_to_the_end(env):
    lg = env.open(config={"segment_bytes": 400})
    fill(lg, 20)
    lg.delete_records(40, high_watermark=40)
    assert lg.log_start_offset == 40 and len(lg.segments) == 1
    assert lg.read(40, HUGE).data == b""
    assert produce(lg, [b"z"]).first_offset == 40


def test_truncate_to_across_segments(env):
    lg = env.open(config={"segment_bytes": 400})
    values = fill(lg, 20)
    lg.truncate_to(40)  # at or past the end: nothing
    assert lg.end_offset == 40
    target = lg.segments[1].base_offset + 4
    removed = [s for s in lg.segments if s.base_offset >= target]
    lg.truncate_to(target)
    assert lg.end_offset == target
    assert [r.value for r in read_all(lg)] == values[:target]
    for seg in removed:
        assert not os.path.exists(seg.log_path)
    assert produce(lg, [b"new"]).first_offset == target
    assert read_all(lg)[-1].value == b"new"


def test_truncate_everything(env):
    lg = env.open(config={"segment_bytes": 400})
    fill(lg, 10)
    lg.truncate_to(0)
    assert lg.end_offset == 0 and lg.size == 0
    assert produce(lg, [b"a"]).first_offset == 0


def test_truncate_below_the_local_log_start_of_a_tiered_log(env):
    # A diverged follower freed its tiered segments (local start 30), then the
    # new leader says its epoch ended at 12: it must end up empty at 12, not
    # keep a log end of 30 (the leader would answer the same divergence forever).
    lg = env.open(config={"segment_bytes": 400, "remote_storage_enable": True})
    fill(lg, 20)
    local_start = lg.segments[-2].base_offset
    while lg.segments[0].base_offset < local_start:  # tiered, freed by local retention
        lg.remove_first_segment()
    assert lg.local_log_start_offset == local_start > 12

    lg.truncate_to(12)

    assert (lg.log_start_offset, lg.local_log_start_offset, lg.end_offset) == (0, 12, 12)
    assert lg.epochs.entries == [] and lg.size == 0
    assert produce(lg, [b"x"]).first_offset == 12


def test_a_tiered_log_start_moves_back_only_down_to_its_local_start(env):
    # Rebuilt remote metadata: the start goes back below the local log, never
    # above what it is, never above the local start, never on an untiered log.
    lg = env.open(config={"segment_bytes": 400, "remote_storage_enable": True})
    fill(lg, 20)
    local_start = lg.segments[-2].base_offset
    lg.advance_log_start_offset(local_start)
    assert lg.log_start_offset == local_start

    assert not lg.lower_log_start_offset(local_start + 1)
    assert not lg.lower_log_start_offset(-1)
    assert lg.lower_log_start_offset(3)
    assert (lg.log_start_offset, lg.local_log_start_offset) == (3, local_start)
    assert not lg.lower_log_start_offset(3)

    lg.config = dataclasses.replace(lg.config, remote_storage_enable=False)
    assert not lg.lower_log_start_offset(0) and lg.log_start_offset == 3


# -- timestamps ------------------------------------------------------------------------


def _timestamped_log(env, **cfg) -> Log:
    lg = env.open(config={"segment_bytes": 200, **cfg})  # two batches per segment
    t = env.clock.now
    # offsets 0..9: two records per batch, timestamps not monotonic inside batches
    for i in range(5):
        produce(lg, [b"a", b"b"], timestamps=[t + 100 * i + 50, t + 100 * i])
    return lg


def test_offset_for_timestamp(env):
    lg = _timestamped_log(env)
    t = env.clock.now
    assert len(lg.segments) > 1
    assert lg.offset_for_timestamp(0) == (0, t + 50)
    assert lg.offset_for_timestamp(t + 50) == (0, t + 50)
    assert lg.offset_for_timestamp(t + 51) == (2, t + 150)
    assert lg.offset_for_timestamp(t + 100) == (2, t + 150)
    assert lg.offset_for_timestamp(t + 450) == (8, t + 450)
    assert lg.offset_for_timestamp(t + 451) is None


def test_offset_for_timestamp_respects_log_start(env):
    lg = _timestamped_log(env)
    lg.delete_records(3, lg.end_offset)
    assert lg.offset_for_timestamp(0) == (3, env.clock.now + 100)


def test_max_timestamp_offset(env):
    lg = _timestamped_log(env)
    assert lg.max_timestamp_offset() == (8, env.clock.now + 450)
    empty = Log.open(env.dir + "-empty", "t", 1, log_config(), env.clock)
    env.opened.append(empty)
    assert empty.max_timestamp_offset() is None


def test_offset_for_timestamp_with_log_append_time(env):
    lg = env.open(config={"log_append_time": True})
    produce(lg, [b"a", b"b"], timestamp=1)
    env.clock.advance(10)
    produce(lg, [b"c"], timestamp=2)
    assert lg.offset_for_timestamp(env.clock.now - 5) == (2, env.clock.now)
    assert lg.max_timestamp_offset() == (2, env.clock.now)


def test_timestamp_lookups_after_a_clean_restart(env):
    lg = _timestamped_log(env, index_interval_bytes=0)  # indexed: the restart trusts them
    lg = env.reopen(lg, clean_shutdown=True)
    t = env.clock.now
    assert lg.offset_for_timestamp(t + 51) == (2, t + 150)
    assert lg.max_timestamp_offset() == (8, t + 450)


# -- reopening --------------------------------------------------------------------------------


def test_reopen_after_clean_shutdown(env):
    lg = env.open(config={"segment_bytes": 400, "index_interval_bytes": 64})
    values = fill(lg, 30)
    lg.delete_records(5, lg.end_offset)
    bases = [s.base_offset for s in lg.segments]
    indexes = [(list(s.index.offsets), list(s.index.positions)) for s in lg.segments]
    lg = env.reopen(lg, clean_shutdown=True, log_start_offset=5, recovery_point=60)
    assert [s.base_offset for s in lg.segments] == bases
    assert [(list(s.index.offsets), list(s.index.positions)) for s in lg.segments] == indexes
    assert (lg.log_start_offset, lg.end_offset, lg.recovery_point) == (5, 60, 60)
    assert [r.value for r in read_all(lg)] == values[5:]
    assert produce(lg, [b"more"]).first_offset == 60


def _segment_starts(lg: Log) -> list[tuple[int, int, int]]:
    """(segment index, batch position, batch end) of every batch."""
    out = []
    for i, seg in enumerate(lg.segments):
        for b in seg.iter_batches():
            out.append((i, b.position, b.position + b.size))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_unclean_reopen_with_torn_tail(env, seed):
    rng = random.Random(seed)
    lg = env.open(config={"segment_bytes": 1000, "index_interval_bytes": 100})
    values = fill(lg, rng.randrange(5, 40), per_batch=rng.randrange(1, 4))
    path, size = lg.active.log_path, lg.active.size
    batches = [(p, e) for i, p, e in _segment_starts(lg) if i == len(lg.segments) - 1]
    lg.close()
    cut = rng.randrange(0, size)
    with open(path, "r+b") as f:
        f.truncate(cut)
    whole = [e for _, e in batches if e <= cut]
    lg = env.open()
    recs = read_all(lg)
    kept = len(recs)
    assert [r.value for r in recs] == values[:kept]
    assert lg.end_offset == kept
    assert lg.active.size == (whole[-1] if whole else 0)
    assert os.path.getsize(path) == lg.active.size
    assert produce(lg, [b"after"]).first_offset == kept


def test_unclean_reopen_with_garbage_appended(env):
    lg = env.open()
    values = fill(lg, 10)
    path = lg.active.log_path
    lg.close()
    with open(path, "ab") as f:
        f.write(random.Random(1).randbytes(500))
    lg = env.open()
    assert [r.value for r in read_all(lg)] == values
    assert lg.end_offset == 20


def test_unclean_reopen_with_zeroed_preallocated_tail(env):
    lg = env.open()
    values = fill(lg, 10)
    path = lg.active.log_path
    lg.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)
    lg = env.open()
    assert [r.value for r in read_all(lg)] == values


def test_unclean_reopen_with_corrupt_byte_mid_log(env):
    lg = env.open(config={"segment_bytes": 600})
    values = fill(lg, 30)
    assert len(lg.segments) >= 3
    seg = lg.segments[1]
    batches = list(seg.iter_batches())
    damaged = batches[len(batches) // 2]
    path = seg.log_path
    lg.close()
    with open(path, "r+b") as f:
        f.seek(damaged.position + 70)
        byte = f.read(1)[0]
        f.seek(damaged.position + 70)
        f.write(bytes([byte ^ 0x01]))
    lg = env.open()
    recs = read_all(lg)
    assert [r.value for r in recs] == values[:damaged.base_offset]  # everything before survives
    assert lg.end_offset == damaged.base_offset
    assert len(lg.segments) == 2  # later segments cannot follow on and are dropped
    assert produce(lg, [b"x"]).first_offset == damaged.base_offset


def test_recovery_point_segments_are_trusted(env):
    lg = env.open(config={"segment_bytes": 600})
    values = fill(lg, 30)
    lg = env.reopen(lg, recovery_point=lg.end_offset)
    assert [r.value for r in read_all(lg)] == values


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_with_deleted_index(env, clean):
    lg = env.open(config={"index_interval_bytes": 64})
    values = fill(lg, 20)
    index_path = lg.active.index.path
    with open(index_path, "rb") as f:
        original = f.read()
    assert original
    lg.close()
    os.unlink(index_path)
    lg = env.open(clean_shutdown=clean)
    assert [r.value for r in read_all(lg)] == values
    for offset in range(40):
        (h,) = records.iter_headers(lg.read(offset, 1).data)
        assert h.base_offset <= offset <= h.last_offset
    with open(index_path, "rb") as f:
        assert f.read() == original  # rebuilt identically


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("damage", ["garbage", "partial", "reversed"])
def test_reopen_with_corrupt_index(env, clean, damage):
    lg = env.open(config={"index_interval_bytes": 64})
    values = fill(lg, 20)
    index_path = lg.active.index.path
    with open(index_path, "rb") as f:
        original = f.read()
    lg.close()
    if damage == "garbage":
        bad = random.Random(3).randbytes(len(original))
    elif damage == "partial":
        bad = original[:-3]
    else:
        entries = [original[i:i + 8] for i in range(0, len(original), 8)]
        bad = b"".join(reversed(entries))
    with open(index_path, "wb") as f:
        f.write(bad)
    lg = env.open(clean_shutdown=clean)
    assert [r.value for r in read_all(lg)] == values
    for offset in range(40):
        (h,) = records.iter_headers(lg.read(offset, 1).data)
        assert h.base_offset <= offset <= h.last_offset


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_with_deleted_time_index(env, clean):
    lg = _timestamped_log(env, index_interval_bytes=0)
    paths = [s.time_index.path for s in lg.segments]
    lg.close()
    for path in paths:
        os.unlink(path)
    lg = env.open(clean_shutdown=clean)
    t = env.clock.now
    assert lg.offset_for_timestamp(t + 51) == (2, t + 150)
    assert lg.max_timestamp_offset() == (8, t + 450)
    assert all(os.path.exists(p) for p in paths)


def test_leftover_temp_files_are_removed(env):
    lg = env.open()
    fill(lg, 2)
    lg.close()
    for name in ("x.tmp", "00000000000000000009.log.deleted", "a.swap", "b.cleaned"):
        with open(os.path.join(env.dir, name), "w") as f:
            f.write("junk")
    lg = env.open()
    assert not [n for n in os.listdir(env.dir) if n.endswith((".tmp", ".deleted", ".swap",
                                                              ".cleaned"))]
    assert lg.end_offset == 4


# -- leader epochs --------------------------------------------------------------------------


def test_epochs_are_recorded_and_persisted(env):
    lg = env.open()
    produce(lg, [b"a", b"b"], epoch=0)
    produce(lg, [b"c"], epoch=0)
    produce(lg, [b"d"], epoch=3)
    assert lg.epochs.entries == [(0, 0), (3, 3)]
    with open(os.path.join(env.dir, EPOCH_FILE)) as f:
        assert f.read() == "0\n2\n0 0\n3 3\n"
    lg = env.reopen(lg, clean_shutdown=True)
    assert lg.epochs.entries == [(0, 0), (3, 3)]
    assert lg.epochs.end_offset_for(0, lg.end_offset) == (0, 3)


def test_truncation_and_deletion_trim_epochs(env):
    lg = env.open(config={"segment_bytes": 400})
    for epoch in range(5):
        for _ in range(4):
            produce(lg, [b"v1", b"v2"], epoch=epoch)
    assert lg.epochs.entries == [(e, 8 * e) for e in range(5)]
    lg.truncate_to(24)
    assert lg.epochs.entries == [(0, 0), (1, 8), (2, 16)]
    lg.delete_records(10, lg.end_offset)
    assert lg.epochs.entries == [(1, 10), (2, 16)]


def test_epochs_rebuilt_from_recovered_segments(env):
    lg = env.open()
    produce(lg, [b"a"], epoch=1)
    produce(lg, [b"b"], epoch=4)
    lg.close()
    os.unlink(os.path.join(env.dir, EPOCH_FILE))
    lg = env.open()  # unclean: segments are recovered batch by batch
    assert lg.epochs.entries == [(1, 0), (4, 1)]


def test_epochs_beyond_a_torn_tail_are_dropped(env):
    lg = env.open()
    produce(lg, [b"a"], epoch=1)
    size = lg.active.size
    produce(lg, [b"b"], epoch=2)
    path = lg.active.log_path
    lg.close()
    with open(path, "r+b") as f:
        f.truncate(size + 10)
    lg = env.open()
    assert lg.end_offset == 1
    assert lg.epochs.entries == [(1, 0)]


# -- idempotent producers --------------------------------------------------------------------

PID = 777


def _idem(lg: Log, seq: int, n: int = 1, epoch: int = 0):
    return produce(lg, [f"s{seq + k}".encode() for k in range(n)], producer_id=PID,
                   producer_epoch=epoch, base_sequence=seq)


def test_duplicate_produce_returns_original_offsets(env):
    lg = env.open()
    first = _idem(lg, 0, 3)
    _idem(lg, 3, 2)
    retry = _idem(lg, 0, 3)
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert lg.end_offset == 5
    assert [r.value for r in read_all(lg)] == [b"s0", b"s1", b"s2", b"s3", b"s4"]


def test_sequence_gap_and_stale_epoch(env):
    lg = env.open()
    _idem(lg, 0, 3, epoch=2)
    assert _error(_idem, lg, 5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _error(_idem, lg, 5, epoch=2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _error(_idem, lg, 1, epoch=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert lg.end_offset == 3


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_rebuilt_after_reopen(env, clean):
    lg = env.open(config={"segment_bytes": 400})
    for seq in range(0, 30, 3):
        _idem(lg, seq, 3)
    lg = env.reopen(lg, clean_shutdown=clean)
    retry = _idem(lg, 27, 3)
    assert (retry.first_offset, retry.last_offset) == (27, 29)
    assert _error(_idem, lg, 31) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _idem(lg, 30).first_offset == 30


def test_follower_appends_update_producer_state(env):
    # A follower that becomes leader must recognise a producer's retry of a batch it
    # replicated (Kafka's appendAsFollower updates producer state too), or the retry is
    # appended a second time.
    lg = env.open()
    replicated = bytearray(records.build_batch(
        [(None, b"s0"), (None, b"s1"), (None, b"s2")], base_offset=0, leader_epoch=0,
        timestamp=env.clock.now, producer_id=PID, producer_epoch=0, base_sequence=0))
    lg.append_as_follower(replicated)
    retry = _idem(lg, 0, 3)
    assert (retry.first_offset, retry.last_offset) == (0, 2)
    assert lg.end_offset == 3


def test_producer_state_rebuilt_after_truncation(env):
    lg = env.open()
    for seq in range(0, 12, 3):
        _idem(lg, seq, 3)
    lg.truncate_to(6)
    assert _error(_idem, lg, 9) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _idem(lg, 6, 3).first_offset == 6


def test_idempotent_producer_continues_after_retention_and_restart(env):
    # Local retention removed every batch of the producer; after a restart the broker
    # has no state for it. Kafka keeps producer state in .snapshot files and, lacking
    # state, accepts any sequence; the producer's next batch must not be rejected.
    lg = env.open(config={"segment_bytes": 400, "retention_bytes": 0})
    for seq in range(0, 30, 3):
        _idem(lg, seq, 3)
    lg.roll()
    lg.apply_retention(lg.end_offset)
    assert lg.log_start_offset == lg.end_offset == 30
    lg = env.reopen(lg, clean_shutdown=True, log_start_offset=30)
    assert _idem(lg, 30).first_offset == 30


# -- flush (trio) --------------------------------------------------------------------------


async def test_flush_moves_the_recovery_point(env):
    lg = env.open(config={"flush_messages": 5})
    results = [produce(lg, [b"a"]) for _ in range(4)]
    assert not any(r.needs_flush for r in results)
    assert produce(lg, [b"a"]).needs_flush
    assert lg.recovery_point == 0
    await lg.flush()
    assert lg.recovery_point == lg.end_offset == 5
    assert not produce(lg, [b"a"]).needs_flush
    await lg.flush()
    assert lg.recovery_point == 6
    await lg.flush()  # nothing new: a no-op
    assert lg.recovery_point == 6


async def test_flush_due_by_time(env):
    lg = env.open(config={"flush_ms": 1_000})
    assert not produce(lg, [b"a"]).needs_flush
    env.clock.advance(1_000)
    assert produce(lg, [b"b"]).needs_flush
    await lg.flush()
    assert not produce(lg, [b"c"]).needs_flush


async def test_flushed_log_reopens_from_its_recovery_point(env):
    lg = env.open(config={"segment_bytes": 400})
    values = fill(lg, 20)
    await lg.flush()
    rp = lg.recovery_point
    lg = env.reopen(lg, recovery_point=rp)
    assert lg.recovery_point == rp == 40
    assert [r.value for r in read_all(lg)] == values


def test_log_start_checkpoint_beyond_recovered_end(env):
    # DeleteRecords moved the start to 20 and was checkpointed, then a crash tore the
    # unflushed tail. Kafka's LogLoader then deletes the segments and starts the log at
    # the checkpointed start offset; the start must never lie beyond the end.
    lg = env.open()
    fill(lg, 10)
    lg.delete_records(20, high_watermark=20)
    path, size = lg.active.log_path, lg.active.size
    lg.close()
    with open(path, "r+b") as f:
        f.truncate(size - 5)
    lg = env.open(log_start_offset=20)
    assert lg.log_start_offset <= lg.end_offset
    result = produce(lg, [b"after crash"])
    assert result.first_offset >= lg.log_start_offset
    assert [r.value for r in read_all(lg)] == [b"after crash"]
