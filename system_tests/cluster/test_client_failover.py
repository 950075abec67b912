"""The Java client and aiokafka fail over when a partition's leader is SIGKILLed
(kafka-python and librdkafka are in test_cluster.py): every acknowledged record
is read back at the offset it was acknowledged at."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from system_tests import javatool
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for

COUNT = 1500


def test_java_client_fails_over_after_a_leader_kill(cluster: Cluster, topic: str) -> None:
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    b = ["--bootstrap", ",".join(cluster.bootstrap())]
    first = javatool.run(["produce", *b, "--topic", topic, "--count", str(COUNT), "--size", "100",
                          "--partition", "0", "--acks", "all", "--idempotent",
                          "--report-offsets"])
    assert first["offsets"] == [[0, i] for i in range(COUNT)]
    victim = cluster.leader(topic, 0)
    cluster.brokers[victim].kill()
    # Metadata still names the dead leader until its session expires: the
    # producer must find the new one by itself.
    second = javatool.run(["produce", *b, "--topic", topic, "--count", str(COUNT), "--size",
                           "100", "--partition", "0", "--acks", "all", "--idempotent",
                           "--report-offsets"], timeout_s=WAIT_S * 2)
    assert second["offsets"] == [[0, COUNT + i] for i in range(COUNT)]
    live = ["--bootstrap", ",".join(cluster.bootstrap())]
    consumed = javatool.run(["consume", *live, "--topic", topic, "--partition", "0",
                             "--digest"], timeout_s=WAIT_S * 2)
    assert [r["o"] for r in consumed["records"]] == list(range(2 * COUNT))
    assert [r["k"] for r in consumed["records"]][:2] == \
        [r["k"] for r in consumed["records"]][COUNT:COUNT + 2]  # k0, k1 of each run


async def _aiokafka_produce_through_kill(cluster: Cluster, topic: str) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all",
                                enable_idempotence=True, request_timeout_ms=10_000,
                                retry_backoff_ms=200)
    await producer.start()
    offsets: list[int] = []
    try:
        for i in range(COUNT):
            if i == COUNT // 2:
                victim = cluster.leader(topic, 0)
                cluster.brokers[victim].kill()
            meta = await asyncio.wait_for(
                producer.send_and_wait(topic, f"a{i}".encode(), partition=0), WAIT_S)
            offsets.append(meta.offset)
    finally:
        await producer.stop()
    return offsets


async def _aiokafka_read(cluster: Cluster, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        out: list[tuple[int, bytes]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while len(out) < count and loop.time() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=1000)
            out += [(r.offset, r.value) for r in batches.get(tp, [])]
        return out
    finally:
        await consumer.stop()


def test_aiokafka_fails_over_after_a_leader_kill(cluster: Cluster, topic: str) -> None:
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    offsets = asyncio.run(_aiokafka_produce_through_kill(cluster, topic))
    assert offsets == list(range(COUNT))
    wait_for("a new leader", lambda: cluster.leader(topic, 0) in cluster.live)
    got = asyncio.run(_aiokafka_read(cluster, topic, COUNT))
    assert got == [(i, f"a{i}".encode()) for i in range(COUNT)]
