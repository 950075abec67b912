"""Fixtures: a real single-node broker core (metadata, ReplicaManager, topic
writer, internal topics) in a temp dir and a running GroupCoordinator.

The coordinator's wall clock follows trio's clock (offset to a realistic
epoch), so with ``autojump_clock`` both session timers and offset retention
move together and tests never sleep for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.coordinator import GroupCoordinator
from config import BrokerConfig
from replication.local_admin import SingleNode, open_single_node
from tests.helpers import T0

# Small so a test's __consumer_offsets is cheap to create and replay.
OFFSETS_PARTITIONS = 3


def trio_wall_clock() -> int:
    return T0 + int(trio.current_time() * 1000)


def make_config(log_dir: Path, **overrides: str) -> BrokerConfig:
    values = {"log.dirs": str(log_dir), "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return BrokerConfig.from_mapping(values)


def make_node(config: BrokerConfig) -> SingleNode:
    return open_single_node(config, trio_wall_clock)


@pytest.fixture
def config(tmp_path: Path) -> BrokerConfig:
    return make_config(tmp_path)


@pytest.fixture
def node(config: BrokerConfig) -> SingleNode:
    return make_node(config)


@pytest.fixture
async def coordinator(nursery: trio.Nursery, config: BrokerConfig,
                      node: SingleNode) -> GroupCoordinator:
    coord = GroupCoordinator(config, node.internal.offsets, trio_wall_clock)
    await nursery.start(coord.run)
    return coord
