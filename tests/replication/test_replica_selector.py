"""The rack-aware replica selector (KIP-392) on a real partition's state."""

from __future__ import annotations

import uuid

import pytest

from config import BrokerConfig, TopicConfigs
from replication.metadata_cache import PartitionState
from replication.replica_manager import ReplicaManager
from replication.replica_selector import LEADER, preferred_read_replica
from storage.log.manager import LogManager
from tests.helpers import batch

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}
TP = ("t", 0)


@pytest.fixture
def part(tmp_path):
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1"})
    rm = ReplicaManager(config, LogManager(config))
    p = rm.become_leader(TP, uuid.uuid4(), TopicConfigs(config, {}).log_config(),
                         PartitionState(1, 0, [1, 2, 3, 4], [1, 2, 3]))
    p.log.append_as_leader(batch([b"x"] * 10), 0)
    yield p
    p.log.close()


def pick(part, rack: str, offset: int = 5) -> int:
    return preferred_read_replica(part, 1, rack, offset, RACKS.get)


def test_no_rack_or_the_leaders_rack_reads_the_leader(part):
    part.follower_end_offsets.update({2: 10, 3: 10})
    assert pick(part, "") == LEADER
    assert pick(part, "a") == LEADER
    assert pick(part, "nowhere") == LEADER


def test_the_furthest_in_sync_follower_of_the_rack_that_has_the_offset(part):
    part.follower_end_offsets.update({2: 7, 3: 10, 4: 10})
    assert pick(part, "b") == 3
    part.follower_end_offsets[2] = 10
    assert pick(part, "b") == 2  # a tie goes to the lower id
    assert pick(part, "b", offset=11) == LEADER  # neither has it yet
    # Replica 4 (rack c) has everything but is out of the ISR: not chosen.
    assert pick(part, "c") == LEADER
