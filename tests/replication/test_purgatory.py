"""Purgatory wake-ups and deadlines, under trio's MockClock (no real sleeps)."""

from __future__ import annotations

import trio

from replication.purgatory import Purgatory


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
