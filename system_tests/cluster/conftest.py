"""Cluster-mode fixtures: a real ZooKeeper (session-wide) and three tierd brokers
registered under a fresh chroot per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from system_tests.cluster.cluster import Cluster
from system_tests.conftest import REGISTRY_KEY
from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    MotoServer,
    aws_test_env,
    moto_server,
    s3_bucket,
)
from system_tests.tiered_helpers import RemoteTier, make_tier
from system_tests.zkserver import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer,
            tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers (ids 1-3), not started: call ``cluster.start()``."""
    chroot = zookeeper.make_chroot(f"/tierd-{uuid.uuid4().hex[:8]}")
    c = Cluster(chroot, tmp_path, request.config.stash[REGISTRY_KEY])
    yield c
    c.close()


@pytest.fixture(params=("fs", "s3"))
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    """The remote tier every broker of the cluster shares: one directory, or one
    bucket on the session's moto server (real HTTP)."""
    return make_tier(request, tmp_path)
