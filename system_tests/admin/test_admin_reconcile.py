"""``tierd admin reconcile`` against a live tiered broker, on both stores.

One broker tiers a topic of one-batch segments to a directory or to a
bucket on a moto server (real HTTP). The tool runs as its own process with
the broker's store settings (``--config`` file plus ``--override``), and:

* finds nothing on the clean tier (exit 0), with the right counts;
* after the test plants orphans (a segment's objects copied under a new
  uuid, a lone segment-named object, a file tierd never writes), deletes
  one segment's .log and truncates another's, reports exactly those
  (exit 4);
* with ``--delete-orphans`` keeps everything within the grace period, and
  with ``--grace-seconds 0`` deletes the two orphan segments and nothing
  else (checked in the store itself);
* once the test restores the two damaged .log objects, is clean again and
  a consumer reads every record from offset 0 through the remote tier.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from storage.remote.naming import uuid_str
from system_tests.admin.tool import Result, run_admin
from system_tests.tiered_helpers import (
    FsTier,
    RemoteTier,
    create_tiered_topic,
    numbered_batches,
    produce_batches,
    raw,
    start_tiered,
    wait_tiered,
)

# 7 one-batch segments: 6 closed ones tier, the active one stays local.
BATCHES = 7
PER_BATCH = 3
TIERED = BATCHES - 1
EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_FINDINGS = 0, 2, 3, 4
# Bound for the consumer reading the topic back.
CONSUME_TIMEOUT_S = 30.0


def _store_args(tier: RemoteTier, tmp_path: Path) -> list[str]:
    """The broker's store settings: all but one in a properties file, one as an override."""
    settings = tier.broker_overrides()
    last = sorted(settings)[-1]
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != last))
    return ["--config", str(path), "--override", f"{last}={settings[last]}"]


def _reconcile(bootstrap: str, store: list[str], *extra: str) -> tuple[Result, Any]:
    res = run_admin(bootstrap, "--json", "reconcile", *store, *extra)
    assert res.returncode in (EXIT_OK, EXIT_FINDINGS), res.stderr
    return res, res.json()


def _with_uuid(name: str, segment_uuid: str) -> str:
    """``name`` with its segment uuid (after the 20-digit offset) replaced."""
    directory, _, file_name = name.rpartition("/")
    return f"{directory}/{file_name[:21]}{segment_uuid}{file_name[43:]}"


def _consume_all(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=CONSUME_TIMEOUT_S * 1000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        offsets = []
        for record in consumer:
            offsets.append(record.offset)
            if len(offsets) == count:
                break
        return offsets
    finally:
        consumer.close()


def test_reconcile_finds_and_deletes_exactly_the_planted_problems(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(BATCHES, PER_BATCH))
    logs = sorted(wait_tiered(broker, tier, topic, TIERED))
    store = _store_args(tier, tmp_path)
    original = tier.objects()

    # A clean tier: nothing found, every object and segment counted.
    res, clean = _reconcile(broker.bootstrap, store)
    assert res.returncode == EXIT_OK, res.stdout
    assert clean["objects"] == len(original)
    assert clean["segments"] == {"COPY_SEGMENT_FINISHED": TIERED}
    assert clean["partitions"] == 1 and clean["metadata_complete"] is True
    assert (clean["orphans"], clean["missing"], clean["size_mismatches"]) == ([], [], [])

    # Plant orphans and damage two segments.
    copied_stem = logs[0][:-len(".log")]
    copy_uuid, lone_uuid = uuid_str(uuid.uuid4()), uuid_str(uuid.uuid4())
    copies = [_with_uuid(n, copy_uuid) for n in original if n.startswith(copied_stem + ".")]
    for source in (n for n in original if n.startswith(copied_stem + ".")):
        tier.write(_with_uuid(source, copy_uuid), tier.read(source))
    lone = _with_uuid(logs[1], lone_uuid)
    tier.write(lone, b"stray bytes")
    foreign = logs[1].rpartition("/")[0] + "/notes.txt"
    tier.write(foreign, b"not tierd's")
    missing_log, truncated_log = logs[2], logs[3]
    missing_bytes, truncated_bytes = tier.read(missing_log), tier.read(truncated_log)
    tier.delete(missing_log)
    tier.write(truncated_log, truncated_bytes[:-1])
    planted = set(copies) | {lone, foreign}

    res, found = _reconcile(broker.bootstrap, store)
    assert res.returncode == EXIT_FINDINGS
    assert {o["key"] for o in found["orphans"]} == planted
    assert all(o["action"] == "" for o in found["orphans"])
    [missing] = found["missing"]
    assert missing["start_offset"] == tier.start_offset_of(missing_log)
    assert missing["expected_size"] == len(missing_bytes)
    [mismatch] = found["size_mismatches"]
    assert mismatch["key"] == truncated_log
    assert (mismatch["size"], mismatch["expected_size"]) == (len(truncated_bytes) - 1,
                                                            len(truncated_bytes))

    # The default grace period keeps the fresh orphans.
    res, kept = _reconcile(broker.bootstrap, store, "--delete-orphans")
    assert res.returncode == EXIT_FINDINGS
    assert {o["key"]: o["action"] for o in kept["orphans"]} == {
        **{k: "kept: younger than the grace period" for k in planted - {foreign}},
        foreign: "kept: not written by tierd"}
    assert planted <= set(tier.objects())

    # Grace 0: the two orphan segments go; the foreign file and tierd's own objects stay.
    res, deleted = _reconcile(broker.bootstrap, store, "--delete-orphans", "--grace-seconds", "0")
    assert res.returncode == EXIT_FINDINGS  # the damaged segments remain
    assert {o["key"] for o in deleted["orphans"] if o["action"] == "deleted"} == planted - {foreign}
    assert set(tier.objects()) == (set(original) - {missing_log}) | {foreign}

    # Repaired: clean again (the foreign file aside), and everything reads back from 0.
    tier.write(missing_log, missing_bytes)
    tier.write(truncated_log, truncated_bytes)
    tier.delete(foreign)
    res, repaired = _reconcile(broker.bootstrap, store)
    assert res.returncode == EXIT_OK, res.stdout
    assert repaired["objects"] == len(original)
    assert _consume_all(broker.bootstrap, topic, BATCHES * PER_BATCH) == list(
        range(BATCHES * PER_BATCH))


def test_table_output_and_progress_stay_off_json(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    tier = FsTier(tmp_path / "remote")
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(3, PER_BATCH))
    wait_tiered(broker, tier, topic, 2)
    store = _store_args(tier, tmp_path)

    table = run_admin(broker.bootstrap, "reconcile", *store)
    assert table.returncode == EXIT_OK, table.stderr
    assert "2 COPY_SEGMENT_FINISHED" in table.stdout and "no findings" in table.stdout
    as_json = run_admin(broker.bootstrap, "--json", "reconcile", *store)
    assert as_json.json()["segments"] == {"COPY_SEGMENT_FINISHED": 2}


@pytest.mark.parametrize(("bootstrap", "override", "code"), [
    ("127.0.0.1:1", "rsm.config.dir={tmp}", EXIT_UNREACHABLE),
    (None, "remote.log.storage.manager.class.name=no.such.Manager", EXIT_USAGE),
])
def test_errors_are_one_line_and_an_exit_code(tmp_path: Path, bootstrap: str | None,
                                              override: str, code: int) -> None:
    res = run_admin(bootstrap, "--timeout", "2", "reconcile",
                    "--override", override.format(tmp=tmp_path))
    assert res.returncode == code, res.stderr
    assert res.stderr.startswith("tierd admin: ") and res.stdout == ""
