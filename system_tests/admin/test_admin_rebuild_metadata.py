"""``tierd admin rebuild-metadata`` after ``__remote_log_metadata`` is lost, on both stores.

One broker tiers a topic of one-batch segments (local copies deleted at
once). The broker is stopped and its metadata lost: the metadata topic's
partition directories, the metadata manager's snapshots and committed
offsets. Started again, it has forgotten the tier: offset 0 is out of
range and its log start has moved up to the local log. Then the recovery
procedure of ``broker.admin.rebuild_metadata``:

* without ``--below-log-start`` the tool refuses every segment (exit 4);
* with the broker tiering every 200 ms all along, a dry run lists every
  tiered segment (exact offsets and sizes) and publishes nothing, and
  ``--execute --below-log-start`` publishes them (exit 0) under the
  rebuild hold;
* without a restart the broker serves every record from offset 0 (exact
  values), the hold is gone, ``reconcile`` is clean, the store still holds
  every segment, and a second ``--execute`` publishes nothing;
* objects of a topic the cluster does not have are reported (exit 4), not
  published.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from storage.remote.naming import uuid_str
from system_tests.admin.tool import Result, run_admin
from system_tests.tiered_helpers import (
    EARLIEST,
    OFFSET_OUT_OF_RANGE,
        FsTier,
    RemoteTier,
    create_tiered_topic,
    fetch_until_answer,
    lose_remote_metadata,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    store_args,
    wait_tiered,
)

# 6 one-batch segments: 5 closed ones tier (and leave the disk), the active one stays.
BATCHES = 6
PER_BATCH = 3
TIERED = BATCHES - 1
EXIT_OK, EXIT_FINDINGS = 0, 4
REBUILDING = "tierd.remote.metadata.rebuilding"


def _rebuild(bootstrap: str, store: list[str], *extra: str) -> tuple[Result, Any]:
    res = run_admin(bootstrap, "--json", "rebuild-metadata", *store, *extra)
    assert res.returncode in (EXIT_OK, EXIT_FINDINGS), res.stderr
    return res, res.json()


def test_rebuild_restores_every_tiered_record(request: pytest.FixtureRequest, tmp_path: Path,
                                              tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(BATCHES, PER_BATCH)
    expected = [r for b in batches for r in b]
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
    logs = wait_tiered(broker, tier, topic, TIERED)
    sizes = {tier.start_offset_of(n): len(tier.read(n)) for n in logs}
    store = store_args(tier)

    assert broker.stop() == 0
    lose_remote_metadata(broker.data_dir)
    broker.start()
    with raw(broker) as client:
        lost = fetch_until_answer(client, topic, 0, 0)
        assert lost.error_code == OFFSET_OUT_OF_RANGE, lost
        assert offset_for(client, topic, EARLIEST) == bases[-1]

    # Refused while the broker's log start is above the tiered segments.
    res, refused = _rebuild(broker.bootstrap, store)
    assert res.returncode == EXIT_FINDINGS
    assert len(refused["segments"]) == TIERED and refused["publishable"] == 0
    assert all(s["action"].startswith("skipped: below the log start") for s in refused["segments"])

    # A dry run lists every tiered segment (the broker keeps tiering meanwhile,
    # every few hundred ms), then publishing with the hold in place.
    res, dry = _rebuild(broker.bootstrap, store, "--below-log-start")
    assert res.returncode == EXIT_OK, res.stdout
    assert dry["execute"] is False and dry["published"] == 0
    assert dry["publishable"] == TIERED and dry["known_segments"] == 0
    assert [(s["start_offset"], s["end_offset"], s["size"], s["action"]) for s in dry["segments"]] \
        == [(b, b + PER_BATCH - 1, sizes[b], "would publish") for b in bases[:-1]]
    with raw(broker) as client:
        assert read_metadata(client, topic).segments == {}

    res, done = _rebuild(broker.bootstrap, store, "--execute", "--below-log-start")
    assert res.returncode == EXIT_OK, res.stdout
    assert done["published"] == TIERED
    assert {s["action"] for s in done["segments"]} == {"published"}

    # No restart: the log start came back with the metadata, the hold is gone,
    # and the leader's tiering runs on without deleting what was republished.
    with raw(broker) as client:
        assert offset_for(client, topic, EARLIEST) == 0
        assert [r for _, r in read_all(client, topic)] == expected
        assert sorted(s.start_offset for s in read_metadata(client, topic).finished()) \
            == bases[:-1]
    configs = run_admin(broker.bootstrap, "--json", "topics", "describe-configs", topic)
    assert configs.returncode == EXIT_OK, configs.stderr
    assert REBUILDING not in {c["name"] for c in configs.json()}, configs.stdout
    assert set(tier.log_objects(topic)) == set(logs)

    res = run_admin(broker.bootstrap, "--json", "reconcile", *store)
    assert res.returncode == EXIT_OK, res.stdout
    assert res.json()["segments"] == {"COPY_SEGMENT_FINISHED": TIERED}

    res, again = _rebuild(broker.bootstrap, store, "--execute")
    assert res.returncode == EXIT_OK, res.stdout
    assert (again["known_segments"], again["publishable"], again["published"]) == (TIERED, 0, 0)
    assert again["segments"] == []
    assert set(tier.log_objects(topic)) == set(logs)

    # A segment of a topic the cluster does not have is reported, never published.
    ghost_uuid = uuid_str(uuid.uuid4())
    for name in tier.objects(topic):
        if name.startswith(logs[0].rsplit(".", 1)[0] + "."):
            directory, _, file_name = name.replace(f"{topic}-", f"gone{topic}-", 1).rpartition("/")
            if isinstance(tier, FsTier):
                (tier.root / directory).mkdir(exist_ok=True)
            tier.write(f"{directory}/{file_name[:21]}{ghost_uuid}{file_name[43:]}", b"")
    res = run_admin(broker.bootstrap, "rebuild-metadata", *store, "--execute")
    assert res.returncode == EXIT_FINDINGS, res.stderr
    assert f"{TIERED} segments already in __remote_log_metadata; 0 to rebuild" in res.stdout
    res, gone = _rebuild(broker.bootstrap, store, "--execute")
    assert [(s["partition"], s["start_offset"], s["action"]) for s in gone["segments"]] == [
        (f"gone{topic}-0", bases[0], "skipped: topic no longer exists")]
    assert gone["published"] == 0
