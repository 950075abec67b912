"""Compaction of ``__remote_log_metadata`` on one broker (issue 26).

A broker that compacts on every snapshot interval (100 ms, no minimum)
tiers segments and deletes most of them (DeleteRecords moves the log
start, remote retention deletes what lies below). The metadata topic then
holds only the restatement of the live segments and what came after;
every live segment stays readable, no deleted one comes back. The broker
is then SIGKILLed while it tiers, deletes and compacts, several times, and
restarted; finally restarted with its local snapshot files gone, so its
metadata comes from the compacted topic alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from system_tests._proc import TierdProc
from system_tests.admin.tool import ok, run_admin
from system_tests.tiered_helpers import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
    EARLIEST,
    LATEST,
    METADATA_PARTITIONS,
    METADATA_TOPIC,
    FsTier,
    Rec,
    create_tiered_topic,
    delete_records,
    eventually,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

COMPACTING = {
    "rlmm.config.remote.log.metadata.snapshot.interval.ms": "100",
    "rlmm.config.remote.log.metadata.compaction.min.superseded.records": "0",
}
PER_BATCH = 2


def metadata_starts(broker: TierdProc) -> list[int]:
    with raw(broker) as client:
        return [offset_for(client, METADATA_TOPIC, EARLIEST, p)
                for p in range(METADATA_PARTITIONS)]


def check(broker: TierdProc, tier: FsTier, topic: str, produced: list[Rec],
          deleted_starts: set[int]) -> None:
    """Every record from the log start reads back; the remote tier holds exactly the
    live segments of the metadata; no deleted segment is in the metadata again."""
    with raw(broker) as client:
        start = offset_for(client, topic, EARLIEST)
        assert offset_for(client, topic, LATEST) == len(produced)
        assert [r for _, r in read_all(client, topic, start=start)] == produced[start:]

        def settled() -> bool:
            metadata = read_metadata(client, topic)
            live = {s.start_offset for s in metadata.segments.values()
                    if s.states[-1] in (COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED)}
            objects = {tier.start_offset_of(n) for n in tier.log_objects(topic, 0)}
            return live == objects and not live & deleted_starts

        eventually(settled, lambda: f"metadata {read_metadata(client, topic)}, objects "
                                    f"{tier.log_objects(topic, 0)}, deleted {deleted_starts}")


def test_compaction_survives_sigkill_and_keeps_every_live_segment(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    tier = FsTier(tmp_path / "remote")
    broker = start_tiered(request, tmp_path / "broker", tier, COMPACTING)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(10, PER_BATCH, tag="first")
    produced = [r for b in batches for r in b]
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
        wait_tiered(broker, tier, topic, len(bases) - 1)
    # The first 7 segments go: remote retention deletes what lies below the log start.
    delete_records(broker, topic, 0, bases[7])
    deleted = set(bases[:7])
    eventually(lambda: not {tier.start_offset_of(n) for n in tier.log_objects(topic, 0)}
               & deleted, lambda: f"objects {tier.log_objects(topic, 0)}")
    eventually(lambda: any(metadata_starts(broker)), lambda: f"{metadata_starts(broker)}")
    with raw(broker) as client:
        metadata = read_metadata(client, topic)
    # The restatement of the live segments is left, and what came after it: the
    # deletion of segments whose copy it restated, if it came between the
    # expirations (the next compaction drops them once worth it).
    assert {s.start_offset for s in metadata.segments.values()
            if s.states == [COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED]} == set(bases[7:-1])
    assert all(s.states[-1] == DELETE_SEGMENT_FINISHED for s in metadata.segments.values()
               if s.start_offset in deleted)
    assert len(metadata.segments) < len(bases)
    check(broker, tier, topic, produced, deleted)

    # SIGKILL at three points: before the expiration of the segments below
    # the new log start, as soon as their remote objects are gone (their
    # DELETE_SEGMENT_FINISHED records being written, compaction due within
    # 100 ms), and as soon as the metadata log start moved (compaction just
    # done: the snapshot files and the log-start checkpoint not written yet).
    for kill in ("expiring", "deleted", "compacted"):
        more = numbered_batches(3, PER_BATCH, tag=kill)
        with raw(broker) as client:
            new_bases = produce_batches(client, topic, 0, more)
        produced += [r for b in more for r in b]
        bases += new_bases
        wait_tiered(broker, tier, topic, len([b for b in bases if b not in deleted]) - 1)
        starts = metadata_starts(broker)
        delete_records(broker, topic, 0, new_bases[1])
        going = {b for b in bases if b < new_bases[1]} - deleted
        deleted |= going
        if kill != "expiring":
            eventually(lambda going=going: not going & {
                tier.start_offset_of(n) for n in tier.log_objects(topic, 0)},
                lambda: f"objects {tier.log_objects(topic, 0)}", interval_s=0.01)
        if kill == "compacted":
            eventually(lambda starts=starts: metadata_starts(broker) != starts,
                       lambda: f"metadata log starts {metadata_starts(broker)}", interval_s=0.01)
        broker.kill()
        broker.start()
        check(broker, tier, topic, produced, deleted)

    # Without its local snapshots the broker rebuilds from the compacted topic alone.
    assert broker.stop() == 0
    (broker.data_dir / "_rlmm_committed_offsets").unlink()
    for path in (broker.data_dir / "remote-log-metadata-snapshots").iterdir():
        path.unlink()
    broker.start()
    check(broker, tier, topic, produced, deleted)
    assert any(metadata_starts(broker))

    # The admin tools read the compacted topic: reconcile counts it complete (it
    # begins with a restatement) and finds nothing; dump-metadata decodes it.
    store = [arg for k, v in tier.broker_overrides().items() for arg in ("--override", f"{k}={v}")]
    res = run_admin(broker.bootstrap, "--json", "reconcile", *store)
    assert res.returncode == 0, (res.stdout, res.stderr)
    summary = res.json()
    assert summary["metadata_complete"] is True
    assert (summary["orphans"], summary["missing"]) == ([], [])
    lines = [json.loads(line) for line in ok(
        broker.bootstrap, "tiering", "dump-metadata", "--topic", topic).stdout.splitlines()]
    dumped = {e["event"]["start_offset"] for e in lines
              if e["event"]["type"] == "REMOTE_LOG_SEGMENT_METADATA"}
    assert dumped >= {tier.start_offset_of(n) for n in tier.log_objects(topic, 0)}
