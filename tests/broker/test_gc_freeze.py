"""GcFreezer: the survivors of a long full collection are frozen, so the next
walks only what is new; a thaw lets a full collection free cycles among
objects that died frozen."""

from __future__ import annotations

import gc
import weakref

import pytest
from prometheus_client import CollectorRegistry

from broker import gc_freeze


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def freezer():
    gc.collect()
    frozen_before = gc.get_freeze_count()
    registry = CollectorRegistry()
    # Every full collection counts as long; no thaw unless the test asks.
    f = gc_freeze.GcFreezer(registry, freeze_after_s=0.0, thaw_every_s=float("inf"))
    gc.callbacks.append(f.on_gc)
    yield f, registry
    gc_freeze.uninstall(f)
    gc.unfreeze()
    gc.collect()
    assert gc.get_freeze_count() <= frozen_before


def test_the_survivors_of_a_full_collection_are_frozen(freezer) -> None:
    f, registry = freezer
    kept = [Node() for _ in range(10_000)]
    gc.collect(2)
    assert registry.get_sample_value("tierd_gc_freezes_total") == 1
    assert gc.get_freeze_count() >= len(kept)
    # A young collection freezes nothing.
    gc.collect(0)
    assert registry.get_sample_value("tierd_gc_freezes_total") == 1


def test_a_short_full_collection_freezes_nothing() -> None:
    registry = CollectorRegistry()
    f = gc_freeze.GcFreezer(registry, freeze_after_s=60.0)
    gc.callbacks.append(f.on_gc)
    try:
        gc.collect(2)
    finally:
        gc_freeze.uninstall(f)
    assert registry.get_sample_value("tierd_gc_freezes_total") == 0


def test_a_thaw_frees_cycles_that_died_frozen(freezer) -> None:
    f, registry = freezer
    node = Node()
    alive = weakref.ref(node)
    gc.collect(2)  # frozen with the survivors
    del node
    gc.collect(2)
    assert alive() is not None  # frozen: out of the collector's reach
    f.thaw_every_s = 0.0
    gc.collect(2)
    assert alive() is None
    assert registry.get_sample_value("tierd_gc_thaws_total") == 1
