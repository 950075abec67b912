"""Tiering turned off with remote.log.delete.on.disable=true (KIP-950) while
the store refuses deletes, then the broker is SIGKILLed.

The pending deletion is recorded in ``__remote_log_metadata`` with KIP-405's
partition delete markers, so the restarted broker finishes it: no object of
the topic is left. Tiering re-enabled while the deletion is pending waits for
it: nothing is copied before the old segments are gone, and no segment copied
after the re-enable is deleted with them (data copied then, and dropped from
local disk by local retention, would otherwise exist nowhere).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from system_tests.s3_fixtures import Fault, FaultProxy
from system_tests.tiered_helpers import (
    DELETE_PARTITION_FINISHED,
    DELETE_PARTITION_MARKED,
    DELETE_PARTITION_STARTED,
    DELETE_SEGMENT_FINISHED,
    TIERED_BROKER_OVERRIDES,
    S3Tier,
    alter_topic,
    create_tiered_topic,
    eventually,
    local_segment_bases,
    numbered_batches,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

PER_BATCH = 2
# How long the store refuses deletes before the kill: ten task intervals,
# each of which retries the deletion.
REFUSING_S = 10 * int(TIERED_BROKER_OVERRIDES["remote.log.manager.task.interval.ms"]) / 1000


def refuse_deletes(proxy: FaultProxy) -> None:
    proxy.inject(Fault.ERROR_500, method="DELETE")
    proxy.inject(Fault.ERROR_500, method="POST", query="delete")


def partition_deletes(broker, topic: str) -> list[int]:  # type: ignore[no-untyped-def]
    with raw(broker) as client:
        return [state for _, state in read_metadata(client, topic).partition_deletes]


def test_disable_delete_survives_a_crash(request: pytest.FixtureRequest, tmp_path: Path,
                                         s3_tier_behind_proxy: S3Tier, fault_proxy: FaultProxy,
                                         topic: str) -> None:
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        produce_batches(client, topic, 0, numbered_batches(4, PER_BATCH))
    wait_tiered(broker, tier, topic, 3)
    before = set(tier.objects(topic))
    refuse_deletes(fault_proxy)
    alter_topic(broker, topic, remote_storage_enable="false",
                remote_log_delete_on_disable="true")
    time.sleep(REFUSING_S)
    assert set(tier.objects(topic)) == before
    broker.kill()
    fault_proxy.clear()
    broker.start()
    eventually(lambda: not tier.objects(topic),
               lambda: f"objects of the disabled topic remain after restart: "
                       f"{tier.objects(topic)}")
    assert partition_deletes(broker, topic) == [
        DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, DELETE_PARTITION_FINISHED]
    with raw(broker) as client:
        assert all(s.states[-1] == DELETE_SEGMENT_FINISHED
                   for s in read_metadata(client, topic).segments.values())


def test_reenable_while_disable_delete_pending_across_a_crash(
        request: pytest.FixtureRequest, tmp_path: Path, s3_tier_behind_proxy: S3Tier,
        fault_proxy: FaultProxy, topic: str) -> None:
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        first = numbered_batches(4, PER_BATCH, tag="first")
        bases = produce_batches(client, topic, 0, first)
    wait_tiered(broker, tier, topic, 3)
    old = set(tier.objects(topic))
    refuse_deletes(fault_proxy)
    alter_topic(broker, topic, remote_storage_enable="false",
                remote_log_delete_on_disable="true")
    # The log now starts at its local start: the last batch of the first lot.
    start = bases[-1]
    time.sleep(REFUSING_S / 2)  # a few failed attempts

    alter_topic(broker, topic, remote_storage_enable="true",
                remote_log_delete_on_disable="false")
    with raw(broker) as client:
        second = numbered_batches(4, PER_BATCH, tag="second")
        bases += produce_batches(client, topic, 0, second)
    deadline = time.monotonic() + REFUSING_S
    while time.monotonic() < deadline:
        # Nothing is copied (and so nothing leaves local disk) while the old
        # segments wait for their deletion.
        assert set(tier.objects(topic)) == old
        assert local_segment_bases(broker, topic) == bases[3:]
        time.sleep(0.2)

    broker.kill()
    fault_proxy.clear()
    broker.start()
    # The deletion resumes from the metadata, then tiering starts afresh.
    eventually(lambda: not old & set(tier.objects(topic)),
               lambda: f"old objects remain after restart: {old & set(tier.objects(topic))}")
    remote = wait_tiered(broker, tier, topic, 4)
    assert sorted(tier.start_offset_of(n) for n in remote) == bases[3:-1]
    assert partition_deletes(broker, topic) == [
        DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, DELETE_PARTITION_FINISHED]
    with raw(broker) as client:
        # Every record from the log's start after the disable is still there:
        # the first lot's last batch and all of the second, now from the tier.
        expected = first[-1] + [r for b in second for r in b]
        assert [r for _, r in read_all(client, topic, start=start)] == expected
