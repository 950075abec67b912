"""Segment copies in worker processes, off the broker's interpreter.

Why: a copy through boto3 spends most of its CPU in Python (request
signing, checksums, the HTTP client), and in the broker's worker threads it
holds the GIL against the event loop that serves produce: measured with the
S3 store, produce p99 at a steady 2,000 msg/s rose 2-2.5x while segments
were being tiered. A copy run in another process costs the broker only the
wait for its answer. Measured on the 2-core development machine (tiered
benchmark, S3 behind the latency model, the simulated store niced as a
real one is on other machines): produce p99 tiering on/off 1.05-1.94x with
copies in the broker's threads, 0.99-1.11x with one worker. So the default
(-1) is one worker for S3 and none for the directory store, whose copies
are file copies; the workers run in the idle scheduling class
(``storage.worker_priority``). (An earlier measurement, with the
store at normal priority and the model in the benchmark's own process,
had found the workers worse.)

How: a ``ProcessCopier`` owns a pool of ``spawn``ed processes
(tierd.remote.copy.processes); each builds its own storage manager from the
broker's class name and ``rsm.config.*`` settings once, and runs
``copy_log_segment_data`` for the metadata and the local file paths it is
sent (both pickled; segments are read from disk by the worker, never sent
through the pipe). The copier thread that submitted the copy waits for the
answer, so remote.log.manager.copier.thread.pool.size still bounds copies in
flight, and the copy task's cancellation and cleanup rules are unchanged.

Error handling: a storage error comes back as the same ``RemoteStorageError``
(pickled with its ``retriable``); a worker that dies (killed, out of memory)
fails its copy as a retriable ``RemoteStorageError`` and the pool is
rebuilt for the next copy. Workers exit when the broker closes the pool or
its process goes away (their pipe closes).
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import threading
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import structlog

from config.log_output import configure_logging
from storage.remote.types import LogSegmentData, RemoteLogSegmentMetadata, RemoteStorageError
from storage.worker_priority import lower_to_background

log = structlog.get_logger(__name__)

# The worker's storage manager, built by ``_start_worker``.
_worker_rsm: Any = None


def _start_worker(class_name: str, settings: dict[str, str], log_level: int) -> None:
    global _worker_rsm
    # Copies are background work: on a busy machine the broker's own process
    # (the event loop serving produce) must win the CPU.
    lower_to_background()
    configure_logging(log_level)
    from storage.remote.codec_storage import load_storage

    _worker_rsm = load_storage(class_name, settings)


def _copy_in_worker(metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
    result: bytes | None = _worker_rsm.copy_log_segment_data(metadata, data)
    return result


class ProcessCopier:
    """``copy_log_segment_data`` with the storage manager's contract, run in
    one of ``processes`` worker processes. Thread-safe; blocks the caller."""

    def __init__(self, class_name: str, settings: Mapping[str, str], processes: int,
                 log_level: int = logging.INFO) -> None:
        self._args = (class_name, dict(settings), log_level)
        self._processes = processes
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    def _current_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RemoteStorageError("the broker is shutting down", retriable=True)
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self._processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker, initargs=self._args)
            return self._pool

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """See RemoteStorageManager.copy_log_segment_data.

        Raises:
            RemoteStorageError: the worker's, or a retriable one when the
                worker process died or the pool is closed.
        """
        pool = self._current_pool()
        try:
            return pool.submit(_copy_in_worker, metadata, data).result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            log.warning("copy worker process died; the copy is retried",
                        segment=str(metadata.remote_log_segment_id), error=str(exc))
            raise RemoteStorageError(f"copy worker process died: {exc}", retriable=True) from None
        except RuntimeError as exc:  # submitted to a pool being shut down
            raise RemoteStorageError(f"copy not run: {exc}", retriable=True) from None

    def close(self) -> None:
        """Stop the workers (a copy in flight fails; the broker is stopping)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
