"""Fixtures for the tiered-storage system tests.

* `tier` - parametrised over both built-in remote storage managers: "fs"
  (a directory) and "s3" (a bucket on the session's moto server, reached by
  the broker over real HTTP). A test that needs the fault proxy asks for
  `s3_tier_behind_proxy` instead.
* the moto server, bucket, proxy and fake-credential fixtures of
  system_tests/s3_fixtures.py, shared by every module in this directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    FaultProxy,
    MotoServer,
    aws_test_env,
    fault_proxy,
    moto_server,
    s3_bucket,
)
from system_tests.tiered_helpers import RemoteTier, S3Tier, make_tier

RSM_KINDS = ("fs", "s3")


@pytest.fixture(params=RSM_KINDS)
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    """The remote tier of the test's broker: a directory, or a fresh S3 bucket."""
    return make_tier(request, tmp_path)


@pytest.fixture
def s3_tier_behind_proxy(moto_server: MotoServer, s3_bucket: str,  # noqa: F811
                         fault_proxy: FaultProxy, aws_test_env: dict[str, str]  # noqa: F811
                         ) -> S3Tier:
    """An S3 tier whose broker talks to moto through the fault-injecting proxy."""
    return S3Tier(moto_server.client(), s3_bucket, fault_proxy.endpoint_url)
