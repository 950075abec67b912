"""Shared helpers for the unit tests: a fake clock, log configs, batch builders."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from config.broker import BrokerConfig
from config.topic import LogConfig, TopicConfigs
from protocol import records

# A realistic wall-clock time (2023-11-14) so timestamp checks behave as in production.
T0 = 1_700_000_000_000


class FakeClock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def log_config(**overrides: object) -> LogConfig:
    """The broker-default LogConfig with ``overrides`` applied."""
    base = TopicConfigs(BrokerConfig.from_mapping({})).log_config()
    return dataclasses.replace(base, **overrides)


def batch(
    values: Sequence[bytes | None],
    *,
    timestamp: int = T0,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = records.Compression.NONE,
    keys: Sequence[bytes | None] | None = None,
) -> bytearray:
    """A produce-style record batch (offsets 0..n-1, epoch -1) as a mutable buffer."""
    pairs = list(zip(keys if keys is not None else [None] * len(values), values, strict=True))
    return bytearray(records.build_batch(
        pairs, timestamp=timestamp, timestamps=timestamps, compression=compression,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
    ))


def decode_all(data: bytes) -> list[records.Record]:
    """Decode every batch in ``data``, asserting each is whole and CRC-valid."""
    out: list[records.Record] = []
    consumed = 0
    for header in records.iter_headers(data):
        assert header.magic == records.MAGIC_V2
        assert records.crc_ok(data, header), f"corrupt batch at offset {header.base_offset}"
        out.extend(records.decode_records(data, header))
        consumed = header.position + header.size
    assert consumed == len(data), "read returned a partial batch"
    return out


class LogEnv:
    """Opens one partition's log in one directory with one fake clock; the
    fixtures using it close every opened log at the end."""

    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        self.dir = str(tmp_path / "topic-0")
        self.clock = FakeClock()
        self.opened: list = []
        self.config: dict = {}

    def open(self, **kw):  # type: ignore[no-untyped-def]
        """Open the log; ``config`` overrides stick for later reopens."""
        from storage.log.log import Log

        self.config.update(kw.pop("config", {}))
        lg = Log.open(self.dir, "topic", 0, log_config(**self.config), self.clock, **kw)
        self.opened.append(lg)
        return lg

    def reopen(self, lg, **kw):  # type: ignore[no-untyped-def]
        lg.close()
        return self.open(**kw)

    def files(self, suffix: str) -> list[str]:
        import os

        return sorted(n for n in os.listdir(self.dir) if n.endswith(suffix))
