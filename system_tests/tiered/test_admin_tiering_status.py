"""``tierd admin tiering status`` against one tiered broker, on both stores.

Every figure the tool prints is checked against what can be seen without
it: the objects in the remote tier, the segment files on the broker's disk,
and ListOffsets answers (-2, -4, -5, -1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replication.list_offsets import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED
from system_tests.admin.tool import ok, run_admin
from system_tests.tiered_helpers import (
    RemoteTier,
    create_tiered_topic,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    start_tiered,
    wait_tiered,
)

# One batch per segment: 8 segments, 7 of them tiered, 2 records each.
BATCHES = 8
PER_BATCH = 2


def test_status_matches_the_tier_the_disk_and_list_offsets(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    plain = f"{topic}-plain"
    create_tiered_topic(broker, plain, remote_storage_enable="false")
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(BATCHES, PER_BATCH))
        remote = wait_tiered(broker, tier, topic, BATCHES - 1)
        offsets = {ts: offset_for(client, topic, ts)
                   for ts in (EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST)}

    [row] = ok(broker.bootstrap, "--json", "tiering", "status", topic).json()
    assert (row["topic"], row["partition"], row["leader"]) == (topic, 0, 0)
    assert row["log_start_offset"] == offsets[EARLIEST] == 0
    assert row["local_log_start_offset"] == offsets[EARLIEST_LOCAL]
    assert row["highest_tiered_offset"] == offsets[LATEST_TIERED]
    assert row["log_end_offset"] == row["high_watermark"] == offsets[LATEST] \
        == BATCHES * PER_BATCH
    assert row["remote_segments"] == len(remote) == BATCHES - 1
    assert row["remote_bytes"] == sum(len(tier.read(name)) for name in remote)
    local = list((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert row["local_segments"] == len(local) == 1
    assert row["local_bytes"] == sum(p.stat().st_size for p in local)
    assert (row["copy_lag_segments"], row["copy_lag_bytes"]) == (0, 0)
    assert row["followers"] == [] and row["remote_storage_enabled"] is True

    # The table names the same figures; internal topics only on request.
    table = ok(broker.bootstrap, "tiering", "status").stdout
    assert topic in table and "__consumer_offsets" not in table
    assert "__remote_log_metadata" in ok(broker.bootstrap, "tiering", "status",
                                         "--internal").stdout
    [plain_row] = ok(broker.bootstrap, "--json", "tiering", "status", plain).json()
    assert plain_row["remote_storage_enabled"] is False
    assert plain_row["highest_tiered_offset"] == -1

    # --replicas: one row per replica (one broker here), with its role.
    [replica] = ok(broker.bootstrap, "--json", "tiering", "status", topic,
                   "--replicas").json()
    assert (replica["broker"], replica["role"], replica["state"]) == (0, "leader", "Leading")

    # --watch with --count: one JSON document per refresh.
    watched = ok(broker.bootstrap, "--json", "tiering", "status", topic, "--watch", "0.1",
                 "--count", "2").stdout.splitlines()
    assert len(watched) == 2 and all(topic in line for line in watched)


def test_dump_metadata_prints_each_copy_decoded(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    other = f"{topic}-other"
    for name in (topic, other):
        create_tiered_topic(broker, name)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(4, PER_BATCH))
        produce_batches(client, other, 0, numbered_batches(3, PER_BATCH))
        wait_tiered(broker, tier, topic, 3)
        wait_tiered(broker, tier, other, 2)

    def dump(*extra: str) -> list[dict]:
        out = ok(broker.bootstrap, "tiering", "dump-metadata", *extra).stdout
        return [json.loads(line) for line in out.splitlines()]

    def name(event: dict) -> str:
        tip = (event.get("remote_log_segment_id") or event)["topic_id_partition"]
        return tip["name"]

    lines = dump("--topic", topic)
    events = [line["event"] for line in lines]
    assert {name(e) for e in events} == {topic}
    # Each segment: its metadata (COPY_SEGMENT_STARTED), then the update that finished it.
    started = [e for e in events if e["type"] == "REMOTE_LOG_SEGMENT_METADATA"]
    assert [(e["start_offset"], e["end_offset"]) for e in started] == [(0, 1), (2, 3), (4, 5)]
    assert {e["remote_log_segment_state"] for e in started} == {"COPY_SEGMENT_STARTED"}
    finished = {e["remote_log_segment_id"]["id"] for e in events
                if e["type"] == "REMOTE_LOG_SEGMENT_METADATA_UPDATE"
                and e["remote_log_segment_state"] == "COPY_SEGMENT_FINISHED"}
    assert finished == {e["remote_log_segment_id"]["id"] for e in started}
    assert all(e["segment_leader_epochs"] == [{"leader_epoch": 0, "offset": e["start_offset"]}]
               for e in started)
    # Offsets rise within each metadata partition; every record has one.
    for partition in {line["partition"] for line in lines}:
        offsets = [line["offset"] for line in lines if line["partition"] == partition]
        assert offsets == sorted(offsets)
    everything = dump()
    assert {name(line["event"]) for line in everything} == {topic, other}
    assert len(everything) == len(lines) + 2 * 2  # the other topic's two segments


def test_status_errors_are_one_line_and_an_exit_code(broker_factory, topic: str) -> None:
    broker = broker_factory()
    unknown = run_admin(broker.bootstrap, "tiering", "status", topic)
    assert unknown.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr and topic in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    down = run_admin("127.0.0.1:1", "--timeout", "2", "tiering", "status")
    assert down.returncode == 3 and "no broker reachable" in down.stderr
    usage = run_admin(broker.bootstrap, "tiering", "status", "--count", "x")
    assert usage.returncode == 2
