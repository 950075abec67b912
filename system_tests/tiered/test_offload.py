"""Offload and consume (Kafka's OffloadAndConsumeFromLeaderTest), and the
ListOffsets special timestamps and timestamp lookups on both sides of the
tier boundary (Kafka's ListOffsetsTest for tiered topics)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from system_tests.clients import DRIVERS
from system_tests.tiered_helpers import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    NONE,
    RemoteTier,
    create_tiered_topic,
    decode_records,
    delete_records,
    eventually,
    fetch,
    list_offsets,
    local_segment_bases,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    start_tiered,
    wait_tiered,
)

# Batches produced by the offload test: 12 one-batch segments, 3 records
# each; 11 closed segments tier, the active one stays local.
BATCHES = 12
PER_BATCH = 3

# Client libraries that must read the tiered topic from offset 0.
CLIENTS = ("kafka-python", "confluent", "aiokafka")


def test_offload_and_consume(request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier,
                             topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(BATCHES, PER_BATCH)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
        assert bases == [i * PER_BATCH for i in range(BATCHES)]
        remote = wait_tiered(broker, tier, topic, BATCHES - 1)

        # Every closed segment is remote (once), and only the active one is local.
        assert sorted(tier.start_offset_of(n) for n in remote) == bases[:-1]
        assert local_segment_bases(broker, topic) == [bases[-1]]
        for suffix in ("index", "timeindex", "leader_epoch_checkpoint"):
            assert len([n for n in tier.objects(topic) if n.endswith("." + suffix)]) == len(remote)

        end = BATCHES * PER_BATCH
        assert offset_for(client, topic, EARLIEST_LOCAL) == bases[-1]
        assert offset_for(client, topic, EARLIEST) == 0
        assert offset_for(client, topic, LATEST_TIERED) == bases[-1] - 1
        assert offset_for(client, topic, LATEST) == end

        expected = [(b * PER_BATCH + i, rec) for b, batch in enumerate(batches)
                    for i, rec in enumerate(batch)]
        assert read_all(client, topic) == expected

    want = [(off, rec.key, rec.value) for off, rec in expected]
    for name in CLIENTS:
        got = DRIVERS[name].consume(broker.bootstrap, topic, {0: 0})
        assert [(r.offset, r.key, r.value) for r in got] == want, name

    assert metric(broker, "RemoteCopyBytesPerSec_total", topic=topic) > 0
    assert metric(broker, "RemoteFetchRequestsPerSec_total", topic=topic) > 0
    assert metric(broker, "RemoteLogMetadataCount", topic=topic) == BATCHES - 1


# ListOffsets test: 10 one-batch segments of 2 records, one second apart, an
# hour ago (so no retention or clock skew is involved).
LO_BATCHES = 10
LO_PER_BATCH = 2
TS_STEP_MS = 1000


def test_list_offsets_across_the_tier_boundary(request: pytest.FixtureRequest, tmp_path: Path,
                                               tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    first_ts = int(time.time() * 1000) - 3_600_000
    batches = numbered_batches(LO_BATCHES, LO_PER_BATCH, first_ts=first_ts, ts_step=TS_STEP_MS)
    end = LO_BATCHES * LO_PER_BATCH
    local_start = end - LO_PER_BATCH  # the active segment: the last batch

    def ts_of(offset: int) -> int:
        return first_ts + offset * TS_STEP_MS

    with raw(broker) as client:
        produce_batches(client, topic, 0, batches)
        wait_tiered(broker, tier, topic, LO_BATCHES - 1)

        assert offset_for(client, topic, EARLIEST) == 0
        assert offset_for(client, topic, EARLIEST_LOCAL) == local_start
        assert offset_for(client, topic, LATEST_TIERED) == local_start - 1
        assert offset_for(client, topic, LATEST) == end
        assert list_offsets(client, topic, {0: MAX_TIMESTAMP})[0] == (NONE, end - 1, ts_of(end - 1))
        # Every record by its exact timestamp and by one just before it: remote
        # ones (offsets < local_start) come from the remote time indexes.
        for offset in range(end):
            assert list_offsets(client, topic, {0: ts_of(offset)})[0] == (
                NONE, offset, ts_of(offset)), offset
            assert offset_for(client, topic, ts_of(offset) - TS_STEP_MS // 2) == offset
        assert offset_for(client, topic, ts_of(end)) == -1  # after the newest record
        # The special timestamps need their versions (-4: v8, -5: v9).
        assert list_offsets(client, topic, {0: EARLIEST_LOCAL}, version=7)[0][0] != NONE
        assert list_offsets(client, topic, {0: LATEST_TIERED}, version=8)[0][0] != NONE

        # DeleteRecords inside the remote part: the log start moves, the local
        # start and the tiered offset do not, timestamp lookups start at the new start.
        cut = 7
        assert delete_records(broker, topic, 0, cut) == cut
        assert offset_for(client, topic, EARLIEST) == cut
        assert offset_for(client, topic, EARLIEST_LOCAL) == local_start
        assert offset_for(client, topic, LATEST_TIERED) == local_start - 1
        assert offset_for(client, topic, ts_of(0)) == cut
        assert list_offsets(client, topic, {0: ts_of(cut + 2)})[0] == (NONE, cut + 2, ts_of(cut + 2))
        assert offset_for(client, topic, ts_of(local_start + 1)) == local_start + 1
        assert [o for o, _ in read_all(client, topic, start=cut)] == list(range(cut, end))

        # DeleteRecords past the tier boundary: nothing remote is readable any more.
        cut = local_start + 1
        assert delete_records(broker, topic, 0, cut) == cut
        assert offset_for(client, topic, EARLIEST) == cut
        assert offset_for(client, topic, EARLIEST_LOCAL) == cut
        assert offset_for(client, topic, ts_of(0)) == cut
        assert offset_for(client, topic, LATEST) == end
        eventually(lambda: not tier.log_objects(topic),
                   lambda: f"remote segments below the log start remain: {tier.log_objects(topic)}")


# Partitions in the one-fetch test (KAFKA-14915: Kafka <= 4.1 served one).
FETCH_PARTITIONS = 8
FETCH_BATCHES = 3


def test_one_fetch_serves_every_remote_partition(request: pytest.FixtureRequest,
                                                 tmp_path: Path, tier: RemoteTier,
                                                 topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic, FETCH_PARTITIONS)
    with raw(broker) as client:
        sent = {}
        for p in range(FETCH_PARTITIONS):
            sent[p] = numbered_batches(FETCH_BATCHES, 2, tag=f"p{p}")
            produce_batches(client, topic, p, sent[p])
        for p in range(FETCH_PARTITIONS):
            wait_tiered(broker, tier, topic, FETCH_BATCHES - 1, partition=p)
            assert offset_for(client, topic, EARLIEST_LOCAL, p) > 0

        answer = fetch(client, {(topic, p): 0 for p in range(FETCH_PARTITIONS)},
                       max_wait_ms=500, partition_max_bytes=1 << 20)
    assert len(answer) == FETCH_PARTITIONS
    for p in range(FETCH_PARTITIONS):
        got = answer[(topic, p)]
        assert got.error_code == NONE, (p, got.error_code)
        assert got.batches, f"partition {p} got no data in the one fetch"
        records = [r for b in got.batches for r in decode_records(b)]
        assert records[:2] == [(0, sent[p][0][0]), (1, sent[p][0][1])], p
