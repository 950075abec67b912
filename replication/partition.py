"""State of one partition on this broker: its log, leader epoch and high watermark.

On a single broker the replica set is {this node}, so every append is fully
replicated at once: the high watermark equals the log end offset. The ISR
bookkeeping lives here so replication can extend it without touching the
handlers.
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

    @property
    def high_watermark(self) -> int:
        return self.log.end_offset

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, held back to the start of the oldest open transaction."""
        first_unstable = self.log.first_unstable_offset
        hw = self.high_watermark
        return hw if first_unstable is None else min(first_unstable, hw)
