"""Turning tiering off and on for a topic (KIP-950; Kafka's
DisableRemoteLogOnTopicTest / EnableRemoteLogOnTopicTest).

remote.log.copy.disable=true stops copying (untiered segments stay local,
the remote data stays readable); false resumes it. remote.storage.enable=
false is only accepted together with remote.log.delete.on.disable=true, and
then every remote segment of the topic is deleted and the log starts at its
local start.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from system_tests.tiered_helpers import (
    DELETE_SEGMENT_FINISHED,
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST_TIERED,
    OFFSET_OUT_OF_RANGE,
    TIERED_BROKER_OVERRIDES,
    FsTier,
    RemoteTier,
    alter_topic,
    create_tiered_topic,
    eventually,
    fetch,
    local_segment_bases,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

PER_BATCH = 2
# How long to watch that nothing is copied while copying is disabled: ten
# task intervals, each of which would copy every eligible segment.
QUIET_S = 10 * int(TIERED_BROKER_OVERRIDES["remote.log.manager.task.interval.ms"]) / 1000


def test_copy_disable_then_enable_then_delete_on_disable(request: pytest.FixtureRequest,
                                                         tmp_path: Path, tier: RemoteTier,
                                                         topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        first = numbered_batches(4, PER_BATCH, tag="first")
        bases = produce_batches(client, topic, 0, first)
        wait_tiered(broker, tier, topic, 3)
        tiered = offset_for(client, topic, LATEST_TIERED)

        alter_topic(broker, topic, remote_log_copy_disable="true")
        second = numbered_batches(3, PER_BATCH, tag="second")
        bases += produce_batches(client, topic, 0, second)
        expected = [r for b in first + second for r in b]
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            # No copies: the new closed segments stay local (local retention
            # may only delete tiered ones), nothing new is remote.
            assert len(tier.log_objects(topic)) == 3
            assert offset_for(client, topic, LATEST_TIERED) == tiered
            assert local_segment_bases(broker, topic) == bases[3:]
            time.sleep(0.2)
        # The remote data is still served, and the local data after it.
        assert [r for _, r in read_all(client, topic)] == expected

        alter_topic(broker, topic, remote_log_copy_disable="false")
        remote = wait_tiered(broker, tier, topic, len(bases) - 1)
        assert [tier.start_offset_of(n) for n in remote] == bases[:-1]
        assert offset_for(client, topic, LATEST_TIERED) == bases[-1] - 1
        assert [r for _, r in read_all(client, topic)] == expected

        # Turning tiering off without deleting the remote data is refused.
        with pytest.raises(KafkaException, match="remote.log.delete.on.disable"):
            alter_topic(broker, topic, remote_storage_enable="false")
        assert len(tier.log_objects(topic)) == len(bases) - 1

        alter_topic(broker, topic, remote_storage_enable="false",
                    remote_log_delete_on_disable="true")
        eventually(lambda: not tier.objects(topic),
                   lambda: f"remote objects remain: {tier.objects(topic)}")
        if isinstance(tier, FsTier):
            eventually(lambda: not tier.topic_dirs(topic),
                       lambda: f"remote directories remain: {tier.topic_dirs(topic)}")
        segments = read_metadata(client, topic).segments.values()
        eventually(lambda: all(s.states[-1] == DELETE_SEGMENT_FINISHED
                               for s in read_metadata(client, topic).segments.values()),
                   lambda: f"metadata: {read_metadata(client, topic)}")
        assert len(segments) == len(bases) - 1
        # The log now starts locally; below it is out of range.
        local_start = bases[-1]
        assert offset_for(client, topic, EARLIEST) == local_start
        assert offset_for(client, topic, EARLIEST_LOCAL) == local_start
        assert offset_for(client, topic, LATEST_TIERED) == -1
        below = fetch(client, {(topic, 0): 0})[(topic, 0)]
        assert below.error_code == OFFSET_OUT_OF_RANGE, below
        assert [r for _, r in read_all(client, topic, start=local_start)] == second[-1]
        # Produce carries on, untiered.
        more = numbered_batches(2, PER_BATCH, tag="more")
        produce_batches(client, topic, 0, more)
        assert [r for _, r in read_all(client, topic, start=local_start)] == (
            second[-1] + [r for b in more for r in b])
    assert not tier.objects(topic)
