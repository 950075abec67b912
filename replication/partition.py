"""State of one partition on this broker: its log, role, leader epoch and high watermark.

The high watermark is the offset below which every in-sync replica has the
data: a leader advances it to the smallest log end offset among the ISR
(its own included), and never moves it back. With the replica set {this
node} every append is fully replicated at once, so the high watermark
follows the log end, exactly as Kafka behaves with replication factor 1.
A follower learns the high watermark from the leader's fetch responses.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from storage.log.log import Log


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    # The log end offset each follower last fetched from (leader only).
    follower_end_offsets: dict[int, int] = field(default_factory=dict)
    # trio time at which each follower last fetched from the log end (leader only).
    follower_caught_up_at: dict[int, float] = field(default_factory=dict)
    high_watermark: int = 0
    # Follower only: the leader's high watermark in its last fetch response, not
    # capped at our log end (DescribeLogDirs reports the difference as the lag).
    leader_high_watermark: int = -1
    # Version of the partition's state (ZooKeeper znode), sent with AlterPartition.
    partition_epoch: int = 0
    # Leader only: the ISR asked of the controller and not answered yet (None:
    # no change in flight). See ``maximal_isr``.
    proposed_isr: list[int] | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, held back to the start of the oldest open transaction."""
        first_unstable = self.log.first_unstable_offset
        hw = self.high_watermark
        return hw if first_unstable is None else min(first_unstable, hw)

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark waits for: the current one and, while a
        change is in flight, the proposed one too (Kafka's maximal ISR, KIP-497).

        A follower joins the ISR the moment the controller commits it, and may
        be elected leader from then on; so from the moment its joining is
        proposed, every record acknowledged must already be on it, or a leader
        lost between the commit and its catching up would take acknowledged
        records with it. A follower being dropped still counts until the drop
        is committed, for the same reason the other way round.
        """
        if self.proposed_isr is None:
            return self.isr
        return self.isr + [r for r in self.proposed_isr if r not in self.isr]

    def maybe_advance_high_watermark(self, node_id: int) -> bool:
        """As leader: move the high watermark up to the smallest log end of the
        maximal ISR (``maximal_isr``).

        Returns:
            Whether it moved.
        """
        end = self.log.end_offset
        for replica in self.maximal_isr:
            if replica != node_id:
                end = min(end, self.follower_end_offsets.get(replica, 0))
        if end > self.high_watermark:
            self.high_watermark = end
            return True
        return False
