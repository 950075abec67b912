"""A group converted by KIP-848's online migration keeps what it is when its
coordinator is SIGKILLed: three tierd brokers on a real ZooKeeper, raw
wire-protocol members.

A classic member (the ConsumerProtocol, owning both partitions) forms a
group; a ConsumerGroupHeartbeat converts it into a consumer group. After
the coordinator is killed, the next leader of the group's
``__consumer_offsets`` partition describes the same group (epochs, members,
their protocol, current and target assignments), the classic member's
Heartbeat is answered at its generation, and the consumer-protocol
member's leave turns the group back into a classic group there.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from protocol.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from replication.internal_topics import OFFSETS_TOPIC
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_coordinators import INTERNAL, coordinator_of
from system_tests.test_group_migration import _classic_member, _consumer_join
from system_tests.test_groups import FIND, LIST, RawClient

REBALANCE_IN_PROGRESS = 27


def _assignment(topic: str, partitions: list[int]) -> bytes:
    tp = ConsumerProtocolAssignment.TopicPartition
    return bytes(ConsumerProtocolAssignment(
        version=1, assigned_partitions=[tp(topic=topic, partitions=partitions)],
        user_data=None).encode(version=1))


def _find_coordinator(cluster: Cluster, group: str) -> int | None:
    client = RawClient(cluster.bootstrap()[0])
    try:
        found = client.call(*FIND, 1, key=group, key_type=0)
    finally:
        client.close()
    return found.node_id if found.error_code == 0 else None


def _view(client: RawClient, group: str) -> Any:
    """The group as ConsumerGroupDescribe v1 shows it; None while not ready."""
    [g] = client.call(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 1,
                      group_ids=[group], include_authorized_operations=False).groups
    if g.error_code:
        return None

    def parts(a: Any) -> list[int]:
        return sorted(p for t in a.topic_partitions for p in t.partitions)

    return (g.group_state, g.group_epoch, g.assignment_epoch, sorted(
        (m.member_id, m.member_type, m.member_epoch, parts(m.assignment),
         parts(m.target_assignment)) for m in g.members))


def test_converted_group_survives_its_coordinator_being_killed(cluster: Cluster,
                                                               topic: str) -> None:
    cluster.start(INTERNAL)
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    group = f"mig-{topic}"
    victim = wait_for("a coordinator for the group (creating __consumer_offsets)",
                      lambda: _find_coordinator(cluster, group))
    client = RawClient(cluster.brokers[victim].bootstrap)
    try:
        classic_id, generation = _classic_member(client, group, topic,
                                                 _assignment(topic, [0, 1]))
        assert _consumer_join(client, group, "m1", topic).error_code == 0
        before = _view(client, group)
    finally:
        client.close()
    # The classic member (type 0) holds both partitions until it rejoins; the
    # consumer-protocol member (type 1) is at the new epoch, waiting for its share.
    state, group_epoch, assignment_epoch, described = before
    members = {m[0]: m[1:] for m in described}
    assert (state, group_epoch, assignment_epoch) == ("Reconciling", generation + 1,
                                                       generation + 1)
    assert members[classic_id][:3] == (0, generation, [0, 1])
    assert members["m1"][:3] == (1, generation + 1, [])
    assert sorted([*members[classic_id][3], *members["m1"][3]]) == [0, 1] and \
        members["m1"][3]

    cluster.brokers[victim].kill()
    successor = wait_for("a new group coordinator", lambda: (
        n := coordinator_of(cluster, OFFSETS_TOPIC, group)) != victim and n)
    client = RawClient(cluster.brokers[successor].bootstrap)
    try:
        after = wait_for("the group described by its new coordinator",
                         lambda: _view(client, group))
        assert after == before
        beat = client.call(HeartbeatRequest, HeartbeatResponse, 3, group_id=group,
                           generation_id=generation, member_id=classic_id,
                           group_instance_id=None)
        assert beat.error_code == REBALANCE_IN_PROGRESS  # the group epoch moved on
        left = client.call(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0,
                           group_id=group, member_id="m1", member_epoch=-1, instance_id=None,
                           rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None,
                           server_assignor=None, topic_partitions=None)
        assert left.error_code == 0
        listed = client.call(*LIST, 5, states_filter=[], types_filter=[])
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups
                if g.group_id == group] == [(group, "classic", "PreparingRebalance")]
    finally:
        client.close()
