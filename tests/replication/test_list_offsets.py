"""ListOffsets -6, earliest pending upload (KIP-1023), over a real leader's log:
the first offset not tiered yet, never below the log start; "none" for a topic
that is not tiered or a leader that does not know where its tier ends."""

from __future__ import annotations

import uuid

import pytest

from config import BrokerConfig, TopicConfigs
from protocol.errors import ErrorCode, KafkaApiError
from replication.list_offsets import EARLIEST_PENDING_UPLOAD, LATEST_TIERED, lookup
from replication.metadata_cache import PartitionState
from replication.partition import Partition
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager
from tests.helpers import batch


@pytest.fixture
def replicas(tmp_path):
    """A ReplicaManager on a broker with tiered storage on (no remote manager:
    the tier boundary is set by hand, as the copier would)."""
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1",
                                        "remote.log.storage.system.enable": "true"})
    rm = ReplicaManager(config, LogManager(config))
    yield rm
    for lg in rm.logs.logs.values():
        lg.close()


def lead(replicas: ReplicaManager, topic: str, tiered: bool, records: int) -> Partition:
    cfg = TopicConfigs(replicas.config, {"remote.storage.enable": str(tiered).lower(),
                                         "min.insync.replicas": "1"}).log_config()
    part = replicas.become_leader((topic, 0), uuid.uuid4(), cfg,
                                  PartitionState(1, 0, [1], [1]))
    for i in range(records):
        part.log.append_as_leader(batch([b"r%d" % i]), 0)
    return part


async def pending(part: Partition, version: int = 11) -> tuple[int, int, int]:
    return await lookup(part, None, EARLIEST_PENDING_UPLOAD, version, False)


async def test_the_first_offset_not_tiered_with_its_epoch(replicas):
    part = lead(replicas, "t", True, 10)
    assert await pending(part) == (0, -1, 0)  # nothing uploaded: all of it pending
    part.log.highest_tiered_offset = 6
    assert await pending(part) == (7, -1, 0)
    assert await lookup(part, None, LATEST_TIERED, 11, False) == (6, -1, 0)


async def test_never_below_the_log_start(replicas):
    part = lead(replicas, "t", True, 10)
    part.log.highest_tiered_offset = 3
    part.log.advance_log_start_offset(5)
    assert (await pending(part))[0] == 5


async def test_none_when_the_tier_end_is_unknown_or_there_is_no_tier(replicas):
    part = lead(replicas, "t", True, 0)
    part.log.reset_from_remote(0, 4, [(0, 0)], [])  # local log from 4, log from 0...
    part.log.highest_tiered_offset = -1  # ...but no tiered segment is known here
    assert (part.log.log_start_offset, part.log.local_log_start_offset) == (0, 4)
    assert await pending(part) == (-1, -1, -1)
    plain = lead(replicas, "p", False, 3)
    assert await pending(plain) == (-1, -1, -1)


async def test_needs_version_11(replicas):
    part = lead(replicas, "t", True, 1)
    with pytest.raises(KafkaApiError) as err:
        await pending(part, version=10)
    assert err.value.code is ErrorCode.UNSUPPORTED_VERSION
