"""ISR shrink/expand, clean and unclean elections, and ZooKeeper going away."""

from __future__ import annotations

import os
import signal
import time

from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_cluster import consume_all, produce_kafka_python


def test_a_stopped_follower_leaves_the_isr_and_returns(cluster: Cluster, topic: str):
    # The lag limit (1.5 s) is well below the session timeout (8 s): the shrink
    # is the leader's doing, not the controller noticing a dead broker.
    cluster.start({"zookeeper.session.timeout.ms": "8000", "replica.lag.time.max.ms": "1500"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    controller = cluster.describe_cluster()["controller_id"]
    # Not the controller: stopping it would stall the AlterPartition that shrinks the ISR.
    follower = next(n for n in (1, 2, 3) if n not in (leader, controller))
    pid = cluster.brokers[follower].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the ISR without the stopped follower",
                 lambda: follower not in cluster.partitions(topic, leader)[0]["isr"])
        # acks=all still works: two in-sync replicas remain.
        assert produce_kafka_python(cluster, topic, [b"while-stopped"] * 20, 0,
                                    nodes=[leader]) == list(range(20))
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("the follower back in the ISR",
             lambda: cluster.partitions(topic, leader)[0]["isr"] == [1, 2, 3])
    # The leader's own lag check did it (a broker lost by its session would be
    # taken out by the controller instead, without these lines).
    assert f"lagging=[{follower}]" in cluster.brokers[leader].log_tail()
    assert f"joining=[{follower}]" in cluster.brokers[leader].log_tail()


def _isolate_leader(cluster: Cluster, topic: str, configs: dict[str, str]) -> tuple[int, int]:
    """Leave the leader alone in the ISR with records the others lack, then kill it.

    Returns (old leader, records it had).
    """
    cluster.start({"replica.lag.time.max.ms": "1500"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "1", **configs})
    produce_kafka_python(cluster, topic, [b"shared"] * 10, 0)
    leader = cluster.leader(topic, 0)
    followers = [n for n in (1, 2, 3) if n != leader]
    for n in followers:
        cluster.brokers[n].kill()
    wait_for("the leader alone in the ISR",
             lambda: cluster.partitions(topic, leader)[0]["isr"] == [leader])
    produce_kafka_python(cluster, topic, [b"only-on-leader"] * 5, 0)
    cluster.brokers[leader].kill()
    cluster.brokers[followers[0]].start()
    return leader, 15


def test_without_unclean_election_the_partition_waits_for_its_last_in_sync_replica(
        cluster: Cluster, topic: str):
    leader, count = _isolate_leader(cluster, topic, {})
    survivor = next(n for n in cluster.live)
    # The controller has handled the returning replica (it was told to follow no leader)...
    wait_for("the returning replica told there is no leader",
             lambda: "leader=-1" in cluster.brokers[survivor].log_tail())
    # ...and did not elect it: it was not in sync.
    assert cluster.partitions(topic, survivor)[0]["leader"] == -1
    cluster.brokers[leader].start()
    wait_for("the last in-sync replica leads again",
             lambda: cluster.partitions(topic, survivor)[0]["leader"] == leader)
    assert [v for _, v in consume_all(cluster, topic, 0)] == \
        [b"shared"] * 10 + [b"only-on-leader"] * 5
    assert count == 15


def test_unclean_election_brings_the_partition_back_and_the_old_leader_truncates(
        cluster: Cluster, topic: str):
    leader, _ = _isolate_leader(cluster, topic, {"unclean.leader.election.enable": "true"})
    survivor = next(n for n in cluster.live)
    wait_for("an unclean leader", lambda: cluster.partitions(topic, survivor)[0]["leader"]
             == survivor)
    assert produce_kafka_python(cluster, topic, [b"new"] * 3, 0) == [10, 11, 12]
    cluster.brokers[leader].start()
    wait_for("the old leader following", lambda: leader in
             cluster.partitions(topic, survivor)[0]["isr"])
    assert [v for _, v in consume_all(cluster, topic, 0)] == [b"shared"] * 10 + [b"new"] * 3
    wait_for("the old leader truncated to the new leader's log", lambda: (
        cluster.segment_batches(leader, topic, 0) == cluster.segment_batches(survivor, topic, 0)))


def test_zookeeper_down_for_a_while(cluster: Cluster, topic: str, zookeeper):
    cluster.start()
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    produce_kafka_python(cluster, topic, [b"before"] * 10, 0)
    zookeeper.pause()
    try:
        # Leaders keep serving acks=all produce and fetch without ZooKeeper.
        assert produce_kafka_python(cluster, topic, [b"during"] * 10, 0) == list(range(10, 20))
        assert len(consume_all(cluster, topic, 0)) == 20
        time.sleep(4)  # the outage lasts past the 3 s session timeout
    finally:
        zookeeper.resume()
    wait_for("every broker registered again",
             lambda: len(cluster.describe_cluster()["brokers"]) == 3
             and cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    assert produce_kafka_python(cluster, topic, [b"after"] * 10, 0) == list(range(20, 30))
    assert [v for _, v in consume_all(cluster, topic, 0)] == \
        [b"before"] * 10 + [b"during"] * 10 + [b"after"] * 10
