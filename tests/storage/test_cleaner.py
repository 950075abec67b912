"""The log cleaner, after Kafka's LogCleanerTest: deduplication, tombstones,
compaction lags, transactions, a key map too small for one pass, grouping,
and the swap's crash safety.

Passes run the real ``CleaningPass`` code in this process (``InProcessWorker``
stands in for the worker process's pipe; ``system_tests/test_compaction.py``
runs the real process).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from config.broker import BrokerConfig
from protocol import control, records
from protocol.errors import ErrorCode, KafkaApiError
from protocol.record_filter import ATTR_DELETE_HORIZON
from storage.log import swap
from storage.log.cleaner import LogCleaner, cleanable_bounds
from storage.log.cleaner_pass import CleaningPass
from storage.log.cleaner_process import CleanerError
from storage.log.local_log import StaleSegments
from storage.log.log import Log
from storage.log.producer_state import AppendOrigin
from tests.helpers import T0, LogEnv, decode_all

HUGE = 1 << 30
DAY = 86_400_000


class InProcessWorker:
    """The worker process's commands, run here."""

    def __init__(self) -> None:
        self.current: CleaningPass | None = None

    async def call(self, method: str, *args: Any) -> Any:
        try:
            if method == "build_map":
                self.current = CleaningPass(*args)
                return self.current.build_map()
            if method == "clean_group":
                assert self.current is not None
                return self.current.clean_group(*args)
            self.current = None
            return None
        except Exception as exc:
            raise CleanerError(str(exc)) from exc


@pytest.fixture
def env(tmp_path):
    e = LogEnv(tmp_path)
    e.config.update(cleanup_policy=("compact",), segment_bytes=1024, min_cleanable_ratio=0.0)
    yield e
    for lg in e.opened:
        lg.close()


def make_cleaner(env: LogEnv, lg: Log, **broker: str) -> LogCleaner:
    cfg = BrokerConfig.from_mapping({"log.dir": os.path.dirname(env.dir), **broker})
    return LogCleaner(cfg, {("topic", 0): lg}, env.clock)


async def clean(env: LogEnv, lg: Log, cleaner: LogCleaner | None = None) -> bool:
    """One pass if the log is cleanable (everything committed); True if one ran."""
    cleaner = cleaner or make_cleaner(env, lg)
    picked = cleaner.grab_filthiest(lambda tp: lg.end_offset)
    if picked is None:
        return False
    await cleaner._clean(InProcessWorker(), picked)  # type: ignore[arg-type]
    return True


def put(lg: Log, pairs: list[tuple[bytes | None, bytes | None]], **kw: Any) -> int:
    data = bytearray(records.build_batch(pairs, timestamp=kw.pop("timestamp", lg._clock()), **kw))
    return lg.append_as_leader(data, 0, kw.pop("origin", AppendOrigin.CLIENT)).first_offset


def everything(lg: Log) -> list[records.Record]:
    out: list[records.Record] = []
    offset = lg.log_start_offset
    while True:
        data = lg.read(offset, HUGE).data
        if not data:
            return out
        recs = [r for r in decode_all(data) if r.offset >= offset]
        if not recs:
            return out
        out.extend(recs)
        offset = max(r.offset for r in recs) + 1
        headers = list(records.iter_headers(data))
        offset = max(offset, headers[-1].last_offset + 1)


def latest(recs: list[records.Record]) -> dict[bytes | None, tuple[int, bytes | None]]:
    out: dict[bytes | None, tuple[int, bytes | None]] = {}
    for r in recs:
        out[r.key] = (r.offset, r.value)
    return out


def roll(lg: Log) -> None:
    lg.roll()


async def test_keeps_last_value_per_key_at_its_offset(env):
    lg = env.open()
    for i in range(60):
        put(lg, [(f"k{i % 7}".encode(), f"v{i}".encode().ljust(40, b"."))])
    roll(lg)
    before = everything(lg)
    size_before = lg.size
    assert await clean(env, lg)
    after = everything(lg)
    assert latest(after) == latest(before)
    assert len(after) == 7
    offsets = [r.offset for r in after]
    assert offsets == sorted(offsets)
    assert lg.size < size_before
    assert lg.end_offset == 60
    # Indexes of the cleaned segments answer seeks: every kept offset reads back alone.
    for r in after:
        got = decode_all(lg.read(r.offset, 1, None).data)
        assert got and got[0].offset <= r.offset <= got[-1].offset
    # A fetch at a removed offset starts at the next kept record.
    removed = next(o for o in range(60) if o not in set(offsets))
    first = decode_all(lg.read(removed, HUGE).data)[0]
    assert first.offset == min(o for o in offsets if o >= removed)


async def test_replaced_segment_files_go_to_the_logs_deleter(env):
    discarded: list[str] = []
    lg = env.open(discard=discarded.extend)
    for i in range(60):
        put(lg, [(f"k{i % 7}".encode(), f"v{i}".encode().ljust(40, b"."))])
    roll(lg)
    assert await clean(env, lg)
    # Renamed aside, handed to the deleter (unlinked by its idle-class thread), not unlinked here.
    assert discarded and all(p.endswith(".deleted") and os.path.exists(p) for p in discarded)
    assert any(p.endswith(".log.deleted") for p in discarded)
    assert len(everything(lg)) == 7


async def test_reopened_cleaned_log_is_the_same(env):
    lg = env.open()
    for i in range(40):
        put(lg, [(f"k{i % 5}".encode(), f"v{i}".encode())])
    roll(lg)
    assert await clean(env, lg)
    after = everything(lg)
    lg2 = env.reopen(lg, clean_shutdown=False)
    assert [(r.offset, r.key, r.value) for r in everything(lg2)] == \
        [(r.offset, r.key, r.value) for r in after]


async def test_active_segment_never_cleaned(env):
    lg = env.open(config={"segment_bytes": 1 << 20})
    for i in range(30):
        put(lg, [(b"same", f"v{i}".encode())])
    assert not await clean(env, lg)
    assert len(everything(lg)) == 30


async def test_second_pass_cleans_new_dirty_data_against_old(env):
    lg = env.open()
    for i in range(30):
        put(lg, [(f"k{i % 3}".encode(), f"a{i}".encode().ljust(60, b"."))])
    roll(lg)
    assert await clean(env, lg)
    cleaner = make_cleaner(env, lg)
    cleaner.checkpoints[("topic", 0)] = 30
    for i in range(30):
        put(lg, [(f"k{i % 3}".encode(), f"b{i}".encode().ljust(60, b"."))])
    roll(lg)
    assert await clean(env, lg, cleaner)
    after = everything(lg)
    assert sorted(r.value[:3] for r in after) == [b"b27", b"b28", b"b29"]
    assert cleaner.checkpoints[("topic", 0)] == 60


async def test_tombstones_kept_for_delete_retention_then_removed(env):
    lg = env.open(config={"delete_retention_ms": DAY})
    for i in range(20):
        put(lg, [(f"k{i % 4}".encode(), b"v" * 50)])
    put(lg, [(b"k1", None)])
    for _ in range(20):
        put(lg, [(b"other", b"w" * 50)])
    roll(lg)
    assert await clean(env, lg)
    after = everything(lg)
    assert latest(after)[b"k1"][1] is None, "tombstone removed before delete.retention.ms"
    # The batch holding it carries its delete horizon, and its timestamp is intact.
    data = lg.read(latest(after)[b"k1"][0], HUGE).data
    head = next(records.iter_headers(data))
    assert head.attributes & ATTR_DELETE_HORIZON and head.base_timestamp == env.clock() + DAY
    assert decode_all(data)[0].timestamp == T0
    env.clock.advance(DAY - 1)
    cleaner = make_cleaner(env, lg)
    put(lg, [(b"x", b"y")])
    roll(lg)
    assert await clean(env, lg, cleaner)
    assert b"k1" in latest(everything(lg)), "removed before its horizon"
    env.clock.advance(2)
    put(lg, [(b"x", b"z")])
    roll(lg)
    assert await clean(env, lg, cleaner)
    assert b"k1" not in latest(everything(lg))
    assert {k for k in latest(everything(lg))} == {b"k0", b"k2", b"k3", b"other", b"x"}


async def test_tombstone_above_map_end_is_kept(env):
    # A key map with room for 3 entries: the tombstone lies beyond what the first pass maps.
    lg = env.open(config={"delete_retention_ms": 0})
    cleaner = make_cleaner(env, lg, **{"log.cleaner.dedupe.buffer.size": str(3 * 160 + 100),
                                       "log.cleaner.io.buffer.load.factor": "1.0"})
    for i in range(6):
        put(lg, [(f"k{i}".encode(), b"v" * 100)])
    put(lg, [(b"k0", None)])
    roll(lg)
    env.clock.advance(10)
    while await clean(env, lg, cleaner):
        if cleaner.checkpoints[("topic", 0)] >= lg.end_offset:
            break
    keys = latest(everything(lg))
    # k0's value is superseded by the tombstone, which only goes once it was mapped.
    assert keys.get(b"k0", (0, None))[1] is None


async def test_min_compaction_lag_respected(env):
    lg = env.open(config={"min_compaction_lag_ms": 60_000})
    for i in range(20):
        put(lg, [(b"k", f"v{i}".encode().ljust(80, b"."))])
    roll(lg)
    assert not await clean(env, lg), "cleaned records younger than min.compaction.lag.ms"
    assert len(everything(lg)) == 20
    env.clock.advance(60_001)
    assert await clean(env, lg)
    assert len(everything(lg)) == 1


async def test_max_compaction_lag_overrides_dirty_ratio(env):
    lg = env.open(config={"min_cleanable_ratio": 0.99, "max_compaction_lag_ms": 1000})
    for i in range(20):
        put(lg, [(b"k", f"v{i}".encode().ljust(80, b"."))])
    roll(lg)
    for _ in range(2):
        put(lg, [(b"j", b"x")])
    roll(lg)
    cleaner = make_cleaner(env, lg)
    cleaner.checkpoints[("topic", 0)] = 20
    assert cleaner.grab_filthiest(lambda tp: lg.end_offset) is None
    env.clock.advance(1001)
    assert cleaner.grab_filthiest(lambda tp: lg.end_offset) is not None


async def test_max_compaction_lag_rolls_the_active_segment(env):
    lg = env.open(config={"segment_bytes": 1 << 20, "max_compaction_lag_ms": 1000})
    put(lg, [(b"k", b"1")])
    env.clock.advance(1001)
    put(lg, [(b"k", b"2")])
    assert len(lg.segments) == 2


def test_keyless_records_refused_on_compacted_topic(env):
    lg = env.open()
    with pytest.raises(KafkaApiError) as info:
        put(lg, [(b"k", b"v"), (None, b"v")])
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert "without key" in info.value.message
    assert lg.end_offset == 0


async def test_high_watermark_and_open_transactions_bound_cleaning(env):
    lg = env.open()
    for i in range(20):
        put(lg, [(b"k", f"v{i}".encode().ljust(80, b"."))])
    roll(lg)
    c = cleanable_bounds(("topic", 0), lg, None, 5, env.clock())
    assert c.first_uncleanable == 5
    put(lg, [(b"t", b"1")], producer_id=7, producer_epoch=0, base_sequence=0,
        attributes=records.ATTR_TRANSACTIONAL)
    roll(lg)
    c = cleanable_bounds(("topic", 0), lg, None, lg.end_offset, env.clock())
    assert c.first_uncleanable == 20


def marker(lg: Log, pid: int, committed: bool) -> None:
    data = bytearray(control.marker_batch(pid, 0, committed, 0, lg._clock()))
    lg.append_as_leader(data, 0, AppendOrigin.COORDINATOR)


def txn_put(lg: Log, pid: int, seq: int, pairs) -> None:
    put(lg, pairs, producer_id=pid, producer_epoch=0, base_sequence=seq,
        attributes=records.ATTR_TRANSACTIONAL)


def committed_view(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer reads: aborted transactions' data filtered out."""
    out = []
    aborted = lg.collect_aborted(lg.log_start_offset, lg.end_offset)
    offset = lg.log_start_offset
    data = lg.read(offset, HUGE).data
    for h in records.iter_headers(data):
        if h.is_control:
            continue
        if h.is_transactional and any(t.producer_id == h.producer_id and
                                      t.first_offset <= h.base_offset <= t.last_offset
                                      for t in aborted):
            continue
        out.extend((r.offset, r.key, r.value) for r in records.decode_records(data, h))
    return out


def _markers(lg: Log) -> list[tuple[int, bool]]:
    data = lg.read(0, HUGE).data
    return [(h.producer_id, control.read_marker(data, h).committed)
            for h in records.iter_headers(data) if h.is_control]


async def test_last_batch_of_a_producer_stays_empty(env):
    lg = env.open()
    put(lg, [(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    put(lg, [(b"a", b"2")])
    roll(lg)
    assert await clean(env, lg)
    data = lg.read(0, HUGE).data
    heads = list(records.iter_headers(data))
    assert [(h.producer_id, h.records_count, h.base_offset, h.last_offset) for h in heads] == \
        [(9, 0, 0, 0), (-1, 1, 1, 1)]
    assert [r.value for r in decode_all(data)] == [b"2"]
    # The producer's next batch still follows on from its sequence.
    put(lg, [(b"b", b"3")], producer_id=9, producer_epoch=0, base_sequence=1)


async def test_transactions_cleaned_read_committed_unchanged(env):
    lg = env.open(config={"delete_retention_ms": 1000, "segment_bytes": 1 << 20})
    put(lg, [(b"a", b"plain-1")])
    txn_put(lg, 1, 0, [(b"a", b"committed-a"), (b"b", b"committed-b")])
    txn_put(lg, 2, 0, [(b"a", b"aborted-a"), (b"c", b"aborted-c")])
    marker(lg, 2, committed=False)
    marker(lg, 1, committed=True)
    put(lg, [(b"d", b"plain-d")])
    # Producer 2 writes again, so its aborted batch is not its last one (a
    # producer's last batch stays, empty if need be, and with it its marker).
    txn_put(lg, 2, 2, [(b"e", b"p2-later")])
    marker(lg, 2, committed=True)
    roll(lg)
    # Latest committed value per key, as a read_committed consumer folds the log.
    before = latest_committed = {k: v for _, k, v in committed_view(lg)}
    assert latest_committed[b"a"] == b"committed-a" and b"c" not in latest_committed
    assert await clean(env, lg)
    view = committed_view(lg)
    assert {k: v for _, k, v in view} == before
    assert all(r.value not in (b"aborted-a", b"aborted-c") for r in everything(lg))
    # The commit marker stays (its data is kept); the abort marker stays this
    # pass (its data was seen), with its index entry.
    assert _markers(lg) == [(2, False), (1, True), (2, True)]
    # Next passes: the aborted data is gone, so its marker may go after the horizon.
    env.clock.advance(10)
    put(lg, [(b"z", b"1")])
    roll(lg)
    cleaner = make_cleaner(env, lg)
    assert await clean(env, lg, cleaner)
    env.clock.advance(2000)
    put(lg, [(b"z", b"2")])
    roll(lg)
    assert await clean(env, lg, cleaner)
    assert _markers(lg) == [(1, True), (2, True)], "abort marker outlived its horizon"
    assert {k: v for _, k, v in committed_view(lg)} == {**before, b"z": b"2"}
    assert b"aborted-a" not in {r.value for r in everything(lg)}


async def test_map_smaller_than_dirty_section_takes_several_passes(env):
    lg = env.open(config={"segment_bytes": 4096})
    # Room for ~50 keys per pass; 400 distinct keys, each written twice.
    cleaner = make_cleaner(env, lg, **{"log.cleaner.dedupe.buffer.size": str(50 * 160),
                                       "log.cleaner.io.buffer.load.factor": "1.0"})
    for rnd in range(2):
        for k in range(400):
            put(lg, [(f"key-{k:04d}".encode(), f"{rnd}".encode() * 10)])
    roll(lg)
    passes = 0
    while await clean(env, lg, cleaner):
        passes += 1
        if cleaner.checkpoints[("topic", 0)] >= lg.end_offset:
            break
    assert passes >= 8
    after = everything(lg)
    assert {r.key: r.value for r in after} == {f"key-{k:04d}".encode(): b"1" * 10
                                              for k in range(400)}
    assert len(after) == 400


async def test_small_segments_grouped(env):
    lg = env.open(config={"segment_bytes": 1024})
    for i in range(200):
        put(lg, [(f"k{i % 3}".encode(), b"v" * 40)])
    roll(lg)
    before = len(lg.segments)
    cleaner = make_cleaner(env, lg)
    # Full segments are cleaned one per group (grouping goes by their sizes
    # before cleaning, as Kafka's); the next pass merges what is left.
    assert await clean(env, lg, cleaner)
    assert len(lg.segments) == before
    put(lg, [(b"k0", b"new")])
    roll(lg)
    assert await clean(env, lg, cleaner)
    assert len(lg.segments) <= 3
    assert len(everything(lg)) == 3


async def test_changed_log_aborts_the_swap(env):
    lg = env.open()
    for i in range(60):
        put(lg, [(f"k{i % 2}".encode(), b"v" * 40)])
    roll(lg)
    cleaner = make_cleaner(env, lg)
    picked = cleaner.grab_filthiest(lambda tp: lg.end_offset)

    class Truncating(InProcessWorker):
        async def call(self, method, *args):
            out = await super().call(method, *args)
            if method == "clean_group":
                lg.truncate_to(10)
            return out

    with pytest.raises(StaleSegments):
        await cleaner._clean(Truncating(), picked)  # type: ignore[arg-type]
    assert not [n for n in os.listdir(env.dir) if n.endswith((".cleaned", ".swap"))]
    # The first group was swapped in before the truncation; nothing after it was.
    offsets = [r.offset for r in everything(lg)]
    assert offsets == sorted(offsets) and set(offsets) <= set(range(10))
    assert lg.end_offset == 10


def _records(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in everything(lg)]


@pytest.mark.parametrize("crash_after", ["cleaned", "commit", "retire_some", "retire",
                                         "finish_log"])
async def test_crash_during_swap_recovers(env, crash_after):
    """Stop the swap after each step (the files as a SIGKILL would leave them),
    reopen: the log is either the old one or the cleaned one, never a mix with
    duplicates or gaps in what cleaning keeps."""
    lg = env.open(config={"segment_bytes": 512})
    for i in range(80):
        put(lg, [(f"k{i % 4}".encode(), f"v{i}".encode().ljust(30, b"."))])
    roll(lg)
    before = _records(lg)
    keep = latest([records.Record(o, 0, k, v, []) for o, k, v in before])
    cleaner = make_cleaner(env, lg)
    picked = cleaner.grab_filthiest(lambda tp: lg.end_offset)
    worker = InProcessWorker()
    closed = [s for s in lg.segments[:-1]]
    await worker.call("build_map", cleaner._spec(picked, closed))
    group = closed
    result = await worker.call("clean_group", [s.base_offset for s in group])
    base = result.base
    if crash_after != "cleaned":
        swap.commit(lg.directory, base)
    if crash_after in ("retire_some", "retire", "finish_log"):
        for seg in (group[:len(group) // 2] if crash_after == "retire_some" else group):
            seg.close()
            swap.retire(lg.directory, seg.base_offset)
    if crash_after == "finish_log":
        prefix = os.path.join(lg.directory, f"{base:020d}")
        os.rename(prefix + ".log.swap", prefix + ".log")
    for seg in lg.segments:
        seg.close()
    lg2 = Log.open(env.dir, "topic", 0, lg.config, env.clock, clean_shutdown=False)
    env.opened.append(lg2)
    after = _records(lg2)
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(set(offsets)), "duplicate or unordered offsets"
    assert set(after) <= set(before)
    assert latest([records.Record(o, 0, k, v, []) for o, k, v in after]) == keep
    assert lg2.end_offset == 80
    assert not [n for n in os.listdir(env.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
    if crash_after != "cleaned":
        assert len(after) == 4, "a committed swap was not completed"


def test_follower_accepts_cleaned_batches(env):
    lg = env.open()
    kept = records.build_batch([(b"a", b"1")], base_offset=5)
    # A cleaned batch: offsets 5..9, one record left (last offset delta 4).
    head = bytearray(kept)
    import struct

    import crc32c
    struct.pack_into(">i", head, 23, 4)
    struct.pack_into(">I", head, 17, crc32c.crc32c(bytes(head[21:])))
    lg.truncate_fully_and_start_at(5)
    assert lg.append_as_follower(head) == 10
    with pytest.raises(KafkaApiError):
        lg.append_as_leader(bytearray(head), 0)


async def test_reader_during_a_pass_sees_a_consistent_log(env):
    """Reads between the swaps of one pass's groups: offsets only go up, and
    every key's latest value is there at its offset, whatever was swapped so far."""
    lg = env.open(config={"segment_bytes": 600})
    for i in range(150):
        put(lg, [(f"k{i % 9}".encode(), f"v{i}".encode().ljust(40, b"."))])
    roll(lg)
    want = latest(everything(lg))
    cleaner = make_cleaner(env, lg)
    picked = cleaner.grab_filthiest(lambda tp: lg.end_offset)
    seen: list[int] = []

    class Reading(InProcessWorker):
        async def call(self, method, *args):
            recs = everything(lg)
            offsets = [r.offset for r in recs]
            assert offsets == sorted(set(offsets))
            assert {k: v for k, v in latest(recs).items()} == want
            seen.append(len(recs))
            return await super().call(method, *args)

    await cleaner._clean(Reading(), picked)  # type: ignore[arg-type]
    assert len(seen) > 5 and seen[-1] < seen[1], "no read happened between swaps"
    assert latest(everything(lg)) == want


async def test_compact_delete_cleans_and_applies_retention(env):
    """cleanup.policy=compact,delete: retention removes old segments of the
    cleaned log and the cleaner goes on from the new log start."""
    lg = env.open(config={"cleanup_policy": ("compact", "delete"), "segment_bytes": 600,
                          "retention_ms": 60_000})
    for i in range(60):
        put(lg, [(f"k{i % 5}".encode(), f"old{i}".encode().ljust(40, b"."))])
    roll(lg)
    cleaner = make_cleaner(env, lg)
    assert await clean(env, lg, cleaner)
    env.clock.advance(60_001)
    for i in range(30):
        put(lg, [(f"k{i % 5}".encode(), f"new{i}".encode().ljust(40, b"."))])
    roll(lg)
    assert lg.apply_retention(lg.end_offset) > 0
    assert lg.log_start_offset >= 60
    assert await clean(env, lg, cleaner)
    after = everything(lg)
    assert {r.key: r.value[:5] for r in after} == {f"k{k}".encode(): f"new{25 + k}".encode()
                                                  for k in range(5)}
    assert len(after) == 5
