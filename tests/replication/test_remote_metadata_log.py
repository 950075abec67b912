"""``__remote_log_metadata`` on one broker: a record is on disk (fsynced)
before ``append`` returns, since the copier deletes local data on its strength
(issue 8, data-safety bug 4: a metadata tail lost to a power loss would leave
offsets nowhere)."""

from __future__ import annotations

from replication.internal_topics import REMOTE_LOG_METADATA_TOPIC, InternalTopic
from replication.local_admin import open_single_node
from replication.remote_metadata_log import ReplicaMetadataLog
from tests.coordinator.conftest import make_config


async def test_append_returns_only_once_the_record_is_fsynced(tmp_path):
    config = make_config(tmp_path)  # default flush policy: never by message count
    node = open_single_node(config)  # the real clock: records carry real timestamps
    topic = InternalTopic(REMOTE_LOG_METADATA_TOPIC, 2, 1, {"cleanup.policy": "delete"},
                          node.admin, node.metadata, node.replicas)
    metadata_log = ReplicaMetadataLog(topic)
    assert await metadata_log.ensure_topic(2) == 2
    lg = node.replicas.partition((REMOTE_LOG_METADATA_TOPIC, 1)).log
    for n in range(3):
        offset = await metadata_log.append(1, f"record-{n}".encode())
        assert offset == n
        # The recovery point is what the log has fsynced: it covers the record.
        assert lg.recovery_point > offset
    assert [r.value for r in await metadata_log.read(1, 0, 1 << 20)] == \
        [b"record-0", b"record-1", b"record-2"]


async def test_append_at_end_then_delete_before_moves_the_log_start(tmp_path):
    node = open_single_node(make_config(tmp_path))
    topic = InternalTopic(REMOTE_LOG_METADATA_TOPIC, 1, 1, {"cleanup.policy": "delete"},
                          node.admin, node.metadata, node.replicas)
    metadata_log = ReplicaMetadataLog(topic)
    await metadata_log.ensure_topic(1)
    for n in range(3):
        await metadata_log.append(0, f"old-{n}".encode())
    ends = []

    def build(end):
        ends.append(end)
        return [(b"k", b"new-0"), (b"k", b"new-1")]

    assert metadata_log.append_at_end(0, build) == 3
    assert ends == [3]  # called with the committed end, right where the records went
    assert metadata_log.append_at_end(0, lambda end: None) is None
    lg = node.replicas.partition((REMOTE_LOG_METADATA_TOPIC, 0)).log
    assert [seg.base_offset for seg in lg.segments] == [0, 3]  # rolled for the new records
    await metadata_log.delete_before(0, 3)
    assert metadata_log.start_offset(0) == 3
    assert [seg.base_offset for seg in lg.segments] == [3]  # the old file is gone
    # Below the log start a read starts at the log start; keys come back.
    assert [tuple(r) for r in await metadata_log.read(0, 0, 1 << 20)] == \
        [(3, b"k", b"new-0"), (4, b"k", b"new-1")]
