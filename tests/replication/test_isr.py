"""The leader's ISR changes and the high watermark: while a change is with the
controller, the high watermark waits for the proposed ISR too (the maximal
ISR, KIP-497), so a follower the controller admits never lacks an
acknowledged record."""

from __future__ import annotations

import trio
import trio.testing

from replication.controller_requests import IsrChange
from replication.elections import LeaderAndIsr
from replication.isr import IsrManager
from tests.helpers import batch
from tests.replication.hosting import host

TP = ("t", 0)


async def test_a_joining_follower_holds_the_high_watermark_until_it_has_the_records(
        replicas, autojump_clock):
    part = host(replicas, TP, 1, [1, 2])
    for _ in range(3):
        await replicas.append(TP, batch([b"before"]), acks=1)
    replicas.followers.update_follower(TP, 2, part.log.end_offset)
    assert part.high_watermark == 3
    answer = trio.Event()
    asked: list[list[int]] = []

    async def slow_controller(changes: list[IsrChange]):
        asked.extend(c.isr for c in changes)
        await answer.wait()
        return [("", LeaderAndIsr(1, c.leader_epoch, tuple(c.isr), 0, c.partition_epoch + 1))
                for c in changes]

    isr = IsrManager(replicas.config, replicas, slow_controller)
    async with trio.open_nursery() as nursery:
        await nursery.start(isr.run)
        replicas.followers.update_follower(TP, 3, 3)  # 3 reached the high watermark
        await trio.testing.wait_all_tasks_blocked()
        assert asked == [[1, 2, 3]] and part.isr == [1, 2]  # proposed, not committed
        await replicas.append(TP, batch([b"during"]), acks=1)
        replicas.followers.update_follower(TP, 2, part.log.end_offset)
        # 2 has it, but 3 (proposed) does not: not acknowledged yet.
        assert part.high_watermark == 3
        answer.set()
        await trio.testing.wait_all_tasks_blocked()
        assert part.isr == [1, 2, 3] and part.proposed_isr is None
        assert part.high_watermark == 3
        replicas.followers.update_follower(TP, 3, part.log.end_offset)
        assert part.high_watermark == 4
        nursery.cancel_scope.cancel()


async def test_a_dropped_follower_counts_until_the_drop_is_committed_and_a_failed_request_goes_again(
        replicas, autojump_clock):
    part = host(replicas, TP, 1, [1, 2, 3])
    calls: list[list[int]] = []

    async def flaky_controller(changes: list[IsrChange]):
        calls.extend(c.isr for c in changes)
        if len(calls) == 1:
            raise OSError("controller unreachable")
        return [("", LeaderAndIsr(1, c.leader_epoch, tuple(c.isr), 0, c.partition_epoch + 1))
                for c in changes]

    isr = IsrManager(replicas.config, replicas, flaky_controller)
    async with trio.open_nursery() as nursery:
        await nursery.start(isr.run)
        await replicas.append(TP, batch([b"x"]), acks=1)
        # 3 never fetches; 2 keeps up. The first request to drop 3 fails.
        seen_failed = False
        for _ in range(10):
            await trio.sleep(0.4)
            replicas.followers.update_follower(TP, 2, part.log.end_offset)
            if calls == [[1, 2]]:
                # Failed: the controller may have it or not; 3 still counts.
                assert part.proposed_isr == [1, 2] and part.high_watermark == 0
                seen_failed = True
        await trio.testing.wait_all_tasks_blocked()
        assert seen_failed
        assert calls[:2] == [[1, 2], [1, 2]]  # the same change, sent again
        assert part.isr == [1, 2] and part.proposed_isr is None
        assert part.high_watermark == 1  # committed: 3 no longer holds it back
        nursery.cancel_scope.cancel()
