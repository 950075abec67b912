"""KIP-848 consumer groups (group.protocol=consumer) end to end: real tierd
processes, the Java 4.x consumer and librdkafka in their own processes.

* Two Java members split a topic's partitions with no partition owned twice;
  one leaves and the other takes its partitions; every record is processed;
  the offsets they committed (OffsetCommit v9, member epochs) are where a
  new member of the group resumes.
* A librdkafka member (confluent-kafka) and a Java member share one group.
* Bad heartbeats over the raw wire protocol get Kafka's error codes:
  INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, FENCED_MEMBER_EPOCH,
  UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND (a classic group of the same id),
  and a stale-epoch commit gets STALE_MEMBER_EPOCH.

Members report their partitions from their own rebalance callbacks, which
in this protocol name the partitions added and removed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol import admin as admin_api
from kafka.protocol import metadata as metadata_api

from protocol.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from system_tests import javatool
from system_tests.test_groups import COMMIT, JOIN, LIST, REPO_ROOT, Broker, RawClient, child_env, wait_until

PARTITIONS = 6
PER_PARTITION = 50
# Bound for a group change to settle: members heartbeat every 5 s (the
# broker's group.consumer.heartbeat.interval.ms) and a move takes two
# heartbeats (revoke, then assign); JVM start-up on a loaded machine on top.
SETTLE_S = 60.0
HEARTBEAT = (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse)
CG_DESCRIBE = (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse)
DESCRIBE_GROUPS = (admin_api.DescribeGroupsRequest, admin_api.DescribeGroupsResponse)


class Member:
    """A KIP-848 group member process (Java KafkaTool group-member, or
    system_tests.group_member confluent-kafka-848) and what it reported."""

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str, workdir: Path,
                 props: tuple[str, ...] = ()) -> None:
        """``props``: more client properties (Java members only), key=value."""
        self.kind = kind
        self.stderr_path = workdir / f"member-{kind}-{time.monotonic_ns()}.err"
        if kind == "java":
            extra = [arg for prop in props for arg in ("--prop", prop)]
            argv = javatool.command(["group-member", "--bootstrap", bootstrap, "--topic", topic,
                                     "--group", group, "--prop", "group.protocol=consumer",
                                     *extra])
        else:
            # "rdkafka-classic": a librdkafka member of the classic protocol.
            client = "confluent-kafka" if kind == "rdkafka-classic" else "confluent-kafka-848"
            argv = [sys.executable, "-m", "system_tests.group_member", client,
                    bootstrap, topic, group, f"{kind}-{uuid.uuid4().hex[:6]}"]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=child_env(),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[int]:
        """Partitions owned now: added by "assigned", removed by "revoked"/"lost"."""
        owned: set[int] = set()
        for ev in self.snapshot():
            if ev["ev"] == "assigned":
                owned |= set(ev["partitions"])
            elif ev["ev"] in ("revoked", "lost"):
                owned -= set(ev["partitions"])
        return owned

    def owned_topics(self) -> set[str]:
        """Like ``owned``, as "topic:partition" (librdkafka members only)."""
        owned: set[str] = set()
        for ev in self.snapshot():
            if ev["ev"] == "assigned":
                owned |= set(ev["topics"])
            elif ev["ev"] in ("revoked", "lost"):
                owned -= set(ev["topics"])
        return owned

    def processed(self) -> set[tuple[int, int]]:
        return {(p, o) for ev in self.snapshot() if ev["ev"] == "batch" and ev["ok"]
                for p, o in ev["records"]}

    def first_offsets(self) -> dict[int, int]:
        first: dict[int, int] = {}
        for ev in self.snapshot():
            if ev["ev"] == "batch":
                for p, o in ev["records"]:
                    first.setdefault(p, o)
        return first

    def leave(self) -> None:
        """Close the consumer cleanly (it leaves the group) and wait for it."""
        if self.kind == "java":
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=5)

    def diagnostics(self) -> str:
        return (f"{self.kind}: rc={self.proc.poll()} events={self.snapshot()[-6:]} "
                f"stderr={self.stderr_path.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
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


def create_and_fill(bootstrap: str, topic: str, start: int = 0) -> None:
    if start == 0:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.send(topic, f"{p}-{start + i}".encode(), partition=p)
    producer.flush()
    producer.close()


def exact_cover(group: list[Member]) -> bool:
    owned = [m.owned() for m in group]
    return all(owned) and sum(len(o) for o in owned) == PARTITIONS and \
        set().union(*owned) == set(range(PARTITIONS))


def everything(group: list[Member], upto: int) -> bool:
    seen = set().union(*(m.processed() for m in group))
    return seen >= {(p, o) for p in range(PARTITIONS) for o in range(upto)}


def test_java_members_split_partitions_leave_and_resume(broker: Broker, tmp_path: Path,
                                                         members: list[Member]) -> None:
    topic, group = "orders", "kip848-java"
    create_and_fill(broker.bootstrap, topic)
    first = Member("java", broker.bootstrap, topic, group, tmp_path)
    members.append(first)
    wait_until(lambda: first.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the first member to own every partition", first.diagnostics)
    second = Member("java", broker.bootstrap, topic, group, tmp_path)
    members.append(second)
    wait_until(lambda: exact_cover([first, second]) and len(second.owned()) == PARTITIONS // 2,
               SETTLE_S, "two members to split the partitions",
               lambda: first.diagnostics() + "\n" + second.diagnostics())
    wait_until(lambda: everything([first, second], PER_PARTITION), SETTLE_S,
               "every record to be processed and committed")
    check_admin_view(broker.bootstrap, group, [first, second])

    first.leave()
    wait_until(lambda: second.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the remaining member to take every partition", second.diagnostics)
    second.leave()

    # A new member resumes from the committed offsets.
    create_and_fill(broker.bootstrap, topic, start=PER_PARTITION)
    third = Member("java", broker.bootstrap, topic, group, tmp_path)
    members.append(third)
    wait_until(lambda: len(third.first_offsets()) == PARTITIONS, SETTLE_S,
               "the new member to read every partition", third.diagnostics)
    assert third.first_offsets() == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    deleted = admin_op(broker.bootstrap, "delete-groups", "--group", group)
    assert deleted == {group: "GroupNotEmptyException"}
    third.leave()
    assert admin_op(broker.bootstrap, "delete-groups", "--group", group) == {group: "ok"}
    listed = admin_op(broker.bootstrap, "list-groups")["groups"]
    assert group not in [g["group"] for g in listed]
    assert "Traceback" not in broker.log_text()


def admin_op(bootstrap: str, *args: str) -> Any:
    result = javatool.run(["admin", "--bootstrap", bootstrap, *args])
    result.pop("_exit")
    return result


def check_admin_view(bootstrap: str, group: str, live: list[Member]) -> None:
    """The Java Admin sees the group as Kafka 4.x shows a consumer group
    (ConsumerGroupDescribe, ListGroups v5), with each member's partitions."""
    described = wait_until(
        lambda: (d := admin_op(bootstrap, "describe-consumer-groups", "--group", group)[group])
        ["state"] == "Stable" and d, SETTLE_S, "the group to be described as stable")
    assert (described["type"], described["assignor"]) == ("Consumer", "uniform")
    assert described["group_epoch"] == described["assignment_epoch"] == 2
    by_member = sorted(m["partitions"] for m in described["members"])
    assert by_member == sorted(sorted(m.owned()) for m in live)
    assert all(m["partitions"] == m["target"] and m["epoch"] == 2
               for m in described["members"])
    listed = {g["group"]: g for g in admin_op(bootstrap, "list-groups")["groups"]}
    assert (listed[group]["type"], listed[group]["state"], listed[group]["protocol"]) == \
        ("Consumer", "Stable", "consumer")


def test_java_static_member_comes_back_to_its_partitions(broker: Broker, tmp_path: Path,
                                                         members: list[Member]) -> None:
    """A static member (group.instance.id) that closes leaves with epoch -2:
    its partitions stay reserved for it, not handed to the other member, and
    its next incarnation gets them back at once."""
    topic, group = "static", "kip848-static"
    create_and_fill(broker.bootstrap, topic)
    static = [Member("java", broker.bootstrap, topic, group, tmp_path,
                     (f"group.instance.id=instance-{i}",)) for i in range(2)]
    members.extend(static)
    wait_until(lambda: exact_cover(static) and len(static[0].owned()) == PARTITIONS // 2,
               SETTLE_S, "two static members to split the partitions",
               lambda: static[0].diagnostics() + "\n" + static[1].diagnostics())
    first_share = static[0].owned()
    static[0].leave()
    client = RawClient(broker.bootstrap)
    try:
        def view() -> dict[str | None, tuple[int, list[int]]]:
            [g] = client.call(*CG_DESCRIBE, 0, group_ids=[group],
                              include_authorized_operations=False).groups
            return {m.instance_id: (m.member_epoch, sorted(p for t in m.assignment.topic_partitions
                                                           for p in t.partitions))
                    for m in g.members}

        # Still a member, at epoch -2, holding its partitions.
        assert view()["instance-0"] == (-2, sorted(first_share))
        back = Member("java", broker.bootstrap, topic, group, tmp_path, ("group.instance.id=instance-0",))
        members.append(back)
        wait_until(lambda: back.owned() == first_share, SETTLE_S,
                   "the static member's partitions to come back to it", back.diagnostics)
        assert static[1].owned() == set(range(PARTITIONS)) - first_share
        assert view()["instance-0"][0] > 0
    finally:
        client.close()
    back.leave()
    static[1].leave()


def test_librdkafka_and_java_members_share_a_group(broker: Broker, tmp_path: Path,
                                                   members: list[Member]) -> None:
    topic, group = "mixed", "kip848-mixed"
    create_and_fill(broker.bootstrap, topic)
    rdkafka = Member("rdkafka", broker.bootstrap, topic, group, tmp_path)
    members.append(rdkafka)
    wait_until(lambda: rdkafka.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the librdkafka member to own every partition", rdkafka.diagnostics)
    java = Member("java", broker.bootstrap, topic, group, tmp_path)
    members.append(java)
    both = [rdkafka, java]
    wait_until(lambda: exact_cover(both) and len(java.owned()) == PARTITIONS // 2, SETTLE_S,
               "librdkafka and Java to split the partitions",
               lambda: rdkafka.diagnostics() + "\n" + java.diagnostics())
    wait_until(lambda: everything(both, PER_PARTITION), SETTLE_S,
               "every record to be processed and committed")
    rdkafka.leave()
    wait_until(lambda: java.owned() == set(range(PARTITIONS)), SETTLE_S,
               "the Java member to take every partition", java.diagnostics)
    java.leave()
    assert "Traceback" not in broker.log_text()


def test_librdkafka_regex_subscription_follows_new_topics(broker: Broker, tmp_path: Path,
                                                         members: list[Member]) -> None:
    """ConsumerGroupHeartbeat v1: librdkafka sends "^rx-.*" as SubscribedTopicRegex;
    the broker resolves it, and a matching topic created later joins the
    assignment (matches are refreshed every 10 s); other topics never do."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("rx-a", 2, 1), NewTopic("other", 2, 1)])
    member = Member("rdkafka", broker.bootstrap, "^rx-.*", "kip848-regex", tmp_path)
    members.append(member)
    wait_until(lambda: member.owned_topics() == {"rx-a:0", "rx-a:1"}, SETTLE_S,
               "the regex member to own rx-a", member.diagnostics)
    admin.create_topics([NewTopic("rx-b", 1, 1)])
    admin.close()
    wait_until(lambda: member.owned_topics() == {"rx-a:0", "rx-a:1", "rx-b:0"}, SETTLE_S,
               "the new matching topic to be assigned", member.diagnostics)
    described = RawClient(broker.bootstrap)
    try:
        [group] = described.call(*CG_DESCRIBE, 0, group_ids=["kip848-regex"],
                                 include_authorized_operations=False).groups
        [m] = group.members
        # librdkafka sends its patterns joined, each in parentheses.
        assert (m.subscribed_topic_regex, m.subscribed_topic_names) == ("(^rx-.*)", [])
    finally:
        described.close()
    member.leave()


# -- bad input over the wire ------------------------------------------------------

INVALID_REQUEST = 42
INVALID_GROUP_ID = 24
GROUP_ID_NOT_FOUND = 69
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113


def _heartbeat(client: RawClient, group: str, member: str, epoch: int, **kw: Any) -> Any:
    joining = epoch == 0
    fields: dict[str, Any] = dict(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if joining else -1,
        subscribed_topic_names=["events"] if joining else None, server_assignor=None,
        topic_partitions=[] if joining else None)
    fields.update(kw)
    return client.call(*HEARTBEAT, 0, **fields)


def test_bad_heartbeats_get_kafka_error_codes(broker: Broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("events", 2, 1)])
    admin.close()
    client = RawClient(broker.bootstrap)
    try:
        versions = client.call(metadata_api.ApiVersionsRequest, metadata_api.ApiVersionsResponse,
                               2)
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[68] == (0, 1)

        assert _heartbeat(client, "g", "m1", 0, rebalance_timeout_ms=-1).error_code == \
            INVALID_REQUEST
        bad = _heartbeat(client, "g", "m1", 0, server_assignor="sticky")
        assert bad.error_code == UNSUPPORTED_ASSIGNOR and "uniform" in bad.error_message
        assert _heartbeat(client, "g", "m1", 3, topic_partitions=[]).error_code == \
            GROUP_ID_NOT_FOUND

        joined = _heartbeat(client, "g", "m1", 0)
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m1", 1)
        assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
        assert joined.heartbeat_interval_ms == 5000
        assert _heartbeat(client, "g", "m1", 7).error_code == FENCED_MEMBER_EPOCH
        assert _heartbeat(client, "g", "nobody", 1).error_code == UNKNOWN_MEMBER_ID
        again = _heartbeat(client, "g", "m1", 1)
        assert (again.error_code, again.member_epoch, again.assignment) == (0, 1, None)

        commit = COMMIT[0][9]
        topic_cls = commit.OffsetCommitRequestTopic
        part = topic_cls.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_leader_epoch=-1,
            committed_metadata="")

        def commit_with(epoch: int) -> int:
            resp = client.call(*COMMIT, 9, group_id="g", generation_id_or_member_epoch=epoch,
                               member_id="m1", group_instance_id=None,
                               topics=[topic_cls(name="events", partitions=[part])])
            return int(resp.topics[0].partitions[0].error_code)

        assert commit_with(0) == STALE_MEMBER_EPOCH
        assert commit_with(1) == 0
        left = _heartbeat(client, "g", "m1", -1)
        assert (left.error_code, left.member_epoch) == (0, -1)

        # A classic group with members keeps its id (its metadata is no
        # ConsumerProtocol subscription: it cannot be upgraded).
        proto = JOIN[0][5].JoinGroupRequestProtocol

        def join(member_id: str) -> Any:
            return client.call(*JOIN, 5, group_id="classic", session_timeout_ms=10000,
                               rebalance_timeout_ms=10000, member_id=member_id,
                               group_instance_id=None, protocol_type="consumer",
                               protocols=[proto(name="range", metadata=b"")])

        assert _heartbeat(client, "classic", "m1", 0).error_code == 0  # no such group yet
        assert _heartbeat(client, "classic", "m1", -1).error_code == 0
        required = join("")
        assert join(required.member_id).error_code == 0
        assert _heartbeat(client, "classic", "m2", 0).error_code == GROUP_ID_NOT_FOUND

        # ListGroups v5 tells the types apart; DescribeGroups and
        # ConsumerGroupDescribe each describe only their own kind.
        assert _heartbeat(client, "g", "m1", 0).error_code == 0
        listed = client.call(*LIST, 5, states_filter=[], types_filter=["consumer"])
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type)
                for g in listed.groups] == [("g", "consumer", "Stable", "consumer")]
        classic = client.call(*DESCRIBE_GROUPS, 5, groups=["g", "classic"],
                              include_authorized_operations=False)
        assert [(g.group_id, g.group_state) for g in classic.groups] == \
            [("g", "Dead"), ("classic", "CompletingRebalance")]
        described = client.call(*CG_DESCRIBE, 0, group_ids=["g", "classic", ""],
                                include_authorized_operations=True)
        ok, other, empty = described.groups
        assert (ok.error_code, ok.group_state, ok.assignor_name, ok.group_epoch) == \
            (0, "Stable", "uniform", ok.assignment_epoch)
        assert ok.authorized_operations == {3, 6, 8}
        [member] = ok.members
        assert member.member_id == "m1" and member.subscribed_topic_names == ["events"]
        assert [(t.topic_name, sorted(t.partitions)) for t in member.assignment.topic_partitions] \
            == [("events", [0, 1])]
        assert (other.error_code, empty.error_code) == (GROUP_ID_NOT_FOUND, INVALID_GROUP_ID)
    finally:
        client.close()
