"""Purgatory wake-ups and deadlines, and the remote-fetch purgatory's
DelayedRemoteFetch entries (completion, expiry, parking, de-duplication),
under trio's MockClock (no real sleeps); then the remote-fetch purgatory over
the real reader pool (``tests.storage.remote.test_remote_log_manager.Setup``).
"""

from __future__ import annotations

import pytest
import trio

from protocol.errors import ErrorCode, KafkaApiError
from replication.purgatory import DelayedRemoteFetch, Purgatory, RemoteFetchPurgatory
from storage.remote.read_pool import ReadKey, RemoteReadResult
from tests.storage.remote.test_remote_log_manager import Setup, offsets_of


async def test_wait_returns_on_notify_of_a_watched_key(autojump_clock):
    purgatory = Purgatory()
    woke: list[float] = []

    async def waiter() -> None:
        await purgatory.wait([("t", 0), ("t", 1)], trio.current_time() + 30)
        woke.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(1)
        purgatory.notify(("t", 9))  # not watched: nobody wakes
        await trio.sleep(1)
        assert woke == []
        purgatory.notify(("t", 1))
    assert woke == [2.0]
    assert purgatory.waiting == 0  # no key outlives its waiter


async def test_wait_gives_up_at_the_deadline_and_cleans_up(autojump_clock):
    purgatory = Purgatory()
    await purgatory.wait([("t", 0)], trio.current_time() + 5)
    assert trio.current_time() == 5
    assert purgatory.waiting == 0


async def test_wait_until_rechecks_after_each_wake(autojump_clock):
    purgatory = Purgatory()
    state = {"hw": 0}
    result: list[bool] = []

    async def producer_waits() -> None:
        result.append(await purgatory.wait_until([("t", 0)], trio.current_time() + 10,
                                                 lambda: state["hw"] >= 3))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer_waits)
        for hw in (1, 2, 3):
            await trio.sleep(1)
            state["hw"] = hw
            purgatory.notify(("t", 0))
    assert result == [True]
    assert trio.current_time() == 3


async def test_wait_until_times_out_when_the_condition_never_holds(autojump_clock):
    purgatory = Purgatory()
    assert not await purgatory.wait_until([("t", 0)], trio.current_time() + 2, lambda: False)
    assert trio.current_time() == 2


async def test_notify_all_wakes_every_waiter(autojump_clock):
    purgatory = Purgatory()
    woke: list[str] = []

    async def waiter(name: str, key: tuple[str, int]) -> None:
        await purgatory.wait([key], trio.current_time() + 60)
        woke.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "a", ("t", 0))
        nursery.start_soon(waiter, "b", ("u", 3))
        await trio.sleep(1)
        purgatory.notify_all()
    assert sorted(woke) == ["a", "b"] and trio.current_time() == 1


async def test_a_watch_keeps_a_notify_that_came_before_the_wait(autojump_clock):
    """A reader that lets other tasks run while it reads watches first: an
    event on a key it already read is not lost, and the watch is gone after."""
    purgatory = Purgatory()
    with purgatory.watch([("t", 0), ("t", 1)]) as woken:
        await trio.sleep(0)  # the read, with other tasks running
        purgatory.notify(("t", 0))
        with trio.move_on_after(30):
            await woken.wait()
        assert woken.is_set() and trio.current_time() == 0
    assert purgatory.waiting == 0


# -- the remote-fetch purgatory ----------------------------------------------------------

KEY = ReadKey(("t", 0), 100, 1000, True)


class Reads:
    """A reader pool stand-in: records each start; the test completes the entries."""

    def __init__(self, accept: bool = True) -> None:
        self.started: list[DelayedRemoteFetch] = []
        self.accept = accept

    def __call__(self, entry: DelayedRemoteFetch) -> bool:
        if self.accept:
            self.started.append(entry)
        return self.accept


async def test_a_remote_fetch_parks_until_the_reader_pool_completes_it(autojump_clock):
    purgatory = RemoteFetchPurgatory()
    reads = Reads()
    got: list[tuple[float, RemoteReadResult | None]] = []

    async def fetch() -> None:
        got.append((trio.current_time(),
                    await purgatory.fetch(KEY, trio.current_time() + 5, reads)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch)
        nursery.start_soon(fetch)  # the same range: joins the first read
        await trio.sleep(1)
        assert len(reads.started) == 1 and len(purgatory) == 1
        reads.started[0].complete(RemoteReadResult(b"records"))
    assert [(t, r.records if r else None) for t, r in got] == [(0, b"records")] * 2
    assert trio.current_time() == 1
    assert len(purgatory) == 0  # delivered: not kept


async def test_an_expired_wait_leaves_the_result_for_the_retry(autojump_clock):
    purgatory = RemoteFetchPurgatory()
    reads = Reads()
    assert await purgatory.fetch(KEY, trio.current_time() + 0.5, reads) is None
    assert trio.current_time() == 0.5  # remote.fetch.max.wait.ms: answered empty
    assert len(purgatory) == 1  # the read goes on
    await trio.sleep(1)
    reads.started[0].complete(RemoteReadResult(b"late"))
    retry = await purgatory.fetch(KEY, trio.current_time() + 0.5, reads)
    assert retry == RemoteReadResult(b"late") and trio.current_time() == 1.5
    assert len(reads.started) == 1 and len(purgatory) == 0


async def test_a_parked_result_nobody_takes_expires(autojump_clock):
    purgatory = RemoteFetchPurgatory(result_ttl_s=30)
    reads = Reads()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(purgatory.run)
        assert await purgatory.fetch(KEY, trio.current_time() + 0.5, reads) is None
        reads.started[0].complete(RemoteReadResult(b"never taken"))
        await trio.sleep(29)
        assert len(purgatory) == 1
        await trio.sleep(31)
        assert len(purgatory) == 0
        nursery.cancel_scope.cancel()
    # A new fetch of the range reads again.
    assert await purgatory.fetch(KEY, trio.current_time() + 0.5, reads) is None
    assert len(reads.started) == 2


async def test_parked_results_are_bounded_in_bytes(autojump_clock):
    purgatory = RemoteFetchPurgatory(parked_max_bytes=10)
    reads = Reads()
    older, newer = ReadKey(("t", 0), 1, 100, True), ReadKey(("t", 0), 2, 100, True)
    for key in (older, newer):
        assert await purgatory.fetch(key, trio.current_time() + 0.5, reads) is None
    reads.started[0].complete(RemoteReadResult(b"x" * 8))
    await trio.sleep(1)
    reads.started[1].complete(RemoteReadResult(b"y" * 8))
    assert len(purgatory) == 1  # the older result went
    assert await purgatory.fetch(newer, trio.current_time() + 0.5, reads) == RemoteReadResult(
        b"y" * 8)


async def test_an_error_answers_only_the_fetches_that_waited_for_it(autojump_clock):
    purgatory = RemoteFetchPurgatory()
    reads = Reads()
    failure = RemoteReadResult(error=KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, "down"))
    assert await purgatory.fetch(KEY, trio.current_time() + 0.5, reads) is None
    reads.started[0].complete(failure)
    reads.started[0].complete(RemoteReadResult(b"ignored"))  # completed once only
    assert len(purgatory) == 1
    # The next fetch tries the store again (it may have recovered).
    async with trio.open_nursery() as nursery:
        nursery.start_soon(purgatory.fetch, KEY, trio.current_time() + 5, reads)
        await trio.sleep(1)
        assert len(reads.started) == 2
        reads.started[1].complete(RemoteReadResult(b"back"))
    assert len(purgatory) == 0


async def test_a_declined_or_refused_start_parks_nothing(autojump_clock):
    purgatory = RemoteFetchPurgatory()
    assert await purgatory.fetch(KEY, trio.current_time() + 5, Reads(accept=False)) is None
    assert trio.current_time() == 0 and len(purgatory) == 0

    def refuse(entry: DelayedRemoteFetch) -> bool:
        raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, "remote reader queue is full")

    with pytest.raises(KafkaApiError):
        await purgatory.fetch(KEY, trio.current_time() + 5, refuse)
    assert len(purgatory) == 0


# Over the real reader pool, the filesystem RSM and the topic-based RLMM.


async def tiered(tmp_path) -> Setup:
    s = Setup(tmp_path)
    s.produce(20)
    await s.start()
    await s.cycle()
    return s


async def test_an_empty_read_without_min_one_batch_does_not_stall_the_next_fetch(tmp_path):
    # A fetch whose partition came after others (min_one_batch=False) and whose
    # byte share is smaller than the batch gets nothing; the client's next
    # fetch of the same offset and share, now first (min_one_batch=True), must
    # get the batch at once, not the first fetch's empty answer again.
    s = await tiered(tmp_path)
    purgatory = RemoteFetchPurgatory()
    first = s.rlmm.list_remote_log_segments(s.tip)[0].start_offset
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        nothing = await purgatory.read(s.reads, ("t", 0), first, 10, False,
                                       trio.current_time() + 5)
        assert not nothing
        data = await purgatory.read(s.reads, ("t", 0), first, 10, True, trio.current_time() + 5)
        assert data and offsets_of(data)[0] == first
        nursery.cancel_scope.cancel()


async def test_delivered_remote_results_are_not_kept(tmp_path):
    # A finished read is parked only until a fetch takes it: results are not
    # pinned in memory for tens of seconds after every read.
    s = await tiered(tmp_path)
    purgatory = RemoteFetchPurgatory()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        for md in s.rlmm.list_remote_log_segments(s.tip):
            assert await purgatory.read(s.reads, ("t", 0), md.start_offset, 10_000, True,
                                        trio.current_time() + 5)
        assert len(purgatory) == 0
        nursery.cancel_scope.cancel()


async def test_a_zero_byte_share_starts_no_remote_read(tmp_path):
    s = await tiered(tmp_path)
    purgatory = RemoteFetchPurgatory()
    first = s.rlmm.list_remote_log_segments(s.tip)[0].start_offset
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        assert await purgatory.read(s.reads, ("t", 0), first, 0, False,
                                    trio.current_time() + 5) is None
        assert len(purgatory) == 0
        assert s.svc.metrics.fetch_requests.labels("t")._value.get() == 0
        nursery.cancel_scope.cancel()


async def test_a_remote_failure_is_the_fetchs_error_value(tmp_path):
    s = await tiered(tmp_path)
    purgatory = RemoteFetchPurgatory()
    md = s.rlmm.list_remote_log_segments(s.tip)[0]
    for path in s.remote_root.rglob("*.log"):
        path.unlink()
    async with trio.open_nursery() as nursery:
        await nursery.start(s.reads.run)
        with pytest.raises(KafkaApiError) as exc:
            await purgatory.read(s.reads, ("t", 0), md.start_offset, 10_000, True,
                                 trio.current_time() + 5)
        nursery.cancel_scope.cancel()
    assert exc.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert len(purgatory) == 0  # delivered; the next fetch of the range reads again
