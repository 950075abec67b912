"""ProcessCopier: segment copies run by the real storage managers (a directory,
and S3 on moto over HTTP) in spawned worker processes."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest

from storage.remote.copy_process import ProcessCopier
from storage.remote.naming import lacks_txn_index
from storage.remote.types import RemoteStorageError
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import SegmentFactory


def copier_for(backend: Backend) -> ProcessCopier:
    return ProcessCopier(backend.name, backend.settings, 1)


def test_a_copy_runs_in_a_worker_process_and_is_read_back(backend: Backend,
                                                          segments: SegmentFactory) -> None:
    copier = copier_for(backend)
    try:
        seg = segments.make(50_000, transaction_index=False)
        manifest = copier.copy_log_segment_data(seg.metadata, seg.data)
        assert lacks_txn_index(dataclasses.replace(seg.metadata, custom_metadata=manifest))
        assert backend.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
        workers = list(copier._pool._processes.values())  # type: ignore[union-attr]
        assert workers and all(w.pid != os.getpid() and w.is_alive() for w in workers)
        # Background work: the workers run in the idle scheduling class.
        assert {os.sched_getscheduler(w.pid) for w in workers} == {os.SCHED_IDLE}
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    finally:
        copier.close()


def test_a_storage_error_comes_back_as_it_was_raised(backend: Backend,
                                                     segments: SegmentFactory) -> None:
    copier = copier_for(backend)
    try:
        seg = segments.make(10_000)
        wrong_size = dataclasses.replace(seg.metadata, segment_size_in_bytes=9_999)
        with pytest.raises(RemoteStorageError) as exc:
            copier.copy_log_segment_data(wrong_size, seg.data)
        assert not exc.value.retriable
        assert backend.stored(seg.metadata) == []  # the failed copy cleaned up
    finally:
        copier.close()


def test_a_dead_worker_fails_its_copy_as_retriable_and_the_next_copy_works(
        backend: Backend, segments: SegmentFactory) -> None:
    copier = copier_for(backend)
    try:
        first = segments.make(10_000)
        copier.copy_log_segment_data(first.metadata, first.data)
        for worker in copier._pool._processes.values():  # type: ignore[union-attr]
            os.kill(worker.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        second = segments.make(10_000, start_offset=100)
        failed = 0
        while True:  # the pool notices the death on its own thread: one copy may still run
            try:
                copier.copy_log_segment_data(second.metadata, second.data)
                break
            except RemoteStorageError as exc:
                assert exc.retriable and "died" in str(exc), exc
                failed += 1
            assert time.monotonic() < deadline
        assert failed <= 1
        assert backend.rsm.fetch_log_segment(second.metadata, 0) == second.log
    finally:
        copier.close()
    with pytest.raises(RemoteStorageError, match="shutting down"):
        copier.copy_log_segment_data(first.metadata, first.data)


def test_by_default_object_store_copies_run_in_one_worker_and_directory_copies_in_threads(
        backend: Backend) -> None:
    from broker.tiering import copy_processes

    # -1 (the default): one worker for S3, GCS and Azure, whose copies are
    # their SDKs' Python code; none for the directory store (file copies).
    assert copy_processes(-1, backend.rsm) == (0 if backend.name == "filesystem" else 1)
    assert copy_processes(0, backend.rsm) == 0
    assert copy_processes(3, backend.rsm) == 3
