"""ElectLeaders on three brokers and a real ZooKeeper: the Java 4.x Admin's
electLeaders and ``tierd admin leader-election`` moving leadership back to
preferred replicas, an unclean election for a partition whose in-sync
replicas are all gone, and the per-partition errors Kafka answers. The
partitions are read back through DescribeTopicPartitions (Java describeTopics)
and Metadata."""

from __future__ import annotations

from typing import Any

from kafka.admin import NewTopic
from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from protocol.errors import ErrorCode
from system_tests import javatool
from system_tests._proc import RawClient
from system_tests.admin.tool import ok, run_admin
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_cluster import produce_kafka_python

# No periodic rebalance: only the elections the tests ask for move leaders.
NO_AUTO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


def _java(cluster: Cluster, op: str, *args: str) -> dict[str, Any]:
    [result] = javatool.run_batch([
        ["admin", "--bootstrap", ",".join(cluster.bootstrap()), op, *args]])
    assert result["exit"] == javatool.EXIT_OK, result
    return dict(result["result"])


def _elect(cluster: Cluster, kind: str, *partitions: str) -> dict[str, str | None]:
    flags = [a for p in partitions for a in ("--partition", p)]
    return dict(_java(cluster, "elect-leaders", "--election-type", kind, *flags)["partitions"])


def _move_leadership_off(cluster: Cluster, topic: str, partition: int) -> int:
    """Stop the preferred replica of ``topic``-``partition`` and start it again:
    another replica leads meanwhile and keeps leading. Returns the preferred one."""
    preferred = cluster.partitions(topic)[partition]["replicas"][0]
    cluster.brokers[preferred].stop()
    wait_for("another leader", lambda: cluster.partitions(topic)[partition]["leader"]
             not in (preferred, -1))
    cluster.brokers[preferred].start()
    wait_for("the preferred replica back in the ISR",
             lambda: preferred in cluster.partitions(topic)[partition]["isr"])
    assert cluster.partitions(topic)[partition]["leader"] != preferred
    return preferred


def test_preferred_election_gives_leadership_back(cluster: Cluster, topic: str) -> None:
    cluster.start(NO_AUTO_REBALANCE)
    cluster.create_topic(topic, 2, 3)
    produce_kafka_python(cluster, topic, [b"before"] * 5, 0)
    preferred = _move_leadership_off(cluster, topic, 0)

    # Through the Java Admin: elected; asked again: not needed; unknown partition.
    assert _elect(cluster, "preferred", f"{topic}:0", f"{topic}:9") == {
        f"{topic}:0": None, f"{topic}:9": "UnknownTopicOrPartitionException"}
    wait_for("the preferred replica leading on every broker", lambda: all(
        cluster.partitions(topic, n)[0]["leader"] == preferred for n in cluster.live))
    assert _elect(cluster, "preferred", f"{topic}:0") == {
        f"{topic}:0": "ElectionNotNeededException"}
    described = _java(cluster, "describe-topics-paged", "--topic", topic, "--limit", "1")
    [p0, _p1] = described["topics"][topic]["partitions"]
    assert p0["leader"] == preferred and p0["replicas"][0] == preferred
    assert produce_kafka_python(cluster, topic, [b"after"] * 5, 0) == list(range(5, 10))

    # A broker that is not the controller answers NOT_CONTROLLER for each partition.
    controller = cluster.describe_cluster()["controller_id"]
    other = cluster.brokers[next(n for n in cluster.live if n != controller)]
    with RawClient(other.host, other.port) as raw:
        resp = raw.request(ElectLeadersRequest[2](
            election_type=0, timeout_ms=5000, topic_partitions=[
                ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])]),
            2, ElectLeadersResponse[2])
    assert resp.error_code == 0
    assert [(t.topic, p.partition_id, p.error_code) for t in resp.replica_election_results
            for p in t.partition_result] == [(topic, 0, ErrorCode.NOT_CONTROLLER)]

    # Through tierd admin: the other partition, then everything (nothing left to do).
    preferred1 = _move_leadership_off(cluster, topic, 1)
    bootstrap = ",".join(cluster.bootstrap())
    rows = ok(bootstrap, "--json", "leader-election", "--election-type", "preferred",
              "--topic", topic, "--partition", "1").json()
    assert [(r["topic"], r["partition"], r["result"]) for r in rows] == [
        (topic, 1, "ELECTED")]
    wait_for("partition 1's preferred replica leading",
             lambda: cluster.partitions(topic)[1]["leader"] == preferred1)
    everything = run_admin(bootstrap, "--json", "leader-election", "--election-type",
                           "preferred", "--all-topic-partitions")
    listed = everything.json()
    assert [r for r in listed if r["topic"] == topic] == []
    failed = [r for r in listed if r["result"] not in ("ELECTED", "ELECTION_NOT_NEEDED")]
    assert everything.returncode == (1 if failed else 0), everything.stderr


def test_unclean_election_elects_an_out_of_sync_replica(cluster: Cluster, topic: str) -> None:
    cluster.start({**NO_AUTO_REBALANCE, "replica.lag.time.max.ms": "1500"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "1"})
    leader = cluster.leader(topic, 0)
    # A partition whose only replica is the leader: nothing to elect once it is gone.
    lonely = f"{topic}-lonely"
    admin = cluster.admin()
    try:
        admin.create_topics([NewTopic(lonely, replica_assignments={0: [leader]})])
    finally:
        admin.close()
    wait_for("the lonely partition led", lambda: cluster.partitions(lonely)[0]["leader"] == leader)
    produce_kafka_python(cluster, topic, [b"shared"] * 10, 0)
    followers = [n for n in (1, 2, 3) if n != leader]
    for n in followers:
        cluster.brokers[n].kill()
    wait_for("the leader alone in the ISR",
             lambda: cluster.partitions(topic, leader)[0]["isr"] == [leader])
    # Its leader is alive: an unclean election is not needed.
    assert _elect(cluster, "unclean", f"{topic}:0") == {
        f"{topic}:0": "ElectionNotNeededException"}
    produce_kafka_python(cluster, topic, [b"only-on-leader"] * 5, 0, nodes=[leader])
    cluster.brokers[leader].kill()
    survivor = followers[0]
    cluster.brokers[survivor].start()
    # unclean.leader.election.enable is off: the partition waits for its last in-sync replica.
    wait_for("the returning replica told there is no leader",
             lambda: "leader=-1" in cluster.brokers[survivor].log_tail())
    described = _java(cluster, "describe-topics-paged", "--topic", topic)
    [part] = described["topics"][topic]["partitions"]
    assert (part["leader"], part["isr"]) == (None, [leader])

    assert _elect(cluster, "unclean", f"{topic}:0", f"{lonely}:0") == {
        f"{topic}:0": None, f"{lonely}:0": "EligibleLeadersNotAvailableException"}
    assert _elect(cluster, "preferred", f"{lonely}:0") == {
        f"{lonely}:0": "PreferredLeaderNotAvailableException"}
    wait_for("the out-of-sync replica leading",
             lambda: cluster.partitions(topic, survivor)[0]["leader"] == survivor)
    assert cluster.partitions(topic, survivor)[0]["isr"] == [survivor]
    # It has what it had replicated, not what only the old leader had.
    assert produce_kafka_python(cluster, topic, [b"new"] * 3, 0,
                                nodes=[survivor]) == [10, 11, 12]
