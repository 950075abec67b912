"""Which coordinator partitions this broker owns: loading on becoming leader,
unloading on losing it, and the NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
check, shared by the group and the transaction coordinator.

Theory of operation: a coordinator key belongs to the broker leading its
partition of the coordinator's internal topic. Each partition here is in one
of three states, moved only along ``TRANSITIONS``:

    NOT_OWNED --leader--> LOADING --load ran--> OWNED --not leader--> NOT_OWNED
        |                    |
        |                    +--not leader (before the load ran)--> NOT_OWNED
        +--start, one broker (loaded at once)--> OWNED

On one broker the coordinator owns every partition: ``start`` creates the
topic and loads them all before the coordinator reports itself started. In
cluster mode (``follow_leadership``) it hears leadership through
``on_leadership``: becoming leader marks the partition LOADING and starts a
task that replays it; a partition unloaded before that task ran is left
alone. The replay (``load``) runs without awaiting, so the partition goes
from LOADING to OWNED in the same step its state appears in memory; then
``after_load`` gets what ``load`` returned, with the partition already owned
(the transaction coordinator sends the markers its prepared transactions
still owe). Losing leadership drops the partition's state at once
(``unload``) and forgets its pending appends; the new leader rebuilds from
its own log.

Requests ask ``check``: NONE when the key's partition is OWNED, else the
code sending the client back to FindCoordinator (``_ANSWERS``).

Concurrency: everything runs on the event loop; the only await between
LOADING and OWNED is the load task's first checkpoint.

Error handling: a transition not in the table is our bug and raises.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog
import trio

from broker.coordinator_store import CoordinatorStore
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

Loaded = TypeVar("Loaded")


class Ownership(enum.Enum):
    NOT_OWNED = "NotOwned"
    LOADING = "Loading"
    OWNED = "Owned"


S = Ownership
TRANSITIONS: dict[Ownership, frozenset[Ownership]] = {
    S.NOT_OWNED: frozenset({S.LOADING, S.OWNED}),
    S.LOADING: frozenset({S.OWNED, S.NOT_OWNED}),
    S.OWNED: frozenset({S.NOT_OWNED}),
}
# What a request for a key of a partition in each state is answered.
_ANSWERS = {
    S.OWNED: ErrorCode.NONE,
    S.LOADING: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    S.NOT_OWNED: ErrorCode.NOT_COORDINATOR,
}


class IllegalOwnershipTransition(Exception):
    pass


class CoordinatorRuntime(Generic[Loaded]):
    def __init__(self, name: str, store: CoordinatorStore, load: Callable[[int], Loaded],
                 unload: Callable[[int], int],
                 after_load: Callable[[Loaded], Awaitable[None]] | None = None,
                 follow_leadership: bool = False) -> None:
        """Args:
            name: the coordinator, for log lines.
            load: replays one partition into the coordinator's memory, without
                awaiting; its result goes to ``after_load``.
            unload: drops one partition's state; returns how many keys it dropped.
            after_load: work the loaded state still owes, run with the partition owned.
            follow_leadership: cluster mode: own only the partitions this broker
                leads, as ``on_leadership`` reports them (else: all, at start).
        """
        self.name = name
        self.store = store
        self._load = load
        self._unload = unload
        self._after_load = after_load
        self.follow_leadership = follow_leadership
        self._states: dict[int, Ownership] = {}  # absent: NOT_OWNED
        self._nursery: trio.Nursery | None = None

    def state(self, partition: int) -> Ownership:
        return self._states.get(partition, S.NOT_OWNED)

    def _move(self, partition: int, new: Ownership) -> None:
        old = self.state(partition)
        if new not in TRANSITIONS[old]:
            raise IllegalOwnershipTransition(f"{self.name} partition {partition}: "
                                             f"{old.value} -> {new.value}")
        if new is S.NOT_OWNED:
            del self._states[partition]
        else:
            self._states[partition] = new

    async def start(self, nursery: trio.Nursery) -> None:
        """Run load tasks in ``nursery`` from now on; on one broker, create the
        topic and load every partition of it first."""
        self._nursery = nursery
        if self.follow_leadership:
            return
        await self.store.ensure_topic()
        for partition in range(self.store.partitions):
            await self._become_owner(partition)

    def on_leadership(self, tp: tuple[str, int], leader: bool) -> None:
        """This broker became (or stopped being) the leader of ``tp``."""
        if tp[0] != self.store.topic.name:
            return
        partition = tp[1]
        if not leader:
            self._drop(partition)
        elif self.state(partition) is S.NOT_OWNED:
            self._move(partition, S.LOADING)
            assert self._nursery is not None, "leadership reported before the coordinator runs"
            self._nursery.start_soon(self._load_soon, partition)

    async def _load_soon(self, partition: int) -> None:
        await trio.lowlevel.checkpoint()
        if self.state(partition) is S.LOADING:  # not unloaded meanwhile
            await self._become_owner(partition)

    async def _become_owner(self, partition: int) -> None:
        loaded = self._load(partition)
        self._move(partition, S.OWNED)
        if self._after_load is not None:
            await self._after_load(loaded)

    def _drop(self, partition: int) -> None:
        was_owned = self.state(partition) is S.OWNED
        if self.state(partition) is not S.NOT_OWNED:
            self._move(partition, S.NOT_OWNED)
        dropped = self._unload(partition)
        self.store.forget(partition)
        if was_owned:
            log.info("coordinator unloaded partition", coordinator=self.name,
                     partition=partition, dropped=dropped)

    def check(self, key: str) -> ErrorCode:
        """NONE if this broker coordinates ``key`` now; else what to answer."""
        return _ANSWERS[self.state(self.store.partition_of(key))]

    def owns(self, key: str) -> bool:
        return self.state(self.store.partition_of(key)) is S.OWNED

    def loading(self) -> bool:
        """Whether some partition is still being replayed (a listing would miss it)."""
        return S.LOADING in self._states.values()
