"""Which remote tier a broker gets when its configuration names none."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.tiering import build_tiering
from config import BrokerConfig, ConfigError


def _config(tmp_path: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({"log.dir": str(tmp_path / "data"),
                                      "remote.log.storage.system.enable": "true", **extra})


def test_a_cluster_broker_without_a_shared_directory_tier_refuses_to_start(
        tmp_path: Path) -> None:
    # Before building anything else: nothing is created under the log dir.
    with pytest.raises(ConfigError, match="rsm.config.dir.*every broker shares"):
        build_tiering(_config(tmp_path, **{"zookeeper.connect": "127.0.0.1:1"}),
                      None, None, None, None, cluster=True)  # type: ignore[arg-type]
    assert not (tmp_path / "data-remote").exists()
