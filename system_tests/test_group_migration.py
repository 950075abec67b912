"""KIP-848 online migration between the classic and the consumer group
protocols, end to end: a real tierd process, the Java 4.x consumer and
librdkafka in their own processes, the Java Admin client.

* A rolling upgrade then downgrade with Java members: two classic members
  consume; one restarts with group.protocol=consumer (the group becomes a
  consumer group holding a classic member), then the other; then both go
  back to classic one by one (the group becomes classic again when the
  last consumer-protocol member leaves). After every step each partition is
  owned by exactly one member, consumption goes on, no record is lost, and
  the committed offsets survive every conversion.
* A librdkafka consumer-protocol member joins a librdkafka classic member's
  group and leaves again.
* Over the raw wire protocol: with group.consumer.migration.policy=disabled
  a ConsumerGroupHeartbeat to a classic group gets GROUP_ID_NOT_FOUND and a
  JoinGroup to a consumer group INCONSISTENT_GROUP_PROTOCOL, where the
  default policy converts the same group.

One broker serves the client tests (module fixture); the heartbeat
interval it gives consumer-protocol members is 1 s to keep the steps short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from system_tests.test_consumer_groups import (
    HEARTBEAT,
    PARTITIONS,
    PER_PARTITION,
    SETTLE_S,
    Member,
    admin_op,
    create_and_fill,
    everything,
    exact_cover,
)
from system_tests.test_groups import JOIN, LIST, SYNC, Broker, RawClient, wait_until

# Classic Java members heartbeat often, so they hear "rebalance in progress" soon.
CLASSIC_PROPS = ("group.protocol=classic", "heartbeat.interval.ms=500",
                 "session.timeout.ms=10000")
CONSUMER_PROPS = ("group.protocol=consumer",)
GROUP_ID_NOT_FOUND = 69
INCONSISTENT_GROUP_PROTOCOL = 23
MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("migration"),
               ("group.consumer.heartbeat.interval.ms=1000",))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()


def _diagnostics(group: list[Member]) -> Any:
    return lambda: "\n".join(m.diagnostics() for m in group)


def _group_type(bootstrap: str, group: str) -> tuple[str, str]:
    listed = {g["group"]: g for g in admin_op(bootstrap, "list-groups")["groups"]}
    return listed[group]["type"], listed[group]["state"]


class Rolling:
    """The members of one group through a rolling restart, and its records."""

    def __init__(self, broker: Broker, tmp_path: Path, made: list[Member]) -> None:
        self.broker, self.tmp_path, self.made = broker, tmp_path, made
        self.topic, self.group = "rolling", "migrate-java"
        self.produced = PER_PARTITION
        create_and_fill(broker.bootstrap, self.topic)

    def start(self, props: tuple[str, ...]) -> Member:
        member = Member("java", self.broker.bootstrap, self.topic, self.group, self.tmp_path,
                        props)
        self.made.append(member)
        return member

    def settle(self, live: list[Member], what: str) -> None:
        """Every partition owned by exactly one live member, each owning some,
        and every record produced so far processed by someone."""
        wait_until(lambda: exact_cover(live), SETTLE_S, f"{what}: an exact cover",
                   _diagnostics(live))
        wait_until(lambda: everything(self.made, self.produced), SETTLE_S,
                   f"{what}: every record processed", _diagnostics(live))

    def more_records(self) -> None:
        create_and_fill(self.broker.bootstrap, self.topic, start=self.produced)
        self.produced += PER_PARTITION


def test_java_rolling_upgrade_then_downgrade(broker: Broker, tmp_path: Path,
                                             members: list[Member]) -> None:
    run = Rolling(broker, tmp_path, members)
    a, b = run.start(CLASSIC_PROPS), run.start(CLASSIC_PROPS)
    run.settle([a, b], "two classic members")
    assert _group_type(broker.bootstrap, run.group) == ("Classic", "Stable")

    # Upgrade: a restarts with the consumer protocol; b, classic, gives up a share.
    a.leave()
    wait_until(lambda: b.owned() == set(range(PARTITIONS)), SETTLE_S,
               "b to own every partition", b.diagnostics)
    a = run.start(CONSUMER_PROPS)
    run.more_records()
    run.settle([a, b], "one consumer-protocol and one classic member")
    assert _group_type(broker.bootstrap, run.group)[0] == "Consumer"
    described = admin_op(broker.bootstrap, "describe-consumer-groups", "--group",
                         run.group)[run.group]
    assert described["type"] == "Consumer" and len(described["members"]) == 2
    assert sorted(m["partitions"] for m in described["members"]) == \
        sorted(sorted(m.owned()) for m in (a, b))
    # ConsumerGroupDescribe v1 tells the protocols apart (MemberType).
    assert admin_op(broker.bootstrap, "member-protocols", "--group", run.group) == \
        {"members": ["classic", "consumer"]}

    b.leave()
    b = run.start(CONSUMER_PROPS)
    run.more_records()
    run.settle([a, b], "two consumer-protocol members")

    # Downgrade: a goes back to classic inside the consumer group, then b
    # leaves, the last consumer-protocol member: the group is classic again.
    a.leave()
    a = run.start(CLASSIC_PROPS)
    run.more_records()
    run.settle([a, b], "one classic member inside the consumer group")
    assert _group_type(broker.bootstrap, run.group)[0] == "Consumer"
    b.leave()
    wait_until(lambda: a.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the classic member to own every partition", a.diagnostics)
    assert _group_type(broker.bootstrap, run.group) == ("Classic", "Stable")
    b = run.start(CLASSIC_PROPS)
    run.more_records()
    run.settle([a, b], "two classic members again")

    # The offsets committed under both protocols are all there.
    wait_until(lambda: set(admin_op(broker.bootstrap, "group-offsets", "--group", run.group)
                           ["offsets"].values()) == {run.produced}, SETTLE_S,
               "every partition's committed offset to be at the end")
    a.leave()
    b.leave()
    assert "Traceback" not in broker.log_text()


def test_librdkafka_member_upgrades_and_downgrades_a_classic_group(
        broker: Broker, tmp_path: Path, members: list[Member]) -> None:
    topic, group = "rd-migrate", "migrate-rdkafka"
    create_and_fill(broker.bootstrap, topic)
    classic = Member("rdkafka-classic", broker.bootstrap, topic, group, tmp_path)
    members.append(classic)
    wait_until(lambda: classic.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the classic member to own every partition", classic.diagnostics)
    modern = Member("rdkafka", broker.bootstrap, topic, group, tmp_path)
    members.append(modern)
    both = [classic, modern]
    wait_until(lambda: exact_cover(both), SETTLE_S, "the two protocols to share the group",
               _diagnostics(both))
    assert _group_type(broker.bootstrap, group)[0] == "Consumer"
    create_and_fill(broker.bootstrap, topic, start=PER_PARTITION)
    wait_until(lambda: everything(both, 2 * PER_PARTITION), SETTLE_S,
               "every record processed", _diagnostics(both))
    modern.leave()
    wait_until(lambda: classic.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the classic member to own every partition again", classic.diagnostics)
    assert _group_type(broker.bootstrap, group) == ("Classic", "Stable")
    classic.leave()
    assert "Traceback" not in broker.log_text()


# -- the policy over the raw wire protocol ----------------------------------------


def _subscription(topic: str) -> bytes:
    sub = ConsumerProtocolSubscription(version=1, topics=[topic], user_data=None,
                                       owned_partitions=[], generation_id=-1, rack_id=None)
    return bytes(sub.encode(version=1))


def _classic_member(client: RawClient, group: str, topic: str,
                    assignment: bytes = b"") -> tuple[str, int]:
    """A classic member that joined ``group`` (as its leader) and synced,
    assigning itself ``assignment``; (member id, generation)."""
    proto = JOIN[0][5].JoinGroupRequestProtocol

    def join(member_id: str) -> Any:
        return client.call(*JOIN, 5, group_id=group, session_timeout_ms=30000,
                           rebalance_timeout_ms=30000, member_id=member_id,
                           group_instance_id=None, protocol_type="consumer",
                           protocols=[proto(name="range", metadata=_subscription(topic))])

    required = join("")
    assert required.error_code == MEMBER_ID_REQUIRED
    joined = join(required.member_id)
    assert joined.error_code == 0
    assert joined.leader == joined.member_id
    own = SYNC[0][3].SyncGroupRequestAssignment(member_id=joined.member_id,
                                                assignment=assignment)
    synced = client.call(*SYNC, 3, group_id=group, generation_id=joined.generation_id,
                         member_id=joined.member_id, group_instance_id=None,
                         assignments=[own] if assignment else [])
    assert synced.error_code == 0
    return joined.member_id, joined.generation_id


def _consumer_join(client: RawClient, group: str, member: str, topic: str) -> Any:
    return client.call(*HEARTBEAT, 0, group_id=group, member_id=member, member_epoch=0,
                       instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                       subscribed_topic_names=[topic], server_assignor=None,
                       topic_partitions=[])


def _policy_outcomes(bootstrap: str) -> tuple[int, int, list[tuple[str, str]]]:
    """(the heartbeat's error on a classic group, the JoinGroup's error on a
    consumer group, ListGroups v5's (group, type) afterwards)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("policy", 2, 1)])
    admin.close()
    client = RawClient(bootstrap)
    try:
        _classic_member(client, "policy-classic", "policy")
        upgrade = _consumer_join(client, "policy-classic", "m1", "policy").error_code
        assert _consumer_join(client, "policy-consumer", "m2", "policy").error_code == 0
        proto = JOIN[0][5].JoinGroupRequestProtocol
        joined = client.call(*JOIN, 5, group_id="policy-consumer", session_timeout_ms=30000,
                             rebalance_timeout_ms=30000, member_id="", group_instance_id=None,
                             protocol_type="consumer",
                             protocols=[proto(name="range", metadata=_subscription("policy"))])
        listed = client.call(*LIST, 5, states_filter=[], types_filter=[])
        return upgrade, joined.error_code, sorted(
            (g.group_id, g.group_type) for g in listed.groups if g.group_id.startswith("policy"))
    finally:
        client.close()


def test_policy_disabled_keeps_the_protocols_apart(broker: Broker, tmp_path: Path) -> None:
    disabled = Broker(tmp_path, ("group.consumer.migration.policy=DISABLED",))
    disabled.start()
    try:
        upgrade, join, listed = _policy_outcomes(disabled.bootstrap)
        assert (upgrade, join) == (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL)
        assert listed == [("policy-classic", "classic"), ("policy-consumer", "consumer")]
    finally:
        disabled.stop()
    # The default (bidirectional) converts the classic group and lets the
    # classic member into the consumer group (v4+: first a member id).
    upgrade, join, listed = _policy_outcomes(broker.bootstrap)
    assert (upgrade, join) == (0, MEMBER_ID_REQUIRED)
    assert listed == [("policy-classic", "consumer"), ("policy-consumer", "consumer")]
