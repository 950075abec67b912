"""Restart of a tiered broker with its checkpoints gone (Kafka's
ReassignReplicaShrinkTest / restart cases, single broker).

The broker is stopped with SIGTERM or killed with SIGKILL after some
segments are tiered and deleted locally; the recovery-point and log-start
checkpoints and the clean-shutdown marker are then deleted, so the log start
must come back from the remote metadata. After the restart the remote
metadata is reloaded (ListOffsets -2/-4/-5, the metadata gauge), reading
from offset 0 returns everything, and tiering carries on without copying
any segment twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from system_tests.clients import DRIVERS
from system_tests.tiered_helpers import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    RemoteTier,
    create_tiered_topic,
    eventually,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

# Files removed while the broker is down (storage/log/manager.py names them).
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

BEFORE = 6
RACING = 3
AFTER = 4
PER_BATCH = 2


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_without_checkpoints_resumes_tiering(request: pytest.FixtureRequest,
                                                     tmp_path: Path, tier: RemoteTier,
                                                     topic: str, how: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    first = numbered_batches(BEFORE, PER_BATCH, tag="before")
    racing = numbered_batches(RACING, PER_BATCH, tag="racing")
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, first)
        wait_tiered(broker, tier, topic, BEFORE - 1)
        # Stopped while these are being tiered (or before): after the restart
        # they must be tiered once, whatever state their copy was left in.
        bases += produce_batches(client, topic, 0, racing)

    if how == "sigterm":
        assert broker.stop() == 0
        for name in CHECKPOINTS + (CLEAN_SHUTDOWN_MARKER,):
            (broker.data_dir / name).unlink()  # a clean stop must have written them all
    else:
        broker.kill()
        for name in CHECKPOINTS + (CLEAN_SHUTDOWN_MARKER,):
            (broker.data_dir / name).unlink(missing_ok=True)
    broker.start()

    expected = [r for b in first + racing for r in b]
    with raw(broker) as client:
        # The log start comes back from the metadata, the rest tiers as before.
        assert offset_for(client, topic, EARLIEST) == 0
        assert offset_for(client, topic, LATEST) == len(expected)
        assert [r for _, r in read_all(client, topic)] == expected
        wait_tiered(broker, tier, topic, len(bases) - 1)
        assert offset_for(client, topic, EARLIEST_LOCAL) == bases[-1]
        assert offset_for(client, topic, LATEST_TIERED) == bases[-1] - 1
        assert [r for _, r in read_all(client, topic)] == expected
        eventually(lambda: metric(broker, "RemoteLogMetadataCount", topic=topic)
                   == len(bases) - 1,
                   lambda: f"RemoteLogMetadataCount "
                           f"{metric(broker, 'RemoteLogMetadataCount', topic=topic)}")

        second = numbered_batches(AFTER, PER_BATCH, tag="after")
        bases += produce_batches(client, topic, 0, second)
        expected += [r for b in second for r in b]
        wait_tiered(broker, tier, topic, len(bases) - 1)
        # Every closed segment tiered exactly once across the restart (the
        # objects of an attempt cut short by the stop are removed).
        eventually(lambda: [tier.start_offset_of(n) for n in tier.log_objects(topic)]
                   == bases[:-1],
                   lambda: f"remote segments {tier.log_objects(topic)}, want starts {bases[:-1]}")
        # Nothing else is left in the tier (no temp file or index of a dead attempt).
        stems = {n.rsplit(".", 1)[0] for n in tier.log_objects(topic)}
        strays = [n for n in tier.objects(topic) if n.split(".", 1)[0] not in stems]
        assert not strays, strays
        assert sorted(s.start_offset for s in read_metadata(client, topic).finished()) == bases[:-1]
        assert [r for _, r in read_all(client, topic)] == expected

    got = DRIVERS["confluent"].consume(broker.bootstrap, topic, {0: 0})
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in expected]
