"""__consumer_offsets records: replay folds them into per-group state.

The store's appends and error answers are tested for both coordinators in
``tests/broker/test_coordinator_store.py``.
"""

from __future__ import annotations

from broker.coordinator import records as rec
from broker.coordinator.offsets_store import offset_record, offsets_store, replay
from protocol import records as batches
from protocol.errors import ErrorCode
from replication.internal_topics import OFFSETS_TOPIC
from tests.coordinator.conftest import OFFSETS_PARTITIONS, trio_wall_clock


async def test_ensure_topic_creates_internal_compacted_topic(node):
    store = offsets_store(node.internal.offsets, trio_wall_clock)
    await store.ensure_topic()
    await store.ensure_topic()  # idempotent
    info = node.metadata.topic(OFFSETS_TOPIC)
    assert info.internal and info.partitions == OFFSETS_PARTITIONS
    assert info.configs["cleanup.policy"] == "compact"


async def test_replay_folds_records_and_skips_garbage(node):
    store = offsets_store(node.internal.offsets, trio_wall_clock)
    await store.ensure_topic()
    value = rec.OffsetCommitValue(5, -1, "", 1)
    assert store.append("g", [offset_record("g", ("t", 0), value),
                              offset_record("g", ("t", 1), value)]) is ErrorCode.NONE
    # An unreadable key (unknown version) in the same partition is skipped.
    tp = (OFFSETS_TOPIC, store.partition_of("g"))
    node.replicas.append_local(tp, bytearray(batches.build_batch([(b"\x00\x09junk", b"x")])))
    store.append("g", [offset_record("g", ("t", 1), None)])  # tombstone
    loaded = replay(store, store.partition_of("g"))
    assert set(loaded) == {"g"} and loaded["g"].metadata is None
    assert loaded["g"].offsets == {("t", 0): value}


async def test_append_errors_map_to_coordinator_errors(node):
    store = offsets_store(node.internal.offsets, trio_wall_clock)
    # The topic does not exist yet: Kafka answers COORDINATOR_NOT_AVAILABLE.
    value = rec.OffsetCommitValue(5, -1, "", 1)
    assert store.append("g", [offset_record("g", ("t", 0), value)]) is \
        ErrorCode.COORDINATOR_NOT_AVAILABLE
