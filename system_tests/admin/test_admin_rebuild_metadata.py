"""``tierd admin rebuild-metadata`` after ``__remote_log_metadata`` is lost, on both stores.

One broker tiers a topic of one-batch segments (local copies deleted at
once). The broker is stopped and its metadata lost: the metadata topic's
partition directories, the metadata manager's snapshots and committed
offsets. Started again, it has forgotten the tier: offset 0 is out of
range and its log start has moved up to the local log. Then the recovery
procedure of ``broker.admin.rebuild_metadata``:

* without ``--below-log-start`` the tool refuses every segment (exit 4):
  the leader would delete them;
* restarted with an hour-long tiering interval, a dry run lists every
  tiered segment (exact offsets and sizes) and publishes nothing, and
  ``--execute`` publishes them (exit 0);
* restarted with the partition dropped from ``log-start-offset-checkpoint``
  and the usual settings, the broker serves every record from offset 0
  (exact values), ``reconcile`` is clean, the store still holds every
  segment, and a second ``--execute`` publishes nothing;
* objects of a topic the cluster does not have are reported (exit 4), not
  published.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from storage.remote.naming import uuid_str
from system_tests.admin.tool import Result, run_admin
from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    MotoServer,
    aws_test_env,
    moto_server,
    s3_bucket,
)
from system_tests.tiered_helpers import (
    EARLIEST,
    OFFSET_OUT_OF_RANGE,
    TIERED_BROKER_OVERRIDES,
    FsTier,
    RemoteTier,
    S3Tier,
    create_tiered_topic,
    fetch_until_answer,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

# 6 one-batch segments: 5 closed ones tier (and leave the disk), the active one stays.
BATCHES = 6
PER_BATCH = 3
TIERED = BATCHES - 1
EXIT_OK, EXIT_FINDINGS = 0, 4
# What the broker keeps of the remote log metadata (storage/remote/rlmm_snapshot.py).
METADATA_DIRS = "__remote_log_metadata-*"
RLMM_FILES = ("_rlmm_committed_offsets", "remote-log-metadata-snapshots")
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
TASK_INTERVAL = "remote.log.manager.task.interval.ms"
# An hour: the broker's tiering tasks run once at start-up, then not during the repair.
REPAIR_INTERVAL_MS = 3_600_000


@pytest.fixture(params=("fs", "s3"))
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    """The broker's remote tier: a directory, or a fresh bucket on moto."""
    if request.param == "fs":
        return FsTier(tmp_path / "remote")
    moto: MotoServer = request.getfixturevalue("moto_server")
    request.getfixturevalue("aws_test_env")
    return S3Tier(moto.client(), request.getfixturevalue("s3_bucket"), moto.endpoint_url)


def _store_args(tier: RemoteTier) -> list[str]:
    return [arg for k, v in tier.broker_overrides().items() for arg in ("--override", f"{k}={v}")]


def _rebuild(bootstrap: str, store: list[str], *extra: str) -> tuple[Result, Any]:
    res = run_admin(bootstrap, "--json", "rebuild-metadata", *store, *extra)
    assert res.returncode in (EXIT_OK, EXIT_FINDINGS), res.stderr
    return res, res.json()


def _lose_metadata(data_dir: Path) -> None:
    """Delete every trace of ``__remote_log_metadata`` from a stopped broker's log dir."""
    dirs = list(data_dir.glob(METADATA_DIRS))
    assert dirs, sorted(p.name for p in data_dir.iterdir())
    for path in dirs:
        shutil.rmtree(path)
    for name in RLMM_FILES:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _forget_log_start(data_dir: Path, topic: str) -> None:
    """Drop ``topic``'s entries from the log start checkpoint (version, count, entries)."""
    path = data_dir / LOG_START_CHECKPOINT
    version, _, *entries = path.read_text().splitlines()
    kept = [e for e in entries if e.split()[0] != topic]
    assert len(kept) < len(entries), entries
    path.write_text("\n".join([version, str(len(kept)), *kept]) + "\n")


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
    store = _store_args(tier)

    assert broker.stop() == 0
    _lose_metadata(broker.data_dir)
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

    # Step 1: a tiering interval longer than the repair (only the start-up run happens).
    assert broker.stop() == 0
    broker.overrides[TASK_INTERVAL] = str(REPAIR_INTERVAL_MS)
    broker.start()

    # Step 2: dry run, then publish.
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

    # Step 3: the log start comes back from the rebuilt metadata.
    assert broker.stop() == 0
    _forget_log_start(broker.data_dir, topic)
    broker.overrides[TASK_INTERVAL] = TIERED_BROKER_OVERRIDES[TASK_INTERVAL]
    broker.start()
    with raw(broker) as client:
        assert [r for _, r in read_all(client, topic)] == expected
        assert offset_for(client, topic, EARLIEST) == 0
        assert sorted(s.start_offset for s in read_metadata(client, topic).finished()) \
            == bases[:-1]

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
