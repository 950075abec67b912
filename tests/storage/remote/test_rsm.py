"""Loading an RSM by config, and the shared settings helpers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from config.defs import ConfigDef, ConfigError, ConfigType
from storage.remote.api import RemoteStorageManager
from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.rsm import load_rsm, parse_rsm_config, rsm_config
from storage.remote.s3 import S3RemoteStorageManager
from storage.remote.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata


class RecordingRSM:
    """A third-party RSM, loaded by dotted path."""

    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        return b"custom"

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        return b""

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return b""

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        pass

    def close(self) -> None:
        pass


class NotAnRSM:
    def __init__(self, config: Mapping[str, str]) -> None:
        pass


def test_load_filesystem(tmp_path: Path) -> None:
    rsm = load_rsm("filesystem", {"dir": str(tmp_path / "tier")})
    assert isinstance(rsm, FileSystemRemoteStorageManager)
    assert isinstance(rsm, RemoteStorageManager)
    assert (tmp_path / "tier").is_dir()


def test_load_s3(aws_test_env: dict[str, str]) -> None:
    rsm = load_rsm("s3", {"bucket": "b", "region": "eu-west-1",
                          "endpoint.url": "http://127.0.0.1:9"})
    assert isinstance(rsm, S3RemoteStorageManager)
    assert rsm.bucket == "b" and rsm.part_size == 16 * 1024 * 1024
    rsm.close()


def test_load_by_dotted_path() -> None:
    rsm = load_rsm(f"{__name__}.RecordingRSM", {"a.b": "c"})
    assert isinstance(rsm, RecordingRSM)
    assert rsm.config == {"a.b": "c"}


@pytest.mark.parametrize(("name", "problem"), [
    ("hdfs", "expected one of"),
    ("no_such_module_tierd.Rsm", "cannot import"),
    (f"{__name__}.Missing", "has no class"),
    (f"{__name__}.NotAnRSM", "does not implement"),
])
def test_load_refuses(name: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        load_rsm(name, {})
    assert info.value.key == "remote.log.storage.manager.class.name"


def test_filesystem_requires_dir() -> None:
    with pytest.raises(ConfigError) as info:
        load_rsm("filesystem", {})
    assert info.value.key == "rsm.config.dir"


def test_rsm_config_strips_prefix() -> None:
    values = {"rsm.config.bucket": "b", "rsm.config.upload.part.size": 5242880,
              "rlmm.config.x": "y", "log.dirs": ["/tmp"]}
    assert rsm_config(values) == {"bucket": "b", "upload.part.size": "5242880"}


def test_parse_rsm_config() -> None:
    defs = (ConfigDef("rsm.config.size", ConfigType.INT, 7, "", at_least=1),
            ConfigDef("rsm.config.name", ConfigType.STRING, None, ""))
    assert parse_rsm_config(defs, {"name": "x", "stray": "secret"}) == {"size": 7, "name": "x"}
    assert parse_rsm_config(defs, {"size": "9"}) == {"size": 9, "name": None}
    with pytest.raises(ConfigError, match="required"):
        parse_rsm_config(defs, {"size": "9"}, required=("name",))
    with pytest.raises(ConfigError, match="at least"):
        parse_rsm_config(defs, {"size": "0"})
