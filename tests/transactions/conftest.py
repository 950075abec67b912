"""Fixtures and builders for the transaction tests: logs in a temp dir, transactional batches."""

from __future__ import annotations

import pytest

from protocol import control, records
from storage.log.log import AppendResult, Log
from storage.log.producer_state import AppendOrigin
from tests.helpers import LogEnv


@pytest.fixture
def env(tmp_path):
    e = LogEnv(tmp_path)
    yield e
    for lg in e.opened:
        lg.close()


class Producer:
    """One transactional producer id writing to a log: data batches with sequences."""

    def __init__(self, lg: Log, pid: int, epoch: int = 0) -> None:
        self.lg = lg
        self.pid = pid
        self.epoch = epoch
        self.seq = 0

    def send(self, *values: bytes, transactional: bool = True) -> AppendResult:
        data = bytearray(records.build_batch(
            [(None, v) for v in values], timestamp=self.lg._clock(), producer_id=self.pid,
            producer_epoch=self.epoch, base_sequence=self.seq,
            attributes=records.ATTR_TRANSACTIONAL if transactional else 0))
        result = self.lg.append_as_leader(data, 0)
        self.seq += len(values)
        return result

    def end(self, committed: bool, coordinator_epoch: int = 0,
            epoch: int | None = None) -> AppendResult:
        return append_marker(self.lg, self.pid, self.epoch if epoch is None else epoch,
                             committed, coordinator_epoch)


def append_marker(lg: Log, pid: int, epoch: int, committed: bool,
                  coordinator_epoch: int = 0) -> AppendResult:
    data = bytearray(control.marker_batch(pid, epoch, committed, coordinator_epoch, lg._clock()))
    return lg.append_as_leader(data, 0, AppendOrigin.COORDINATOR)


def plain(lg: Log, *values: bytes) -> AppendResult:
    data = bytearray(records.build_batch([(None, v) for v in values], timestamp=lg._clock()))
    return lg.append_as_leader(data, 0)
