"""The log start offset moved by remote expiration survives a SIGKILL (issue 8, bug 2).

Remote retention moves the log start offset in memory; the log-start
checkpoint is written only every log.flush.offset.checkpoint.interval.ms
(here: never during the test) and on DeleteRecords. So after a SIGKILL the
broker reopens the log at the last checkpointed start, whose remote segments
are gone. Kafka re-derives the log start from the earliest remaining remote
segment when tiering resumes and on every expiration run; so must we:
ListOffsets -2 answers where the remote tier begins, and a consumer with
auto.offset.reset=earliest reads from there instead of looping on
OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from system_tests._proc import TierdProc
from system_tests.tiered_helpers import (
    EARLIEST,
    NONE,
    OFFSET_OUT_OF_RANGE,
    FsTier,
    alter_topic,
    create_tiered_topic,
    delete_records,
    eventually,
    fetch,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    start_tiered,
    wait_tiered,
)

BATCHES = 8
PER_BATCH = 2
# Remote segments left by retention.bytes (plus the local active one).
KEPT_REMOTE = 3
# Long enough that no periodic checkpoint is written while the test runs.
CHECKPOINT_INTERVAL_MS = str(3_600_000)
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CONSUME_TIMEOUT_S = 20.0


def checkpointed_start(broker: TierdProc, topic: str, partition: int = 0) -> int | None:
    """The partition's entry in the log-start checkpoint file (Kafka's text format:
    version, count, then ``topic partition offset`` lines)."""
    path = broker.data_dir / LOG_START_CHECKPOINT
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        name, part, offset = line.split()
        if (name, int(part)) == (topic, partition):
            return int(offset)
    return None


def consume_from_earliest(broker: TierdProc, topic: str, end: int
                          ) -> tuple[list[int], list[str]]:
    """Offsets a librdkafka consumer (auto.offset.reset=earliest, assigned at
    BEGINNING) reads up to `end`, and what librdkafka logged about offsets
    out of range meanwhile."""
    logger = logging.getLogger(f"rdkafka.{topic}")
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    logger.addHandler(handler)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"},
                        logger=logger)
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
            for message in consumer.consume(100, timeout=0.5):
                offset = message.offset()
                assert message.error() is None and offset is not None, message.error()
                offsets.append(offset)
    finally:
        consumer.close()
        logger.removeHandler(handler)
    return offsets, [line for line in lines if "out of range" in line.lower()]


def test_log_start_after_sigkill_is_where_the_remote_tier_begins(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    tier = FsTier(tmp_path / "remote")
    broker = start_tiered(request, tmp_path / "broker", tier, {
        "log.flush.offset.checkpoint.interval.ms": CHECKPOINT_INTERVAL_MS})
    create_tiered_topic(broker, topic)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, numbered_batches(BATCHES, PER_BATCH))
    end = BATCHES * PER_BATCH
    wait_tiered(broker, tier, topic, BATCHES - 1)

    # DeleteRecords checkpoints the log start at once: the stale value the
    # broker will come back with.
    stale = bases[1]
    assert delete_records(broker, topic, 0, stale) == stale
    assert checkpointed_start(broker, topic) == stale

    # Remote retention then moves the start in memory only.
    segment_size = len(tier.read(tier.log_objects(topic)[0]))
    alter_topic(broker, topic, retention_bytes=str(segment_size * (2 * KEPT_REMOTE + 1) // 2))
    survivors = bases[BATCHES - 1 - KEPT_REMOTE:BATCHES - 1]
    first = survivors[0]

    def remote_starts() -> list[int]:
        return [tier.start_offset_of(n) for n in tier.log_objects(topic)]

    eventually(lambda: remote_starts() == survivors,
               lambda: f"remote segments start at {remote_starts()}, want {survivors}")
    with raw(broker) as client:
        eventually(lambda: offset_for(client, topic, EARLIEST) == first,
                   lambda: f"log start {offset_for(client, topic, EARLIEST)}, want {first}")
    assert checkpointed_start(broker, topic) == stale, "the checkpoint must still be stale"

    broker.kill()
    broker.start()

    # The partition's remote metadata is loaded (the gauges appear only then)
    # before the checks: that is when tiering resumes and the start is re-derived.
    eventually(lambda: metric(broker, "RemoteLogMetadataCount", topic=topic) == KEPT_REMOTE,
               lambda: f"RemoteLogMetadataCount "
                       f"{metric(broker, 'RemoteLogMetadataCount', topic=topic)}")
    assert remote_starts() == survivors
    with raw(broker) as client:
        earliest = offset_for(client, topic, EARLIEST)
        at_start = fetch(client, {(topic, 0): earliest}, max_wait_ms=100)[(topic, 0)]
    offsets, out_of_range = consume_from_earliest(broker, topic, end)
    assert (earliest, at_start.error_code) == (first, NONE), (
        f"ListOffsets -2 answered {earliest} (checkpointed start {stale}) but the remote "
        f"tier begins at {first}; a fetch at {earliest} answered error {at_start.error_code}; "
        f"a consumer from earliest read {len(offsets)} records, librdkafka logged "
        f"{len(out_of_range)} offset resets, e.g. {out_of_range[:2]}")
    assert (offsets, out_of_range) == (list(range(first, end)), [])
    with raw(broker) as client:
        below = fetch(client, {(topic, 0): stale})[(topic, 0)]
        assert (below.error_code, below.log_start_offset) == (OFFSET_OUT_OF_RANGE, first)
        assert [o for o, _ in read_all(client, topic, start=earliest)] == list(range(first, end))
