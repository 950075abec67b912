"""The CPU priority of the broker's background work: the worker processes of
the log cleaner (``storage.log.cleaner_process``) and the remote copier
(``storage.remote.copy_process``), and the threads that read the remote
tier ahead of consumers (``storage.remote.chunk_cache``'s prefetch pool).

Their work can wait; the event loop serving produce and fetch cannot. A
niced process still takes its share of a busy core, and one that is running
when the broker wakes for a request keeps the core until the scheduler
decides the broker's turn has come. Linux's SCHED_IDLE class says what is
meant: run only when no ordinary process wants this core, and give it up as
soon as one does. A worker
lowers itself first thing after it starts; where SCHED_IDLE is not
available (not Linux, or refused) it falls back to a high nice value.

On a machine with a core to spare the worker runs there at full speed;
only a core the broker itself keeps busy slows it down, which is the point.

Threads: Linux schedules each thread on its own, so a prefetch thread
streaming a chunk in takes the core from the event loop's thread like any
other process would (on a broker pinned to one core, loop steps of 4-5 ms
with 0.1 ms of their own CPU during a cold catch-up). A pool's threads lower
themselves for good when they start (``lower_thread_to_background`` as the
pool's initializer): an unprivileged thread cannot leave SCHED_IDLE again,
so only threads that do nothing but background work are lowered; the reads
a fetch is waiting on keep the broker's priority. ``started_pool`` makes
such a pool, and ``run_in_pool`` awaits one of its calls from the event loop
(trio's own worker threads are shared, so none of them can be lowered).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")

# The nice value added where SCHED_IDLE cannot be had.
FALLBACK_NICENESS = 10


def _idle_class() -> bool:
    """Move the calling thread into SCHED_IDLE (on Linux, pid 0 is the calling
    thread; a process's first thread moves its later threads with it).
    False where that is not available or not allowed."""
    set_scheduler = getattr(os, "sched_setscheduler", None)
    idle = getattr(os, "SCHED_IDLE", None)
    if set_scheduler is None or idle is None:
        return False
    try:
        set_scheduler(0, idle, os.sched_param(0))
    except OSError:
        return False
    return True


def lower_to_background() -> str:
    """Put the calling process in the idle scheduling class (or nice it); call
    it first thing, before the process starts threads.

    Returns:
        What was applied: "idle" or "nice".
    """
    if _idle_class():
        return "idle"
    os.nice(FALLBACK_NICENESS)
    return "nice"


def lower_thread_to_background() -> str:
    """Put the calling thread (only) in the idle scheduling class, or nice it.

    Returns:
        What was applied: "idle", "nice" or "none" (neither was allowed).
    """
    if _idle_class():
        return "idle"
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FALLBACK_NICENESS)
        return "nice"
    except (OSError, AttributeError):
        return "none"


def started_pool(threads: int, name: str, background: bool = False
                 ) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool whose threads all run already: the executor starts a thread
    on ``submit`` while it has fewer than its maximum, and a thread start waits
    for the new thread to take the GIL, behind whatever threads are busy; the
    event loop submits to these pools, and must not wait for that.
    ``background``: its threads run in the idle scheduling class."""
    pool = concurrent.futures.ThreadPoolExecutor(
        threads, thread_name_prefix=name,
        initializer=lower_thread_to_background if background else None)
    barrier = threading.Barrier(threads + 1)
    for _ in range(threads):
        pool.submit(barrier.wait)
    barrier.wait()  # every thread has started (and is idle once this returns)
    return pool


async def run_in_pool(pool: concurrent.futures.Executor, fn: Callable[..., T], *args: object
                      ) -> T:
    """``fn(*args)`` in ``pool``, awaited from the event loop (the result or
    its exception). Cancelling the wait does not stop the call."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: object) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass  # the loop has stopped; nobody is waiting any more

    future = pool.submit(fn, *args)
    future.add_done_callback(wake)
    await done.wait()
    return future.result()
