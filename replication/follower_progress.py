"""FollowerProgress: a leader's record of how far each follower has got, and what follows from it.

What it owns:
- each follower's position on each led partition (the offset its last fetch
  asked for) and when it was last caught up with the log end, plus when each
  follower last fetched at all (any partition);
- the high watermark's advance from those positions, and the ISR as the
  caller applies it (a follower that leaves loses its recorded position);
- the acks=all wait: produces parked until the high watermark covers their
  records (the delayed-produce purgatory).

Why it is separate from the ReplicaManager: the ReplicaManager hosts
partitions and serves reads and writes; this object answers a different
question, "what do the followers have?", and it is the state the ISR manager
(``replication.isr``) reads to decide shrinks and expansions. Keeping it in
one place keeps the caught-up rule (below) next to the positions it reads.

The caught-up rule: a follower whose last fetch offset is the log end counts
as caught up *now* as long as it is fetching at all (within
replica.lag.time.max.ms). With fetch sessions (KIP-227) a follower names an
idle partition only when its position changes, so its last fetch that named
the partition may be long ago while it is in fact current.

Concurrency: runs on the event loop, like the ReplicaManager that owns it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.partition import Partition
from replication.purgatory import Purgatory


class FollowerProgress:
    """Follower positions, the high watermark they allow, and the acks=all wait.

    Args:
        node_id: this broker (the leader of the partitions asked about).
        lag_max_s: replica.lag.time.max.ms, in seconds.
        get: the hosted partition for a TopicPartition, or None.
        on_high_watermark: told about each partition whose high watermark
            moved (after the waiting produces are woken).
    """

    def __init__(self, node_id: int, lag_max_s: float,
                 get: Callable[[TopicPartition], Partition | None],
                 on_high_watermark: Callable[[TopicPartition], None]) -> None:
        self.node_id = node_id
        self._lag_max_s = lag_max_s
        self._get = get
        self._on_high_watermark = on_high_watermark
        self._delayed_produce = Purgatory()
        # trio time of each follower's last fetch (any partition): with fetch
        # sessions a follower names an idle partition only when it changes,
        # so the ISR check asks whether it is still fetching at all.
        self.fetched_at: dict[int, float] = {}
        # Told about partitions whose ISR may change (set by cluster mode).
        self.isr_listener: Callable[[TopicPartition], None] | None = None

    def fetched(self, replica: int) -> None:
        """``replica`` sent a fetch (naming any partitions, or none)."""
        self.fetched_at[replica] = trio.current_time()

    def update_follower(self, tp: TopicPartition, replica: int, end_offset: int) -> None:
        """As leader: ``replica`` has everything below ``end_offset`` (from its fetch).

        A follower at the log end counts as caught up now (ISR shrink looks at
        how long ago that was); one outside the ISR that reached the high
        watermark is reported to ``isr_listener`` for expansion.
        """
        part = self._get(tp)
        if part is None or not part.is_leader(self.node_id):
            return
        part.follower_end_offsets[replica] = end_offset
        if end_offset >= part.log.end_offset:
            part.follower_caught_up_at[replica] = trio.current_time()
        self.advance_high_watermark(part)
        if (replica not in part.isr and end_offset >= part.high_watermark
                and self.isr_listener is not None):
            self.isr_listener(tp)

    def update_isr(self, tp: TopicPartition, isr: list[int]) -> None:
        """As leader: the ISR changed (already made durable by the caller).

        A follower that left the ISR loses what it last reported: it joins
        again only on a fetch of its own reaching the high watermark. Its
        old end offset must not readmit it, e.g. once it restarts with a wiped
        disk and has not fetched yet.
        """
        part = self._get(tp)
        if part is None:
            return
        for gone in set(part.isr) - set(isr):
            part.follower_end_offsets.pop(gone, None)
            part.follower_caught_up_at.pop(gone, None)
        part.isr = list(isr)
        if not self.advance_high_watermark(part):
            self._delayed_produce.notify(tp)  # a shrink may fail waiting acks=all produces

    def advance_high_watermark(self, part: Partition) -> bool:
        """Move ``part``'s high watermark up to what the ISR has (see
        ``Partition.maybe_advance_high_watermark``); if it moved, wake the
        produces waiting on it and tell ``on_high_watermark``.

        Returns:
            Whether it moved.
        """
        if not part.maybe_advance_high_watermark(self.node_id):
            return False
        self._delayed_produce.notify(part.tp)
        self._on_high_watermark(part.tp)
        return True

    def hold_caught_up(self, part: Partition) -> None:
        """Before the log end moves: followers at the log end now (see
        ``caught_up_at``) were caught up until this moment, and are judged from
        it, not from the last fetch that named this partition (which, for an
        idle partition in a session, may be long ago)."""
        now = trio.current_time()
        for replica in part.follower_end_offsets:
            if self.caught_up_at(part, replica, now) == now:
                part.follower_caught_up_at[replica] = now

    def caught_up_at(self, part: Partition, replica: int, now: float) -> float | None:
        """When ``replica`` was last caught up on ``part`` (leader only; None: never).

        A follower whose last fetch offset is the log end is caught up now if it
        is fetching at all (within replica.lag.time.max.ms): with a fetch
        session it names an idle partition only when its position changes.
        """
        at = part.follower_caught_up_at.get(replica)
        fetched = self.fetched_at.get(replica)
        if (fetched is not None and now - fetched <= self._lag_max_s
                and part.follower_end_offsets.get(replica, -1) >= part.log.end_offset):
            return now
        return at

    # -- the acks=all wait (the delayed produce) ---------------------------------

    async def wait_replicated(self, required: dict[TopicPartition, int],
                              timeout_ms: int) -> dict[TopicPartition, ErrorCode]:
        """The delayed produce: wait until each partition's high watermark reaches
        its required offset (acks=all), at most ``timeout_ms``.

        Returns:
            Per partition: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank
            below min.insync.replicas), NOT_LEADER_OR_FOLLOWER (leadership moved)
            or REQUEST_TIMED_OUT.
        """
        deadline = trio.current_time() + max(timeout_ms, 0) / 1000
        status: dict[TopicPartition, ErrorCode | None] = dict.fromkeys(required)

        def done() -> bool:
            for tp, offset in required.items():
                if status[tp] is None:
                    status[tp] = self._replication_status(tp, offset)
            return all(code is not None for code in status.values())

        await self._delayed_produce.wait_until(required, deadline, done)
        return {tp: ErrorCode.REQUEST_TIMED_OUT if code is None else code
                for tp, code in status.items()}

    def _replication_status(self, tp: TopicPartition, offset: int) -> ErrorCode | None:
        part = self._get(tp)
        if part is None or not part.is_leader(self.node_id):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.high_watermark < offset:
            return None
        if len(part.isr) < part.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def wake(self, tp: TopicPartition) -> None:
        """Produces waiting on ``tp`` look again (its leadership moved, or it went)."""
        self._delayed_produce.notify(tp)

    def wake_all(self) -> None:
        """Every waiting produce looks again (shutdown)."""
        self._delayed_produce.notify_all()
