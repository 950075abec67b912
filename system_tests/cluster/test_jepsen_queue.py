"""A Jepsen-style queue check: acks=all idempotent produce through repeated leader SIGKILLs.

Every value is unique; each send ends ok (with its offset), failed, or unknown
(the client gave up without knowing). While leaders are killed and restarted,
a consumer reads the partition continuously. Afterwards:
- every acknowledged value is in the log, at the offset it was acknowledged at;
- no value is in the log twice (idempotence across leader changes);
- the consumer never skipped: what it saw is a gap-free prefix of the final log;
- every replica's segment files hold the same batches (base, last offset, CRC).
"""

from __future__ import annotations

import random

from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.queue_checker import Reader, Sender, check_history
from system_tests.cluster.test_cluster import consume_all, replicas_identical

KILLS = 20
# The victims' order: fixed, so a failure can be rerun.
SEED = 405


def test_no_acknowledged_value_lost_through_leader_kills(cluster: Cluster, topic: str):
    rng = random.Random(SEED)
    cluster.start({"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "3000"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    sender = Sender(cluster.bootstrap(), topic)
    reader = Reader(cluster.bootstrap(), topic)
    sender.start()
    reader.start()
    try:
        for kill in range(KILLS):
            wait_for("every replica in sync",
                     lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
            before = len(sender.ok)
            wait_for("progress before the kill", lambda b=before: len(sender.ok) > b + 20)
            leader = cluster.leader(topic, 0)
            victim = leader if rng.random() < 0.8 else rng.choice([1, 2, 3])
            cluster.brokers[victim].kill()
            survivors = [n for n in (1, 2, 3) if n != victim]
            wait_for(f"kill {kill}: a live leader",
                     lambda s=survivors: cluster.partitions(topic, s[0])[0]["leader"] in s)
            acked = len(sender.ok)
            wait_for(f"kill {kill}: produce goes on", lambda a=acked: len(sender.ok) > a + 20)
            cluster.brokers[victim].start()
    finally:
        sender.stop.set()
        sender.join(WAIT_S * 3)
    wait_for("every replica in sync at the end",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    log = consume_all(cluster, topic, 0)
    reader.stop.set()
    reader.join(WAIT_S)

    check_history(log, sender, reader)
    assert len(sender.ok) > KILLS * 20
    batches = wait_for("identical replicas", lambda: replicas_identical(cluster, topic, 0,
                                                                         [1, 2, 3]))
    assert batches[-1][1] == len(log) - 1
    print(f"jepsen queue: {KILLS} kills, {sender.sent} sent, {len(sender.ok)} ok, "
          f"{len(sender.failed)} failed, log {len(log)}, reader saw {len(reader.seen)}")
