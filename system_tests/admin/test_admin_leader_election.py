"""``tierd admin leader-election`` against one broker, run as a separate
process: its single replicas always lead, so nothing is ever elected, but
the tool's rows, exit codes and usage errors are those of a cluster (the
elections themselves: system_tests/cluster/test_leader_election.py)."""

from __future__ import annotations

from system_tests.admin import create_topic
from system_tests.admin.tool import ok, run_admin
from system_tests.harness import BrokerProcess


def test_nothing_to_elect_on_one_broker(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    rows = ok(broker.bootstrap, "--json", "leader-election", "--election-type", "preferred",
              "--topic", topic, "--partition", "1", "--partition", "0").json()
    assert rows == [
        {"topic": topic, "partition": 0, "result": "ELECTION_NOT_NEEDED", "message": None},
        {"topic": topic, "partition": 1, "result": "ELECTION_NOT_NEEDED", "message": None}]
    # All partitions: the ones needing no election are not listed.
    assert ok(broker.bootstrap, "--json", "leader-election", "--election-type", "unclean",
              "--all-topic-partitions").json() == []
    table = ok(broker.bootstrap, "leader-election", "--election-type", "preferred",
               "--topic", topic, "--partition", "0").stdout
    assert "ELECTION_NOT_NEEDED" in table and topic in table


def test_unknown_partition_fails_and_usage_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    res = run_admin(broker.bootstrap, "--json", "leader-election", "--election-type",
                    "preferred", "--topic", topic, "--partition", "5")
    assert res.returncode == 1, res.stderr
    [row] = res.json()
    assert (row["partition"], row["result"]) == (5, "UNKNOWN_TOPIC_OR_PARTITION")
    for bad in (["--election-type", "preferred", "--topic", topic],
                ["--election-type", "sideways", "--all-topic-partitions"],
                ["--election-type", "preferred", "--all-topic-partitions", "--partition", "0"],
                ["--election-type", "preferred"]):
        res = run_admin(broker.bootstrap, "leader-election", *bad)
        assert res.returncode == 2, (bad, res.returncode, res.stderr)
