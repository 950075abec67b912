"""Fixtures for the ``tierd admin`` system tests: ``tier``, the broker's
remote tier over both built-in stores ("fs": a directory, "s3": a fresh
bucket on the session's moto server), with the moto fixtures it needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    aws_test_env,
    moto_server,
    s3_bucket,
)
from system_tests.tiered_helpers import RemoteTier, make_tier


@pytest.fixture(params=("fs", "s3"))
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    """The broker's remote tier: a directory, or a fresh bucket on moto."""
    return make_tier(request, tmp_path)
