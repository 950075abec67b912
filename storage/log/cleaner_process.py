"""A log cleaner thread's worker process.

Why a process: a pass decodes every record of the logs it cleans, which is
all CPU in Python; in a thread of the broker it would hold the GIL against
the event loop serving produce and fetch. In its own process, in the idle scheduling class
(``storage.worker_priority``), it
costs the broker a pipe message per step.

How: ``CleanerWorker`` spawns one process (``multiprocessing`` "spawn",
started from the event loop's thread so that the worker's parent-death
signal is tied to the broker's life, not a worker thread's) and sends it
commands over a pipe: ``build_map`` (starting a ``CleaningPass``),
``clean_group`` for each group, ``end_pass``. Answers come back pickled;
only small values cross the pipe, the worker reads and writes segment files
itself.

Error handling: an exception in the worker comes back as ``CleanerError``
with its message; a worker that died (killed, out of memory) fails the call
with ``CleanerError`` and is started afresh for the next pass. The worker
dies with the broker (PR_SET_PDEATHSIG), so a killed broker can never come
back to find a cleaner still writing into its log directory.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

import structlog
import trio

from config.log_output import configure_logging
from storage.worker_priority import lower_to_background

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1


class CleanerError(Exception):
    """A cleaning step failed in the worker, or the worker died."""

    def __init__(self, message: str, corrupt: bool = False) -> None:
        super().__init__(message)
        self.corrupt = corrupt


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pipe closing still ends an idle worker
    if os.getppid() != parent_pid:
        os._exit(0)


def _worker_main(conn: Connection, parent_pid: int, log_level: int) -> None:
    _die_with_parent(parent_pid)
    lower_to_background()  # cleaning waits; the broker's event loop does not
    configure_logging(log_level)
    from storage.log.cleaner_pass import CleaningPass, CorruptLog

    current: CleaningPass | None = None
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if method == "build_map":
                current = CleaningPass(*args)
                result: Any = current.build_map()
            elif method == "clean_group":
                assert current is not None, "clean_group before build_map"
                result = current.clean_group(*args)
            else:
                current = None
                result = None
        except CorruptLog as exc:
            result = CleanerError(str(exc), corrupt=True)
        except Exception as exc:  # reported to the broker, which logs and counts it
            result = CleanerError(f"{type(exc).__name__}: {exc}")
        conn.send(result)


class CleanerWorker:
    """One worker process and the pipe to it. Event loop only."""

    def __init__(self, log_level: int = logging.INFO) -> None:
        self._log_level = log_level
        self._process: Any = None
        self._conn: Connection | None = None

    def start(self) -> None:
        """Start the process now, if it is not running: starting one holds the
        event loop for several milliseconds (fork, exec), so the cleaner does
        it when the broker starts rather than in the middle of its first pass
        (or again after a worker died, then inevitably in its next pass)."""
        if self._conn is None:
            self._start()

    def _start(self) -> Connection:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(theirs, os.getpid(), self._log_level),
                              name="tierd-log-cleaner", daemon=True)
        process.start()
        theirs.close()
        self._process, self._conn = process, ours
        log.info("log cleaner worker started", pid=process.pid)
        return ours

    async def call(self, method: str, *args: object) -> Any:
        """Run ``method`` in the worker and return its answer.

        Raises:
            CleanerError: the step failed, or the worker died.
        """
        conn = self._conn if self._conn is not None else self._start()
        try:
            conn.send((method, args))
            result = await trio.to_thread.run_sync(conn.recv, abandon_on_cancel=True)
        except (EOFError, OSError, BrokenPipeError) as exc:
            self.close()
            raise CleanerError(f"cleaner worker died: {exc!r}") from None
        except BaseException:
            # Cancelled mid-step: the worker's answer would arrive out of turn.
            self.close()
            raise
        if isinstance(result, CleanerError):
            raise result
        return result

    def close(self) -> None:
        """Stop the worker (a step in flight is abandoned)."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is not None and process.is_alive():
            process.kill()
            process.join(1)
        if conn is not None:
            conn.close()
