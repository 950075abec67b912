"""Quota muting (KIP-219) under a mock clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from broker.security.muting import QuotaMute, quotas_apply


async def test_a_new_connection_is_not_muted(autojump_clock: Any) -> None:
    mute = QuotaMute()
    assert not mute.active()
    started = trio.current_time()
    await mute.wait()
    assert trio.current_time() == started


async def test_wait_sleeps_until_the_mute_ends(autojump_clock: Any) -> None:
    mute = QuotaMute()
    mute.until = trio.current_time() + 2.5
    assert mute.active()
    await mute.wait()
    assert not mute.active()
    assert trio.current_time() == mute.until


def test_quotas_apply_only_with_entries() -> None:
    assert not quotas_apply(SimpleNamespace(quotas=None))  # type: ignore[arg-type]
    empty = SimpleNamespace(quotas=SimpleNamespace(quotas=SimpleNamespace(entries={})))
    assert not quotas_apply(empty)  # type: ignore[arg-type]
    some = SimpleNamespace(quotas=SimpleNamespace(quotas=SimpleNamespace(entries={"u": 1})))
    assert quotas_apply(some)  # type: ignore[arg-type]
