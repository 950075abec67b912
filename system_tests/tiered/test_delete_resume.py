"""A topic deletion whose remote cleanup is interrupted finishes after a restart.

S3 refuses deletes while the topic is deleted, the broker is then killed;
after a restart (with S3 healthy) the pending cleanup is resumed from the
broker's metadata and the topic's objects disappear.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from system_tests.s3_fixtures import Fault, FaultProxy
from system_tests.tiered_helpers import (
    S3Tier,
    create_tiered_topic,
    delete_topic,
    eventually,
    numbered_batches,
    produce_batches,
    raw,
    start_tiered,
    wait_tiered,
)


def test_remote_cleanup_of_a_deleted_topic_survives_a_crash(
        request: pytest.FixtureRequest, tmp_path: Path, s3_tier_behind_proxy: S3Tier,
        fault_proxy: FaultProxy, topic: str) -> None:
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(4, 2))
    wait_tiered(broker, tier, topic, 3)
    before = set(tier.objects(topic))
    fault_proxy.inject(Fault.ERROR_500, method="DELETE")
    fault_proxy.inject(Fault.ERROR_500, method="POST", query="delete")
    delete_topic(broker, topic)
    # Give the remover a few cycles to try (and fail) against the refusing store.
    with pytest.raises(AssertionError):
        eventually(lambda: not tier.objects(topic), lambda: "objects remain", timeout_s=3)
    assert set(tier.objects(topic)) == before
    broker.kill()
    fault_proxy.clear()
    broker.start()
    eventually(lambda: not tier.objects(topic),
               lambda: f"objects of the deleted topic remain after restart: {tier.objects(topic)}")
