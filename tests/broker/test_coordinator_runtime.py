"""The coordinators' partition ownership: load on start or on becoming leader,
COORDINATOR_LOAD_IN_PROGRESS meanwhile, unload on losing leadership, and the
transition table. A recording owner stands in for a coordinator; the store
is real (single-node core)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from broker.coordinator.offsets_store import offsets_store
from broker.coordinator_runtime import (
    TRANSITIONS,
    CoordinatorRuntime,
    IllegalOwnershipTransition,
    Ownership,
)
from protocol.errors import ErrorCode as E
from replication.internal_topics import OFFSETS_TOPIC, TRANSACTION_TOPIC
from tests.coordinator.conftest import OFFSETS_PARTITIONS, make_config, make_node, trio_wall_clock

S = Ownership


class Owner:
    """Records what the runtime asks of its coordinator."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.runtime: CoordinatorRuntime[int] | None = None

    def load(self, partition: int) -> int:
        assert self.runtime is not None
        self.calls.append(("load", partition, self.runtime.state(partition)))
        return partition * 10

    def unload(self, partition: int) -> int:
        self.calls.append(("unload", partition))
        return 2

    async def after_load(self, loaded: int) -> None:
        assert self.runtime is not None
        self.calls.append(("after_load", loaded, self.runtime.state(loaded // 10)))
        await trio.lowlevel.checkpoint()


def runtime(tmp_path: Path, follow_leadership: bool) -> tuple[CoordinatorRuntime[int], Owner]:
    node = make_node(make_config(tmp_path))
    owner = Owner()
    rt = CoordinatorRuntime("test coordinator", offsets_store(node.internal.offsets,
                                                              trio_wall_clock),
                            owner.load, owner.unload, owner.after_load, follow_leadership)
    owner.runtime = rt
    return rt, owner


def key_in(rt: CoordinatorRuntime[int], partition: int) -> str:
    return next(k for k in (f"g{i}" for i in range(1000)) if rt.store.partition_of(k) == partition)


async def test_one_broker_creates_the_topic_and_loads_every_partition(tmp_path, nursery):
    rt, owner = runtime(tmp_path, follow_leadership=False)
    await rt.start(nursery)
    assert rt.store.topic.metadata.topic(OFFSETS_TOPIC) is not None
    assert owner.calls == [c for p in range(OFFSETS_PARTITIONS)
                           for c in (("load", p, S.NOT_OWNED), ("after_load", p * 10, S.OWNED))]
    assert all(rt.check(key_in(rt, p)) is E.NONE for p in range(OFFSETS_PARTITIONS))


async def test_leadership_loads_then_unloads(tmp_path, nursery):
    rt, owner = runtime(tmp_path, follow_leadership=True)
    await rt.start(nursery)
    assert owner.calls == [] and rt.store.topic.metadata.topic(OFFSETS_TOPIC) is None
    key = key_in(rt, 1)
    assert rt.check(key) is E.NOT_COORDINATOR and not rt.owns(key)

    rt.on_leadership((OFFSETS_TOPIC, 1), True)
    assert rt.check(key) is E.COORDINATOR_LOAD_IN_PROGRESS and not rt.owns(key)
    rt.on_leadership((OFFSETS_TOPIC, 1), True)  # told again while loading: one load
    await trio.testing.wait_all_tasks_blocked()
    assert owner.calls == [("load", 1, S.LOADING), ("after_load", 10, S.OWNED)]
    assert rt.check(key) is E.NONE and rt.owns(key)
    rt.on_leadership((OFFSETS_TOPIC, 1), True)  # told again while owned: nothing
    await trio.testing.wait_all_tasks_blocked()
    assert len(owner.calls) == 2

    rt.on_leadership((OFFSETS_TOPIC, 1), False)
    assert owner.calls[2:] == [("unload", 1)]
    assert rt.check(key) is E.NOT_COORDINATOR and rt.state(1) is S.NOT_OWNED


async def test_unloading_forgets_pending_appends(tmp_path, nursery, monkeypatch):
    rt, _ = runtime(tmp_path, follow_leadership=True)
    await rt.start(nursery)
    forgotten: list[int] = []
    monkeypatch.setattr(rt.store.topic, "forget", forgotten.append)
    rt.on_leadership((OFFSETS_TOPIC, 2), True)
    await trio.testing.wait_all_tasks_blocked()
    rt.on_leadership((OFFSETS_TOPIC, 2), False)
    assert forgotten == [2]


async def test_leadership_lost_before_the_load_ran_leaves_it_unloaded(tmp_path, nursery):
    rt, owner = runtime(tmp_path, follow_leadership=True)
    await rt.start(nursery)
    rt.on_leadership((OFFSETS_TOPIC, 0), True)
    rt.on_leadership((OFFSETS_TOPIC, 0), False)
    await trio.testing.wait_all_tasks_blocked()
    assert owner.calls == [("unload", 0)]
    assert rt.check(key_in(rt, 0)) is E.NOT_COORDINATOR


async def test_other_topics_leadership_is_ignored(tmp_path, nursery):
    rt, owner = runtime(tmp_path, follow_leadership=True)
    await rt.start(nursery)
    rt.on_leadership((TRANSACTION_TOPIC, 0), True)
    rt.on_leadership(("t", 0), False)
    await trio.testing.wait_all_tasks_blocked()
    assert owner.calls == [] and rt.state(0) is S.NOT_OWNED


async def test_leadership_before_start_is_a_wiring_bug(tmp_path):
    rt, _ = runtime(tmp_path, follow_leadership=True)
    with pytest.raises(AssertionError):
        rt.on_leadership((OFFSETS_TOPIC, 0), True)


def test_every_state_has_transitions_and_illegal_moves_raise(tmp_path):
    assert set(TRANSITIONS) == set(Ownership)
    rt, _ = runtime(tmp_path, follow_leadership=True)
    with pytest.raises(IllegalOwnershipTransition):
        rt._move(0, S.NOT_OWNED)
    rt._move(0, S.OWNED)
    with pytest.raises(IllegalOwnershipTransition):
        rt._move(0, S.LOADING)
