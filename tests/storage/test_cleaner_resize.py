"""log.cleaner.threads changed on a running broker: cleaner tasks start at once
and stop between passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from config.broker import BrokerConfig
from storage.log import cleaner as cleaner_module
from storage.log.cleaner import LogCleaner


class FakeWorker:
    """Stands for the worker process: counts starts and closes."""

    live = 0

    def start(self) -> None:
        FakeWorker.live += 1

    def close(self) -> None:
        FakeWorker.live -= 1

    async def call(self, method: str, *args: Any) -> Any:
        raise AssertionError("no log to clean")


async def test_resize_starts_and_stops_cleaner_tasks(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     autojump_clock: trio.testing.MockClock
                                                     ) -> None:
    monkeypatch.setattr(cleaner_module, "CleanerWorker", FakeWorker)
    config = BrokerConfig.from_mapping({"log.dir": str(tmp_path), "log.cleaner.threads": "1",
                                        "log.cleaner.backoff.ms": "1000"})
    cleaner = LogCleaner(config, {}, lambda: 0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cleaner.run, lambda tp: 0)
        await trio.testing.wait_all_tasks_blocked()
        assert FakeWorker.live == 1
        cleaner.resize(3)
        await trio.testing.wait_all_tasks_blocked()
        assert (FakeWorker.live, len(cleaner._workers)) == (3, 3)
        cleaner.resize(2)
        await trio.sleep(1.5)  # one backoff: idle surplus tasks look at the count again
        assert (FakeWorker.live, len(cleaner._workers)) == (2, 2)
        nursery.cancel_scope.cancel()
    assert FakeWorker.live == 0
