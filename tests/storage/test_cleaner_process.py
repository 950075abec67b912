"""CleanerWorker: the log cleaner's worker is a real spawned process, run as
background work (the idle scheduling class), and a dead one is replaced."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from storage.log.cleaner_process import CleanerError, CleanerWorker


async def test_the_worker_runs_in_the_idle_class_and_is_replaced_when_it_dies() -> None:
    worker = CleanerWorker()
    try:
        worker.start()
        first = worker._process.pid
        worker.start()  # running: nothing to do
        assert worker._process.pid == first
        assert await worker.call("end_pass") is None
        assert first != os.getpid()
        assert os.sched_getscheduler(first) == os.SCHED_IDLE
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the broker's own stays

        os.kill(first, signal.SIGKILL)
        with pytest.raises(CleanerError, match="died"):
            with trio.fail_after(10):
                await worker.call("end_pass")
        assert await worker.call("end_pass") is None
        assert worker._process.pid != first
        assert os.sched_getscheduler(worker._process.pid) == os.SCHED_IDLE
    finally:
        worker.close()
