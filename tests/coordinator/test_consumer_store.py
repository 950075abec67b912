"""KIP-848 consumer groups survive a coordinator move: their records in
``__consumer_offsets`` (Kafka's formats, byte for byte where pinned) are
replayed by the partition's next leader into the same members, epochs,
assignments and partition ownership; leaving members and deleted groups
stay gone."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from broker.coordinator import GroupCoordinator, admin
from broker.coordinator import consumer_records as cr
from broker.coordinator.consumer_group import ConsumerGroup, MemberState
from protocol.errors import ErrorCode as E
from replication.internal_topics import OFFSETS_TOPIC
from tests.coordinator.conftest import trio_wall_clock
from tests.coordinator.test_consumer import A, hb, parts


async def _leader(nursery, config, node) -> tuple[GroupCoordinator, tuple[str, int]]:
    coord = GroupCoordinator(config, node.internal.offsets, trio_wall_clock,
                             follow_leadership=True)
    await coord.store.ensure_topic()
    await nursery.start(coord.run)
    tp = (OFFSETS_TOPIC, coord.store.partition_of("g"))
    coord.on_leadership(tp, True)
    await trio.testing.wait_all_tasks_blocked()
    return coord, tp


async def _move(coord: GroupCoordinator, tp: tuple[str, int]) -> None:
    coord.on_leadership(tp, False)
    assert "g" not in coord.consumer_groups
    coord.on_leadership(tp, True)
    await trio.testing.wait_all_tasks_blocked()


def _snapshot(group: ConsumerGroup) -> object:
    return (group.group_epoch, group.assignment_epoch, group.target, group.partition_epochs,
            group.static_members, group.subscription_metadata,
            {m.member_id: (m.instance_id, m.client_id, m.client_host, m.subscribed,
                           m.rebalance_timeout_ms, m.state, m.member_epoch,
                           m.previous_member_epoch, m.assigned, m.pending_revocation)
             for m in group.members.values()})


async def test_a_group_in_the_middle_of_a_rebalance_survives_a_move(nursery, config, node):
    coord, tp = await _leader(nursery, config, node)
    hb(coord, "m1", 0, instance="i1")
    hb(coord, "m2", 0)
    r1 = hb(coord, "m1", 1, {A: {0, 1, 2, 3}})  # m1 revoking, m2 waiting
    before = _snapshot(coord.consumer_groups["g"])
    await _move(coord, tp)
    group = coord.consumer_groups["g"]
    assert _snapshot(group) == before
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    # The members carry on at their epochs: m1 revokes, m2 gets the rest.
    r1 = hb(coord, "m1", 1, {A: parts(r1)})
    assert r1.error is E.NONE and r1.member_epoch == 2
    r2 = hb(coord, "m2", 2, {})
    assert parts(r2) == {0, 1, 2, 3} - group.members["m1"].assigned[A]


async def test_leaving_members_and_deleted_groups_stay_gone(nursery, config, node):
    coord, tp = await _leader(nursery, config, node)
    hb(coord, "m1", 0)
    hb(coord, "m2", 0)
    hb(coord, "m2", -1)
    await _move(coord, tp)
    group = coord.consumer_groups["g"]
    assert set(group.members) == {"m1"} and set(group.target) == {"m1"}
    assert group.group_epoch == 3
    hb(coord, "m1", -1)
    assert admin.delete_groups(coord.groups, coord.offsets, ["g"], coord.consumer_groups,
                               coord.consumer_records.delete) == [E.NONE]
    await _move(coord, tp)
    assert "g" not in coord.consumer_groups


async def test_records_are_in_kafka_formats(nursery, config, node):
    coord, tp = await _leader(nursery, config, node)
    hb(coord, "m1", 0)
    records = {k: v for k, v in coord.store.records(tp[1]) if cr.record_type(k) in cr.RECORD_TYPES}
    # Key: version (= record type) int16, group id and member id as int16-length strings.
    assert cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, "g", "m1") == \
        b"\x00\x08" + b"\x00\x01g" + b"\x00\x02m1"
    # Value: version 0, then MemberEpoch, PreviousMemberEpoch, State (int8),
    # compact arrays of (uuid, compact int32 array, tags), tags.
    current = records[cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, "g", "m1")]
    assert current == (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x00"
                       + b"\x02" + A.bytes + b"\x05" + b"".join(
                           p.to_bytes(4, "big") for p in range(4)) + b"\x00"
                       + b"\x01" + b"\x00")
    assert records[cr.encode_key(cr.GROUP_METADATA, "g")] == b"\x00\x00" + b"\x00\x00\x00\x01" \
        + b"\x00"
    assert records[cr.encode_key(cr.TARGET_ASSIGNMENT_METADATA, "g")] == \
        b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00"
    member = cr.decode_value(cr.MEMBER_METADATA,
                             records[cr.encode_key(cr.MEMBER_METADATA, "g", "m1")])
    assert (member.client_id, member.subscribed_topic_names, member.rebalance_timeout_ms) == \
        ("c", ["a"], 30000)
    topics = cr.decode_value(cr.PARTITION_METADATA,
                             records[cr.encode_key(cr.PARTITION_METADATA, "g")]).topics
    assert [(t.topic_id, t.topic_name, t.num_partitions) for t in topics] == [(A, "a", 4)]
    assert uuid.UUID(bytes=A.bytes) == A
