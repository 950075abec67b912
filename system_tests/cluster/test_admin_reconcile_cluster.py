"""``tierd admin reconcile`` on three brokers sharing one remote tier (a
directory or an S3 bucket on moto): the metadata is read from the
replicated ``__remote_log_metadata`` through any broker, the tier is clean
after replication and tiering, and a planted orphan segment is found and
deleted (and only it)."""

from __future__ import annotations

import uuid
from typing import Any

from storage.remote.naming import uuid_str
from system_tests.admin.tool import run_admin
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import local_bases, produce, tiered_config
from system_tests.tiered_helpers import ONE_BATCH_PER_SEGMENT, RemoteTier, store_args

RECORDS = 20
EXIT_OK, EXIT_FINDINGS = 0, 4


def reconcile(cluster: Cluster, tier: RemoteTier, *extra: str) -> tuple[int, Any]:
    res = run_admin(",".join(cluster.bootstrap()), "--json", "reconcile", *store_args(tier),
                    *extra)
    assert res.returncode in (EXIT_OK, EXIT_FINDINGS), res.stderr
    return res.returncode, res.json()


def test_reconcile_a_shared_tier_through_any_broker(cluster: Cluster, topic: str,
                                                    tier: RemoteTier) -> None:
    cluster.start(tiered_config(tier))
    cluster.create_topic(topic, 1, 3, {"remote.storage.enable": "true",
                                       "segment.bytes": ONE_BATCH_PER_SEGMENT,
                                       "local.retention.bytes": "1"})
    produce(cluster, topic, [f"v{i}".encode() for i in range(RECORDS)])
    wait_for("tiered and freed on every replica", lambda: all(
        (bases := local_bases(cluster, n, topic)) and bases[0] >= RECORDS - 3
        for n in (1, 2, 3)))

    code, clean = reconcile(cluster, tier)
    assert code == EXIT_OK, clean
    assert clean["orphans"] == [] and clean["missing"] == [] and clean["size_mismatches"] == []
    assert clean["segments"].get("COPY_SEGMENT_FINISHED", 0) >= len(tier.log_objects(topic, 0))

    # One segment's objects copied under a uuid no metadata names.
    first = sorted(tier.log_objects(topic, 0))[0]
    stem = first.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    old_id, new_id = stem[21:], uuid_str(uuid.uuid4())
    sources = [n for n in tier.objects(topic) if f"{stem}." in n]
    planted = [n.replace(old_id, new_id) for n in sources]
    for source, target in zip(sources, planted, strict=True):
        tier.write(target, tier.read(source))
    before = set(tier.objects(topic))

    code, found = reconcile(cluster, tier)
    assert code == EXIT_FINDINGS
    names = sorted(p.rsplit("/", 1)[-1] for p in planted)
    assert sorted(row["key"].rsplit("/", 1)[-1] for row in found["orphans"]) == names, found
    assert found["missing"] == [] and found["size_mismatches"] == []

    code, deleted = reconcile(cluster, tier, "--delete-orphans", "--grace-seconds", "0")
    assert code == EXIT_OK, deleted
    assert set(tier.objects(topic)) == before - set(planted)
