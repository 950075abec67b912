"""Group -> partition mapping (Java's String.hashCode), appends and replay."""

from __future__ import annotations

import pytest

from broker.coordinator import records as rec
from broker.coordinator.offsets_store import (
    OFFSETS_TOPIC,
    OffsetsStore,
    java_string_hash,
    offset_record,
    partition_for,
)
from protocol import records as batches
from protocol.errors import ErrorCode
from tests.coordinator.conftest import OFFSETS_PARTITIONS, trio_wall_clock


@pytest.mark.parametrize("text,expected", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),              # Java: "hello".hashCode()
    ("Hello World", -862545276),      # overflows int32
    ("\u00e9", 0xE9),                 # one UTF-16 unit, not two UTF-8 bytes
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two units
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_masks_the_sign_bit():
    # "Hello World" hashes negative: Kafka takes hash & 0x7fffffff, not abs().
    assert partition_for("Hello World", 50) == (-862545276 & 0x7FFFFFFF) % 50 == 22
    assert abs(-862545276) % 50 != 22
    assert partition_for("hello", 50) == 99162322 % 50


async def test_ensure_topic_creates_internal_compacted_topic(config, replicas):
    store = OffsetsStore(config, replicas, trio_wall_clock)
    await store.ensure_topic()
    await store.ensure_topic()  # idempotent
    info = replicas.store.get(OFFSETS_TOPIC)
    assert info.internal and info.partitions == OFFSETS_PARTITIONS
    assert info.configs["cleanup.policy"] == "compact"


async def test_replay_folds_records_and_skips_garbage(config, replicas):
    store = OffsetsStore(config, replicas, trio_wall_clock)
    await store.ensure_topic()
    value = rec.OffsetCommitValue(5, -1, "", 1)
    assert store.append("g", [offset_record("g", ("t", 0), value),
                              offset_record("g", ("t", 1), value)]) is ErrorCode.NONE
    # An unreadable key (unknown version) in the same partition is skipped.
    tp = (OFFSETS_TOPIC, store.partition_of("g"))
    replicas.append(tp, bytearray(batches.build_batch([(b"\x00\x09junk", b"x")])))
    store.append("g", [offset_record("g", ("t", 1), None)])  # tombstone
    loaded = store.replay()
    assert set(loaded) == {"g"} and loaded["g"].metadata is None
    assert loaded["g"].offsets == {("t", 0): value}


async def test_append_errors_map_to_coordinator_errors(config, replicas):
    store = OffsetsStore(config, replicas, trio_wall_clock)
    # The topic does not exist yet: Kafka answers COORDINATOR_NOT_AVAILABLE.
    value = rec.OffsetCommitValue(5, -1, "", 1)
    assert store.append("g", [offset_record("g", ("t", 0), value)]) is \
        ErrorCode.COORDINATOR_NOT_AVAILABLE
