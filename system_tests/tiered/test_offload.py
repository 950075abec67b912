"""Offload and consume, against a live broker over both remote storage managers.

* Kafka's OffloadAndConsumeFromLeaderTest: one batch per segment and
  local.retention.bytes=1; the closed segments appear remotely and leave local
  disk, ListOffsets -4 is the active segment, and kafka-python, confluent-kafka
  and aiokafka each read every record from offset 0 once, in order.
* ListOffsets -2/-4/-5/-1/-3 and timestamp lookups on both sides of the tier
  boundary, then after DeleteRecords inside the remote part and past it.
* One fetch for 8 partitions that all need the remote tier answers all 8
  (unlike Kafka <= 4.1, KAFKA-14915).
* lz4 batches in multi-batch segments leaving by local.retention.ms: lookups
  through non-empty remote offset and time indexes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

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
    fetch_until_answer,
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
    # A gauge: exported from the snapshot taken every second.
    eventually(lambda: metric(broker, "RemoteLogMetadataCount", topic=topic) == BATCHES - 1,
               lambda: f"RemoteLogMetadataCount "
                       f"{metric(broker, 'RemoteLogMetadataCount', topic=topic)}")


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
REMOTE_FETCH_MAX_WAIT_MS = 5000


def test_one_fetch_serves_every_remote_partition(request: pytest.FixtureRequest,
                                                 tmp_path: Path, tier: RemoteTier,
                                                 topic: str) -> None:
    # A generous remote.fetch.max.wait.ms keeps a loaded machine from turning
    # slow reads into empty answers; a broker serving one remote partition per
    # fetch (KAFKA-14915) leaves seven empty however long it may wait.
    broker = start_tiered(request, tmp_path / "broker", tier,
                          {"remote.fetch.max.wait.ms": str(REMOTE_FETCH_MAX_WAIT_MS)})
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


# Compressed-batch test: lz4 batches of 7 records in 16 KiB segments, so each
# remote segment has many batches and non-empty offset and time indexes.
MB_RECORDS = 2000
MB_TS_STEP = 10


def mb_value(i: int) -> bytes:
    """A value lz4 cannot shrink much (so the data spans several segments)."""
    return f"v{i}-".encode() + bytes(((i * 7919 + j * 31) * 2654435761) % 251 for j in range(150))


def test_compressed_multi_batch_segments_leave_by_local_retention_ms(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic, segment_bytes="16384", local_retention_bytes="-2",
                        local_retention_ms="1000")
    first_ts = int(time.time() * 1000) - 600_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4",
                         "linger.ms": 20, "batch.num.messages": 7})
    for i in range(MB_RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=mb_value(i),
                         timestamp=first_ts + i * MB_TS_STEP)
    assert producer.flush(30) == 0
    with raw(broker) as client:
        local_start = eventually(
            lambda: len(local_segment_bases(broker, topic)) == 1
            and offset_for(client, topic, EARLIEST_LOCAL),
            lambda: f"segments older than local.retention.ms still local: "
                    f"{local_segment_bases(broker, topic)}")
        assert len(tier.log_objects(topic)) > 3
        assert offset_for(client, topic, LATEST_TIERED) == local_start - 1
        # Timestamp lookups inside remote segments go through their time indexes.
        for i in [*range(0, MB_RECORDS, 37), MB_RECORDS - 1]:
            ts = first_ts + i * MB_TS_STEP
            assert list_offsets(client, topic, {0: ts})[0] == (NONE, i, ts), i
            assert offset_for(client, topic, ts - MB_TS_STEP // 2) == i, i
        # A fetch at any offset inside a remote segment starts at the batch holding it.
        for offset in range(1, local_start, 53):
            got = fetch_until_answer(client, topic, 0, offset)
            offsets = [o for b in got.batches for o, _ in decode_records(b)]
            assert got.error_code == NONE and offsets[0] <= offset <= offsets[-1], (offset, got)
        records = read_all(client, topic)
    assert [o for o, _ in records] == list(range(MB_RECORDS))
    assert all(r.key == f"k{o}".encode() and r.value == mb_value(o)
               and r.timestamp == first_ts + o * MB_TS_STEP for o, r in records)
