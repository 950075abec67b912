"""``__remote_log_metadata`` on one broker: a record is on disk (fsynced)
before ``append`` returns, since the copier deletes local data on its strength
(issue 8, data-safety bug 4: a metadata tail lost to a power loss would leave
offsets nowhere)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from protocol.errors import ErrorCode, KafkaApiError
from replication import leader_requests
from replication.internal_topics import REMOTE_LOG_METADATA_TOPIC, InternalTopic
from replication.local_admin import open_single_node
from replication.remote_metadata_log import ClusterMetadataLog, ReplicaMetadataLog
from storage.remote.rlmm_api import PollLimits, TopicRecord
from tests.coordinator.conftest import make_config

LIMITS = PollLimits(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                    partition_max_bytes=1 << 20)


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


async def test_a_poll_below_the_log_start_answers_from_it(tmp_path):
    """A long-poll from below the log start (a follower behind a compaction)
    answers at once from the log start, keys and all: the manager sees the gap."""
    node = open_single_node(make_config(tmp_path))
    topic = InternalTopic(REMOTE_LOG_METADATA_TOPIC, 1, 1, {"cleanup.policy": "delete"},
                          node.admin, node.metadata, node.replicas)
    metadata_log = ReplicaMetadataLog(topic)
    await metadata_log.ensure_topic(1)
    for n in range(3):
        await metadata_log.append(0, f"old-{n}".encode())
    metadata_log.append_at_end(0, lambda end: [(b"k", b"new-0")])
    await metadata_log.delete_before(0, 3)
    with trio.fail_after(1):  # not parked: there are records from the log start
        got = await metadata_log.poll({0: 1}, LIMITS)
    assert [tuple(r) for r in got[0]] == [(3, b"k", b"new-0")]


class _RemoteLeader:
    """Topic and metadata of a cluster where broker 2 leads every metadata partition."""

    name = REMOTE_LOG_METADATA_TOPIC

    def is_leader(self, partition: int) -> bool:
        return False

    def partition(self, tp: object) -> SimpleNamespace:
        return SimpleNamespace(leader=2)

    def get(self, node: int) -> object:
        return object()


@pytest.mark.parametrize("code", [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.NOT_LEADER_OR_FOLLOWER])
async def test_a_cluster_poll_out_of_range_reads_from_the_leaders_log_start(monkeypatch, code):
    """OFFSET_OUT_OF_RANGE from the leader (a position below its log start after
    a compaction): the group is answered by catch-up reads, which start at the
    leader's log start; any other error is the caller's to retry."""
    fake = _RemoteLeader()
    cluster = ClusterMetadataLog(fake, 1, fake, fake, 1000, fake, 1000)  # type: ignore[arg-type]

    async def long_poll(*args: object, **kwargs: object) -> dict[int, bytes]:
        raise KafkaApiError(code, "from the leader")

    reads = []

    async def read(partition: int, from_offset: int, max_bytes: int) -> list[TopicRecord]:
        reads.append((partition, from_offset))
        return [TopicRecord(40, b"k", b"v")] if partition == 0 else []

    monkeypatch.setattr(leader_requests, "long_poll", long_poll)
    monkeypatch.setattr(cluster, "read", read)
    if code is not ErrorCode.OFFSET_OUT_OF_RANGE:
        with pytest.raises(KafkaApiError):
            await cluster.poll({0: 3, 1: 7}, LIMITS)
        return
    assert await cluster.poll({0: 3, 1: 7}, LIMITS) == {0: [TopicRecord(40, b"k", b"v")]}
    assert reads == [(0, 3), (1, 7)]
