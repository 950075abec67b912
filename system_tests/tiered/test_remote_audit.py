"""The leader's scheduled audit of its remote objects (storage/remote/audit.py):
what ``tierd admin reconcile`` reports, as metrics, on both stores.

A clean tier reads zero; an orphan segment (objects under a uuid the
metadata never heard of) and a finished segment whose ``.log`` is gone show
up in RemoteOrphanObjects / RemoteMissingSegments within an audit interval,
with one warning line naming them; ``tierd admin reconcile --delete-orphans``
removes the orphan and the next audit agrees. Nothing is deleted by the
broker itself.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storage.remote.naming import uuid_str
from system_tests.admin.tool import run_admin
from system_tests.tiered_helpers import (
    RemoteTier,
    create_tiered_topic,
    eventually,
    metric,
    numbered_batches,
    produce_batches,
    raw,
    start_tiered,
    wait_tiered,
)

BATCHES = 6
AUDIT = {"tierd.remote.audit.interval.ms": "300", "tierd.remote.audit.grace.ms": "0"}


def gauges(broker, topic: str) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    return (metric(broker, "RemoteOrphanObjects", topic=topic),
            metric(broker, "RemoteMissingSegments", topic=topic),
            metric(broker, "RemoteAuditRunsPerSec_total", topic=topic))


def test_audit_reports_orphans_and_missing_segments(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier, AUDIT)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(BATCHES, 2))
    remote = wait_tiered(broker, tier, topic, BATCHES - 1)

    # Clean: audits run and find nothing.
    runs = eventually(lambda: (g := gauges(broker, topic))[2] >= 2 and g,
                      lambda: f"audits: {gauges(broker, topic)}")
    assert runs[:2] == (0.0, 0.0)

    # An orphan: every object of one segment again, under a uuid no metadata
    # names (as a delete that failed half-way, or a hand-made copy, leaves).
    first = sorted(remote)[0]
    stem = first.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    offset, old_id = stem[:20], stem[21:]
    new_id = uuid_str(uuid.uuid4())
    planted = [name.replace(old_id, new_id) for name in tier.objects(topic)
               if f"{offset}-{old_id}." in name]
    for source, target in zip(sorted(n for n in tier.objects(topic) if f"{offset}-{old_id}."
                                     in n), sorted(planted), strict=True):
        tier.write(target, tier.read(source))
    # A missing .log: the last tiered segment's.
    lost = sorted(remote)[-1]
    tier.delete(lost)

    eventually(lambda: gauges(broker, topic)[:2] == (float(len(planted)), 1.0),
               lambda: f"orphans, missing: {gauges(broker, topic)[:2]}, planted {planted}")
    assert "remote tier audit found problems" in broker.log_text()

    # The operator's tool deletes the orphan; the broker never did.
    assert all(name in tier.objects(topic) for name in planted)
    cleaned = run_admin(broker.bootstrap, "reconcile",
                        *[arg for k, v in tier.broker_overrides().items()
                          for arg in ("--override", f"{k}={v}")],
                        "--delete-orphans", "--grace-seconds", "0")
    assert not any(name in tier.objects(topic) for name in planted), cleaned.stderr
    eventually(lambda: gauges(broker, topic)[:2] == (0.0, 1.0),
               lambda: f"orphans, missing after reconcile: {gauges(broker, topic)[:2]}")
