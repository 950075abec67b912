"""Cluster mode end to end: three tierd processes on a real ZooKeeper, real clients.

Each test gets a fresh chroot and three brokers; kills are real signals.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.harness import REPO_ROOT, free_port


def produce_kafka_python(cluster: Cluster, topic: str, values: list[bytes],
                         partition: int, nodes: list[int] | None = None) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(nodes), acks="all", retries=50,
                             request_timeout_ms=10_000, retry_backoff_ms=200)
    try:
        futures = [producer.send(topic, v, partition=partition) for v in values]
        producer.flush(timeout=WAIT_S)
        return [f.get(timeout=WAIT_S).offset for f in futures]
    finally:
        producer.close()


def produce_confluent(cluster: Cluster, topic: str, values: list[bytes], partition: int
                      ) -> list[int]:
    producer = Producer({"bootstrap.servers": ",".join(cluster.bootstrap()), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": int(WAIT_S * 1000)})
    offsets: dict[bytes, int] = {}
    errors = []

    def done(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            offsets[msg.value()] = msg.offset()

    for v in values:
        producer.produce(topic, v, partition=partition, on_delivery=done)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0 and not errors, errors
    return [offsets[v] for v in values]


def consume_all(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        end = consumer.position(tp)
        consumer.seek_to_beginning(tp)
        out = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                out += [(r.offset, r.value) for r in records]
        return out
    finally:
        consumer.close()


def replicas_identical(cluster: Cluster, topic: str, partition: int, nodes: list[int]):
    logs = [cluster.segment_batches(n, topic, partition) for n in nodes]
    return logs[0] if all(log == logs[0] for log in logs) and logs[0] else None


def test_replicates_fails_over_and_the_killed_broker_catches_up(cluster: Cluster, topic: str):
    cluster.start()
    cluster.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    views = [cluster.partitions(topic, n) for n in (1, 2, 3)]
    assert views[0] == views[1] == views[2]
    assert all(sorted(p["replicas"]) == [1, 2, 3] and p["isr"] == [1, 2, 3]
               for p in views[0].values())
    controllers = {cluster.describe_cluster(n)["controller_id"] for n in (1, 2, 3)}
    assert len(controllers) == 1 and controllers <= {1, 2, 3}

    first = [f"a{i}".encode() for i in range(1000)]
    assert produce_kafka_python(cluster, topic, first, 0) == list(range(1000))
    victim = cluster.leader(topic, 0)
    cluster.brokers[victim].kill()
    second = [f"b{i}".encode() for i in range(1000)]
    offsets = produce_confluent(cluster, topic, second, 0)
    assert offsets == list(range(1000, 2000))  # acknowledged at the offsets that follow
    new_leader = wait_for("a new leader", lambda: (led := cluster.leader(topic, 0)) != victim
                          and led > 0 and led)
    assert new_leader != victim
    third = [f"c{i}".encode() for i in range(500)]
    assert produce_kafka_python(cluster, topic, third, 0) == list(range(2000, 2500))

    got = consume_all(cluster, topic, 0)
    assert got == list(enumerate(first + second + third))

    cluster.brokers[victim].start()
    wait_for("the restarted broker back in the ISR",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    batches = wait_for("identical replicas",
                       lambda: replicas_identical(cluster, topic, 0, [1, 2, 3]))
    assert batches[-1][1] == 2499


def test_controlled_shutdown_moves_leadership_before_exit(cluster: Cluster, topic: str):
    cluster.start()
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    leaders = {p: info["leader"] for p, info in cluster.partitions(topic).items()}
    victim = leaders[0]
    led = [p for p, leader in leaders.items() if leader == victim]
    produce_kafka_python(cluster, topic, [b"before"] * 10, 0)
    assert cluster.brokers[victim].stop() == 0
    # It exited only once the controller had moved every leadership it held.
    log = cluster.brokers[victim].log_tail()
    assert "controlled shutdown done" in log
    wait_for("metadata without the stopped broker", lambda: (
        after := cluster.partitions(topic)) and all(
        after[p]["leader"] not in (victim, -1) for p in led)
        and all(victim not in info["isr"] for info in after.values()))
    assert produce_kafka_python(cluster, topic, [b"after"] * 10, 0) == list(range(10, 20))


def test_min_insync_replicas_refuses_acks_all(cluster: Cluster, topic: str):
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    for node in [n for n in (1, 2, 3) if n != leader]:
        cluster.brokers[node].kill()
    wait_for("the ISR shrunk to the leader",
             lambda: cluster.partitions(topic, leader)[0]["isr"] == [leader])
    producer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all",
                         "message.timeout.ms": 3000, "retries": 0})
    errors = []
    producer.produce(topic, b"x", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS"
    producer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "1"})
    producer.produce(topic, b"y", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors[-1] is None


def test_controller_kill_elects_another_controller(cluster: Cluster, topic: str):
    cluster.start()
    controller = cluster.describe_cluster()["controller_id"]
    cluster.brokers[controller].kill()
    survivors = [n for n in (1, 2, 3) if n != controller]
    new = wait_for("a new controller", lambda: (
        c := cluster.describe_cluster(survivors[0])["controller_id"]) not in (controller, -1)
        and c)
    assert new in survivors
    cluster.create_topic(topic, 2, 2)
    assert produce_kafka_python(cluster, topic, [b"v"] * 5, 1) == list(range(5))


def _run_broker(args: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True,
                          text=True, timeout=timeout_s, env=env, cwd=REPO_ROOT)


def test_bad_cluster_configuration_exits_with_a_message(zookeeper, cluster: Cluster, tmp_path):
    missing = _run_broker(["--override", f"zookeeper.connect={zookeeper.connect}/nope",
                           "--override", f"log.dirs={tmp_path / 'a'}",
                           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                           "--override", "tierd.metrics.port=-1"])
    assert missing.returncode == 1 and "chroot /nope does not exist" in missing.stderr
    unreachable = _run_broker(["--override", f"zookeeper.connect=127.0.0.1:{free_port()}",
                               "--override", "zookeeper.connection.timeout.ms=1500",
                               "--override", f"log.dirs={tmp_path / 'b'}",
                               "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                               "--override", "tierd.metrics.port=-1"])
    assert unreachable.returncode == 1 and "cannot reach ZooKeeper" in unreachable.stderr
    cluster.start()
    duplicate = _run_broker(["--override", f"zookeeper.connect={cluster.zk_connect}",
                             "--override", "broker.id=2",
                             "--override", "zookeeper.session.timeout.ms=2000",
                             "--override", f"log.dirs={tmp_path / 'c'}",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                             "--override", "tierd.metrics.port=-1"])
    assert duplicate.returncode == 1 and "broker id 2 is already registered" in duplicate.stderr


def test_zookeeper_session_expiry_of_a_leader_moves_leadership(cluster: Cluster, topic: str):
    """A leader frozen (SIGSTOP) past its session loses leadership; thawed, it
    re-registers and follows."""
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader(topic, 0)
    produce_kafka_python(cluster, topic, [b"x"] * 10, 0)
    pid = cluster.brokers[leader].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        others = [n for n in (1, 2, 3) if n != leader]
        wait_for("leadership moved", lambda: cluster.partitions(topic, others[0])[0]["leader"]
                 in others)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("the thawed broker back in the ISR",
             lambda: cluster.partitions(topic, others[0])[0]["isr"] == [1, 2, 3])
    assert produce_kafka_python(cluster, topic, [b"y"] * 10, 0) == list(range(10, 20))


def test_a_wiped_broker_restarted_at_once_is_never_elected_with_an_empty_log(
        cluster: Cluster, topic: str) -> None:
    """Killed, wiped and restarted within its ZooKeeper session: the restarted
    broker removes its previous incarnation's registration, so the controller
    drops it from the ISR at once instead of electing it (with an empty log)
    when the leader shuts down next."""
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    values = [f"w{i}".encode() for i in range(200)]
    assert produce_kafka_python(cluster, topic, values, 0) == list(range(200))
    leader = cluster.leader(topic, 0)
    victim = next(n for n in (1, 2, 3) if n != leader)
    cluster.brokers[victim].kill()
    shutil.rmtree(cluster.brokers[victim].workdir / "data")
    cluster.brokers[victim].start()
    wait_for("the old registration removed", lambda: "previous incarnation"
             in cluster.brokers[victim].log_tail(200))
    wait_for("the wiped broker out of the ISR or caught up", lambda: (
        isr := cluster.partitions(topic, leader)[0]["isr"]) and (victim not in isr
                                                               or isr == [1, 2, 3]))
    assert cluster.brokers[leader].stop() == 0  # controlled shutdown: a new leader
    new = wait_for("a new leader", lambda: (
        led := cluster.leader(topic, 0)) not in (leader, -1) and led)
    assert new in (1, 2, 3)
    assert consume_all(cluster, topic, 0) == list(enumerate(values))
