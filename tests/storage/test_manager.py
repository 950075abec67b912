"""LogManager chores on trio's MockClock: retention, checkpoints, clean-shutdown marker."""

from __future__ import annotations

import os
import threading
import uuid

import trio

from config.broker import BrokerConfig
from storage.log import checkpoint, file_deleter
from storage.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    LogManager,
    parse_dir_name,
)
from tests.helpers import T0, batch, log_config

TP = ("orders", 3)
TOPIC_ID = uuid.UUID(int=99)


def _trio_clock() -> int:
    return T0 + int(trio.current_time() * 1000)


def _manager(tmp_path) -> LogManager:
    config = BrokerConfig.from_mapping({
        "log.dir": str(tmp_path),
        "log.retention.check.interval.ms": "1000",
        "log.flush.offset.checkpoint.interval.ms": "5000",
    })
    return LogManager(config, clock=_trio_clock)


def test_parse_dir_name():
    assert parse_dir_name("orders-3") == ("orders", 3)
    assert parse_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_dir_name("orders") is None
    assert parse_dir_name("orders-x") is None


async def test_retention_and_checkpoint_chores(tmp_path, autojump_clock, monkeypatch):
    # The chores' file work goes through trio.to_thread; a worker thread's real-time
    # latency would race the jumping virtual clock, so here it runs inline.
    async def run_inline(fn, *args, **kwargs):
        return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_inline)
    mgr = _manager(tmp_path)
    lg = mgr.create(TP, TOPIC_ID, log_config(segment_bytes=300, retention_ms=10_000))
    for _ in range(12):
        lg.append_as_leader(batch([b"v" * 30], timestamp=_trio_clock()), 0)
    assert len(lg.segments) > 2
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mgr.run, lambda tp: mgr.logs[tp].end_offset)
        await trio.sleep(5.5)  # retention ran five times; nothing is 10 s old yet
        assert lg.log_start_offset == 0
        assert checkpoint.read_offsets(str(tmp_path / LOG_START_FILE)) == {TP: 0}
        await trio.sleep(6)  # 11.5 s: every segment has expired
        assert lg.log_start_offset == lg.end_offset == 12
        await trio.sleep(5)  # the next checkpoint carries the new start
        assert checkpoint.read_offsets(str(tmp_path / LOG_START_FILE)) == {TP: 12}
        nursery.cancel_scope.cancel()


async def test_shutdown_and_reload(tmp_path, autojump_clock):
    mgr = _manager(tmp_path)
    lg = mgr.create(TP, TOPIC_ID, log_config())
    for _ in range(3):
        lg.append_as_leader(batch([b"a", b"b"], timestamp=_trio_clock()), 0)
    assert checkpoint.read_partition_metadata(lg.directory) == TOPIC_ID
    await mgr.shutdown()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    assert checkpoint.read_offsets(str(tmp_path / RECOVERY_POINT_FILE)) == {TP: 6}

    os.makedirs(tmp_path / "gone-0")  # a topic the broker no longer knows
    os.makedirs(tmp_path / "old-1.abc-delete")
    again = _manager(tmp_path)
    again.load(lambda topic: log_config() if topic == TP[0] else None,
               lambda topic: TOPIC_ID if topic == TP[0] else None)
    assert again.clean_shutdown
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)  # a crash from now on shows
    assert not os.path.exists(tmp_path / "gone-0")
    assert not os.path.exists(tmp_path / "old-1.abc-delete")
    reloaded = again.get(TP)
    assert reloaded.end_offset == 6 and reloaded.recovery_point == 6
    for lg2 in again.logs.values():
        lg2.close()


async def test_reload_drops_log_of_recreated_topic(tmp_path, autojump_clock):
    mgr = _manager(tmp_path)
    mgr.create(TP, TOPIC_ID, log_config())
    await mgr.shutdown()
    again = _manager(tmp_path)
    again.load(lambda topic: log_config(), lambda topic: uuid.UUID(int=100))
    assert again.get(TP) is None
    assert not os.path.exists(tmp_path / f"{TP[0]}-{TP[1]}")


class _Steps(trio.abc.Instrument):
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.events.append("step")


async def test_retention_deletes_one_segment_per_loop_step(tmp_path, autojump_clock):
    mgr = _manager(tmp_path)
    lg = mgr.create(TP, TOPIC_ID, log_config(segment_bytes=300, retention_bytes=1))
    for _ in range(24):
        lg.append_as_leader(batch([b"v" * 30], timestamp=_trio_clock()), 0)
    doomed = len(lg.segments) - 1
    assert doomed >= 4
    events: list[str] = []
    remove = lg.local.remove_first_segment

    def removing():  # type: ignore[no-untyped-def]
        events.append("remove")
        return remove()

    lg.local.remove_first_segment = removing  # type: ignore[method-assign]
    steps = _Steps(events)
    trio.lowlevel.add_instrument(steps)
    try:
        await mgr._retention(lambda tp: lg.end_offset)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert events.count("remove") == doomed and len(lg.segments) == 1
    removes = [i for i, e in enumerate(events) if e == "remove"]
    # Other tasks (a produce) get the loop between any two deletions.
    assert all("step" in events[a + 1:b] for a, b in zip(removes, removes[1:], strict=False))
    lg.close()


async def test_delete_removes_directory(tmp_path, autojump_clock):
    mgr = _manager(tmp_path)
    lg = mgr.create(TP, TOPIC_ID, log_config())
    lg.append_as_leader(batch([b"x"], timestamp=_trio_clock()), 0)
    await mgr.delete(TP)
    assert mgr.get(TP) is None
    assert os.listdir(tmp_path) == []


async def test_deleted_segments_are_unlinked_off_the_event_loop(tmp_path, autojump_clock,
                                                                monkeypatch):
    # Where each batch of unlinks ran: the thread, and its scheduling class.
    ran_in: list[tuple[str, int]] = []
    real_unlink_all = file_deleter.unlink_all

    def unlink_all(paths):
        ran_in.append((threading.current_thread().name, os.sched_getscheduler(0)))
        real_unlink_all(paths)

    monkeypatch.setattr(file_deleter, "unlink_all", unlink_all)
    mgr = _manager(tmp_path)
    lg = mgr.create(TP, TOPIC_ID, log_config(segment_bytes=300))
    for _ in range(12):
        lg.append_as_leader(batch([b"v" * 30], timestamp=_trio_clock()), 0)
    first = lg.segments[0].log_path
    kept = lg.segments[-1].base_offset
    assert lg.delete_records(kept, lg.end_offset) == kept
    # On the loop: dropped from the log, files renamed, nothing unlinked yet.
    assert not os.path.exists(first) and os.path.exists(first + ".deleted")
    assert mgr.deleter.pending >= 4 and ran_in == []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mgr.deleter.run)
        while [n for n in os.listdir(lg.directory) if n.endswith(".deleted")]:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert mgr.deleter.pending == 0
    # In the deleter's own thread, which waits for the event loop on a busy core.
    assert ran_in and {name for name, _ in ran_in} == {"segment-deleter_0"}
    assert {policy for _, policy in ran_in} == {os.SCHED_IDLE}
    assert lg.read(kept, 10_000).data  # what is left still reads

    # A broker that stopped before its deleter ran: leftovers go when the log opens.
    await mgr.shutdown()
    leftover = os.path.join(lg.directory, "00000000000000000000.log.deleted")
    with open(leftover, "wb") as f:
        f.write(b"old")
    again = _manager(tmp_path)
    again.load(lambda topic: log_config(segment_bytes=300), lambda topic: TOPIC_ID)
    assert not os.path.exists(leftover)
    assert again.get(TP).log_start_offset == kept
    for lg2 in again.logs.values():
        lg2.close()
