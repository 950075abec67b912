"""Long loops on the event loop that let other tasks run between items.

One trio loop serves every connection, so a loop over thousands of
partitions in one task step delays every request in flight by its whole
length. A ``Pacer`` is ticked once per item; when the step has run for
``budget_s`` it checkpoints, so other tasks run before the next item. Items
stay whole: a tick sits between two items, never inside one, and the loop's
own state is what it was before the checkpoint (the caller re-reads shared
state it needs after a tick).
"""

from __future__ import annotations

import time

import trio

# About a fifth of the 25 ms the loop monitor calls a stall.
DEFAULT_BUDGET_S = 0.005


class Pacer:
    def __init__(self, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.budget_s = budget_s
        self._since = time.perf_counter()

    async def tick(self) -> None:
        """Checkpoint if this step has run for the budget."""
        if time.perf_counter() - self._since >= self.budget_s:
            await trio.lowlevel.checkpoint()
            self._since = time.perf_counter()
