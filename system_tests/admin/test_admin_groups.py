"""``tierd admin groups`` against one real broker: offsets committed by real
consumers (librdkafka and kafka-python), the tool run as a separate process,
and every reset checked independently with librdkafka's OffsetFetch.

Each test produces 10 records to partition 0 and 6 to partition 1 of its own
topic and, unless it needs a live member, commits {0: 5, 1: 3} for a group
that never joins (a Kafka "simple" group, Empty from the start), which avoids
the coordinator's initial rebalance delay.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from system_tests.admin import create_topic
from system_tests.admin.tool import ok, run_admin
from system_tests.harness import BrokerProcess, free_port

RECORDS = {0: 10, 1: 6}
COMMITTED = {0: 5, 1: 3}
# Record i of each partition carries timestamp BASE + i s (BASE: a minute ago,
# recent enough that no retention rule touches it).
STEP_MS = 1000
WAIT_S = 30.0


def produce(bootstrap: str, topic: str, base_ms: int) -> None:
    """RECORDS[p] records into each partition p, record i stamped base_ms + i * STEP_MS."""
    create_topic(bootstrap, topic, partitions=len(RECORDS))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition,
                             timestamp=base_ms + i * STEP_MS)
    assert producer.flush(WAIT_S) == 0


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for ``group`` as a consumer that never joins it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets, fetched by librdkafka (None: nothing committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in RECORDS], timeout=WAIT_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in got}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


@pytest.fixture
def group(topic: str) -> str:
    return f"g-{topic}"


@pytest.fixture
def base_ms(broker: BrokerProcess, topic: str, group: str) -> int:
    """The topic produced and COMMITTED committed; returns the first record's timestamp."""
    base = (int(time.time()) - 60) * 1000
    produce(broker.bootstrap, topic, base)
    commit(broker.bootstrap, group, topic, COMMITTED)
    return base


def test_list_and_describe_report_offsets_and_lag(broker: BrokerProcess, topic: str,
                                                  group: str, base_ms: int) -> None:
    listed = ok(broker.bootstrap, "--json", "groups", "list").json()
    assert {"group": group, "state": "Empty", "protocol_type": ""} in listed

    [described] = ok(broker.bootstrap, "--json", "groups", "describe", group).json()
    assert (described["group"], described["state"], described["members"]) == (group, "Empty", 0)
    assert [(r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"],
             r["consumer_id"]) for r in described["partitions"]] == [
        (topic, 0, 5, 10, 5, None), (topic, 1, 3, 6, 3, None)]

    table = ok(broker.bootstrap, "groups", "describe", group).stdout
    assert "LOG-END-OFFSET" in table and topic in table


def test_describe_read_committed_lags_to_the_last_stable_offset(
        broker: BrokerProcess, topic: str, group: str, base_ms: int) -> None:
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(WAIT_S)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"open-%d" % i, partition=0)
    assert txn.flush(WAIT_S) == 0
    try:
        def ends(*isolation: str) -> dict[int, tuple[int, int]]:
            [described] = ok(broker.bootstrap, "--json", "groups", "describe", group,
                             *isolation).json()
            return {r["partition"]: (r["log_end_offset"], r["lag"])
                    for r in described["partitions"]}

        assert ends() == {0: (13, 8), 1: (6, 3)}
        assert ends("--isolation", "read_committed") == {0: (10, 5), 1: (6, 3)}
    finally:
        txn.abort_transaction(WAIT_S)


def test_describe_active_group_shows_members_and_reset_is_refused(
        broker: BrokerProcess, topic: str, group: str) -> None:
    produce(broker.bootstrap, topic, int(time.time()) * 1000)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             client_id="admin-groups-test", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + WAIT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert len(consumer.assignment()) == 2
        consumer.commit({KafkaTopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                         for p, o in COMMITTED.items()})

        [described] = ok(broker.bootstrap, "--json", "groups", "describe", group).json()
        assert (described["state"], described["members"]) == ("Stable", 1)
        rows = described["partitions"]
        assert [(r["partition"], r["committed_offset"], r["lag"], r["client_id"])
                for r in rows] == [(0, 5, 5, "admin-groups-test"), (1, 3, 3, "admin-groups-test")]
        assert all(r["consumer_id"].startswith("admin-groups-test") and r["host"]
                   for r in rows)

        refused = run_admin(broker.bootstrap, "groups", "reset-offsets", group, "--all-topics",
                            "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert "Stable" in refused.stderr and "1 active member" in refused.stderr
        assert committed(broker.bootstrap, group, topic) == COMMITTED
    finally:
        consumer.close()
    [after] = ok(broker.bootstrap, "--json", "groups", "describe", group).json()
    assert (after["state"], after["members"]) == ("Empty", 0)


def test_reset_dry_run_prints_the_plan_and_commits_nothing(broker: BrokerProcess, topic: str,
                                                           group: str, base_ms: int) -> None:
    plan = ok(broker.bootstrap, "--json", "groups", "reset-offsets", group, "--all-topics",
              "--to-earliest").json()
    assert plan == [
        {"topic": topic, "partition": 0, "current_offset": 5, "new_offset": 0},
        {"topic": topic, "partition": 1, "current_offset": 3, "new_offset": 0}]
    assert committed(broker.bootstrap, group, topic) == COMMITTED


@pytest.mark.parametrize(("target", "want"), [
    (["--to-earliest"], {0: 0, 1: 0}),
    (["--to-latest"], {0: 10, 1: 6}),
    (["--to-offset", "4"], {0: 4, 1: 4}),
    (["--to-offset", "8"], {0: 8, 1: 6}),  # clamped to partition 1's log end
    (["--shift-by", "2"], {0: 7, 1: 5}),
    (["--shift-by", "-4"], {0: 1, 1: 0}),  # clamped to the log start
    (["--shift-by", "100"], {0: 10, 1: 6}),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_reset_execute_commits_exactly_the_target(broker: BrokerProcess, topic: str, group: str,
                                                  base_ms: int, target: list[str],
                                                  want: dict[int, int]) -> None:
    plan = ok(broker.bootstrap, "--json", "groups", "reset-offsets", group, "--all-topics",
              *target, "--execute").json()
    assert {r["partition"]: r["new_offset"] for r in plan} == want
    assert committed(broker.bootstrap, group, topic) == want


@pytest.mark.parametrize(("offset_s", "want"), [
    (3.5, {0: 4, 1: 4}),  # first records stamped at or after base + 3.5 s
    (0.0, {0: 0, 1: 0}),  # exactly the first record's timestamp
    (7.0, {0: 7, 1: 6}),  # partition 1 has nothing that late: its log end
])
def test_reset_to_datetime_finds_the_first_record_at_or_after(
        broker: BrokerProcess, topic: str, group: str, base_ms: int, offset_s: float,
        want: dict[int, int]) -> None:
    ok(broker.bootstrap, "groups", "reset-offsets", group, "--topic", topic,
       "--to-datetime", iso(base_ms + int(offset_s * 1000)), "--execute")
    assert committed(broker.bootstrap, group, topic) == want


def test_reset_only_the_named_partitions(broker: BrokerProcess, topic: str, group: str,
                                         base_ms: int) -> None:
    ok(broker.bootstrap, "groups", "reset-offsets", group, "--topic", f"{topic}:1",
       "--to-offset", "2", "--execute")
    assert committed(broker.bootstrap, group, topic) == {0: 5, 1: 2}

    missing = run_admin(broker.bootstrap, "groups", "reset-offsets", group, "--topic",
                        f"{topic}:7", "--to-earliest")
    assert missing.returncode == 1 and "no partition(s) 7" in missing.stderr
    unknown = run_admin(broker.bootstrap, "groups", "reset-offsets", group, "--topic",
                        f"{topic}-absent", "--to-earliest")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr


def test_unknown_group_is_an_error(broker: BrokerProcess, topic: str, group: str,
                                   base_ms: int) -> None:
    absent = f"{group}-absent"
    res = run_admin(broker.bootstrap, "groups", "describe", absent)
    assert res.returncode == 1 and absent in res.stderr and "do not exist" in res.stderr
    # The known group is still described, the unknown one named on stderr.
    both = run_admin(broker.bootstrap, "--json", "groups", "describe", group, absent)
    assert both.returncode == 1 and [g["group"] for g in both.json()] == [group]
    res = run_admin(broker.bootstrap, "groups", "reset-offsets", absent, "--all-topics",
                    "--to-earliest")
    assert res.returncode == 1 and "no committed offsets" in res.stderr
    res = run_admin(broker.bootstrap, "groups", "delete", absent)
    assert res.returncode == 1 and "GroupIdNotFound" in res.stderr


def test_delete_removes_an_empty_group(broker: BrokerProcess, topic: str, group: str,
                                       base_ms: int) -> None:
    ok(broker.bootstrap, "groups", "delete", group)
    assert committed(broker.bootstrap, group, topic) == {0: None, 1: None}
    assert run_admin(broker.bootstrap, "groups", "describe", group).returncode == 1


def test_usage_errors_and_unreachable_cluster(broker: BrokerProcess) -> None:
    for bad in (["reset-offsets", "g", "--all-topics"],
                ["reset-offsets", "g", "--all-topics", "--to-earliest", "--to-latest"],
                ["reset-offsets", "g", "--topic", "t:x", "--to-earliest"],
                ["reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"]):
        assert run_admin(broker.bootstrap, "groups", *bad).returncode == 2, bad
    down = run_admin(f"127.0.0.1:{free_port()}", "--timeout", "2", "groups", "list")
    assert down.returncode == 3 and "no broker reachable" in down.stderr
