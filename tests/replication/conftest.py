"""A ReplicaManager over real logs in a temporary directory, for the
replication unit tests (``replicas``)."""

from __future__ import annotations

import pytest

from config import BrokerConfig
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager


@pytest.fixture
def replicas(tmp_path):
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1",
                                        "replica.lag.time.max.ms": "1000"})
    rm = ReplicaManager(config, LogManager(config))
    yield rm
    for lg in rm.logs.logs.values():
        lg.close()
