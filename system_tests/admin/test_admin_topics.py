"""``tierd admin topics`` against one real broker, run as a separate process.

Effects are checked through confluent-kafka (librdkafka), not through the
tool itself, so a tool that reports success without doing anything fails.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from system_tests.admin import create_topic
from system_tests.admin.tool import ok, run_admin
from system_tests.harness import BrokerProcess, free_port

# Bound for one confluent-kafka admin call in these checks.
CHECK_TIMEOUT_S = 15.0
# The tool's --timeout for the unreachable-bootstrap test, and how long that
# run may take in all (interpreter start-up included) before it counts as hanging.
UNREACHABLE_TIMEOUT_S = 2.0
UNREACHABLE_BOUND_S = 15.0


def _metadata_partitions(bootstrap: str, topic: str) -> dict[int, list[int]] | None:
    """partition -> replicas as librdkafka's Metadata shows them; None if no such topic."""
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=CHECK_TIMEOUT_S)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return {p.id: list(p.replicas) for p in found.partitions.values()}


def _topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    """name -> (value, source) of every config of ``topic``, through librdkafka."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=CHECK_TIMEOUT_S)
    return {name: (e.value, ConfigSource(e.source)) for name, e in entries.items()}


def test_create_list_describe_and_delete(broker: BrokerProcess, topic: str) -> None:
    created = ok(broker.bootstrap, "--json", "topics", "create", topic, "--partitions", "3",
                 "--replication-factor", "1", "--config", "retention.ms=1234567").json()
    assert created["topic"] == topic and created["partitions"] == 3
    assert _metadata_partitions(broker.bootstrap, topic) == {0: [0], 1: [0], 2: [0]}
    assert _topic_configs(broker.bootstrap, topic)["retention.ms"] == (
        "1234567", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    names = ok(broker.bootstrap, "topics", "list").stdout.split()
    assert topic in names and "__consumer_offsets" not in names
    assert "__consumer_offsets" in ok(broker.bootstrap, "--json", "topics", "list",
                                      "--internal").json()

    [described] = ok(broker.bootstrap, "--json", "topics", "describe", topic).json()
    assert described["topic"] == topic
    assert described["topic_id"] == created["topic_id"]
    assert described["partition_count"] == 3 and described["replication_factor"] == 1
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for part in described["partitions"]:
        assert part["leader"] == 0 and part["replicas"] == [0] and part["isr"] == [0]

    table = ok(broker.bootstrap, "topics", "describe", topic).stdout
    assert f"topic {topic}  id {created['topic_id']}  partitions 3" in table
    assert "LEADER" in table and "ISR" in table

    deleted = ok(broker.bootstrap, "--json", "topics", "delete", topic).json()
    assert [d["topic"] for d in deleted] == [topic]
    assert _metadata_partitions(broker.bootstrap, topic) is None
    assert topic not in ok(broker.bootstrap, "topics", "list").stdout.split()


def test_create_with_broker_defaults(broker: BrokerProcess, topic: str) -> None:
    out = ok(broker.bootstrap, "topics", "create", topic).stdout
    assert f"created topic {topic}" in out
    assert _metadata_partitions(broker.bootstrap, topic) == {0: [0]}


def test_describe_without_topics_hides_internal_ones(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    names = {t["topic"] for t in ok(broker.bootstrap, "--json", "topics", "describe").json()}
    assert topic in names and not names & {"__consumer_offsets", "__transaction_state"}
    with_internal = ok(broker.bootstrap, "--json", "topics", "describe", "--internal").json()
    assert "__consumer_offsets" in {t["topic"] for t in with_internal}


def test_alter_configs_then_describe_configs(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, configs={"segment.bytes": "1048576",
                                                   "retention.ms": "3600000"})
    out = ok(broker.bootstrap, "topics", "alter-configs", topic, "--set", "retention.ms=60000",
             "--set", "cleanup.policy=compact,delete", "--delete", "segment.bytes").stdout
    assert f"altered topic {topic}" in out

    seen = _topic_configs(broker.bootstrap, topic)
    assert seen["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert seen["cleanup.policy"] == ("compact,delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert seen["segment.bytes"][1] is not ConfigSource.DYNAMIC_TOPIC_CONFIG

    overrides = ok(broker.bootstrap, "--json", "topics", "describe-configs", topic).json()
    assert overrides == [
        {"name": "cleanup.policy", "value": "compact,delete", "source": "DYNAMIC_TOPIC_CONFIG",
         "read_only": False, "sensitive": False},
        {"name": "retention.ms", "value": "60000", "source": "DYNAMIC_TOPIC_CONFIG",
         "read_only": False, "sensitive": False},
    ]
    every = {c["name"]: c for c in ok(broker.bootstrap, "--json", "topics", "describe-configs",
                                      topic, "--all").json()}
    assert every["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert every["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert every["segment.bytes"]["value"] == seen["segment.bytes"][0]
    assert len(every) > len(overrides)

    table = ok(broker.bootstrap, "topics", "describe-configs", topic).stdout
    assert "retention.ms" in table and "DYNAMIC_TOPIC_CONFIG" in table
    assert "segment.bytes" not in table


@pytest.mark.parametrize(("args", "error"), [
    (("topics", "create", "{topic}"), "TOPIC_ALREADY_EXISTS"),
    (("topics", "create", "{topic}-new", "--replication-factor", "3"), "INVALID_REPLICATION_FACTOR"),
    (("topics", "create", "{topic}-new", "--config", "retention.ms=soon"), "INVALID_CONFIG"),
    (("topics", "describe", "{topic}-missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "describe-configs", "{topic}-missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "alter-configs", "{topic}", "--set", "no.such.config=1"), "INVALID_CONFIG"),
    (("topics", "alter-configs", "{topic}-missing", "--set", "retention.ms=1"),
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "delete", "{topic}-missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
])
def test_broker_errors_exit_1_with_one_line(broker: BrokerProcess, topic: str,
                                            args: tuple[str, ...], error: str) -> None:
    create_topic(broker.bootstrap, topic)
    argv = [a.format(topic=topic) for a in args]
    res = run_admin(broker.bootstrap, *argv)
    assert res.returncode == 1, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and error in lines[0] and argv[2] in lines[0], res.stderr
    assert _metadata_partitions(broker.bootstrap, f"{topic}-new") is None


def test_delete_reports_deleted_topics_and_fails_on_the_rest(broker: BrokerProcess,
                                                             topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    res = run_admin(broker.bootstrap, "topics", "delete", topic, f"{topic}-missing")
    assert res.returncode == 1
    assert f"deleted topic {topic}" in res.stdout
    assert "UNKNOWN_TOPIC_OR_PARTITION" in res.stderr and f"{topic}-missing" in res.stderr
    assert _metadata_partitions(broker.bootstrap, topic) is None


def test_unreachable_bootstrap_exits_3_within_timeout() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    res = run_admin(nobody, "--timeout", str(UNREACHABLE_TIMEOUT_S), "topics", "list")
    assert res.returncode == 3, res
    assert time.monotonic() - started < UNREACHABLE_BOUND_S
    assert nobody in res.stderr


@pytest.mark.parametrize("args", [
    ("topics",),
    ("topics", "create"),
    ("topics", "create", "{topic}", "--partitions", "many"),
    ("topics", "create", "{topic}", "--config", "retention.ms"),
    ("topics", "alter-configs", "{topic}"),
    ("topics", "alter-configs", "{topic}", "--set", "retention.ms=1", "--delete", "retention.ms"),
    ("topics", "delete"),
])
def test_bad_usage_exits_2_and_changes_nothing(broker: BrokerProcess, topic: str,
                                               args: tuple[str, ...]) -> None:
    res = run_admin(broker.bootstrap, *(a.format(topic=topic) for a in args))
    assert res.returncode == 2, res
    assert res.stderr.strip()
    assert _metadata_partitions(broker.bootstrap, topic) is None
