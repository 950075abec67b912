"""Named listeners in cluster mode: brokers reach each other on INTERNAL
(inter.broker.listener.name), clients use EXTERNAL on another loopback
address. Each broker registers both listeners in ZooKeeper (Kafka's v5
layout), the controller passes both in UpdateMetadata, replication runs on
INTERNAL, and a client of EXTERNAL is only ever told EXTERNAL addresses,
also after the leader is killed."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import MetadataResponse
from kazoo.client import KazooClient

from system_tests._proc import RawClient, metadata_request
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.harness import free_port

EXTERNAL_HOST = "127.0.0.2"
METADATA_VERSION = 12


def _metadata(host: str, port: int, topic: str) -> object:
    with RawClient(host, port) as client:
        return client.request(metadata_request([topic], METADATA_VERSION), METADATA_VERSION,
                              MetadataResponse)


def test_clients_on_external_brokers_on_internal(cluster: Cluster, topic: str) -> None:
    external = {n: free_port() for n in cluster.brokers}
    for n, broker in cluster.brokers.items():
        broker.config.update({
            "listeners": f"INTERNAL://127.0.0.1:{broker.port},"
                         f"EXTERNAL://{EXTERNAL_HOST}:{external[n]}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        })
    cluster.start()
    cluster.create_topic(topic, 1, rf=3, configs={"min.insync.replicas": "2"})

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        for n, broker in cluster.brokers.items():
            data, _ = zk.get(f"/brokers/ids/{n}")
            info = json.loads(data)
            assert info["endpoints"] == [f"INTERNAL://127.0.0.1:{broker.port}",
                                         f"EXTERNAL://{EXTERNAL_HOST}:{external[n]}"]
            assert info["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT",
                                                              "EXTERNAL": "PLAINTEXT"}
    finally:
        zk.stop()
        zk.close()

    # Every broker tells EXTERNAL clients every broker's EXTERNAL address
    # (UpdateMetadata carried both listeners).
    want_external = [(n, EXTERNAL_HOST, external[n]) for n in sorted(cluster.brokers)]
    for n in cluster.brokers:
        resp = wait_for(f"broker {n} to know every broker", lambda n=n: (
            r if len((r := _metadata(EXTERNAL_HOST, external[n], topic)).brokers) == 3 else None))
        assert [(b.node_id, b.host, b.port) for b in resp.brokers] == want_external

    bootstrap = [f"{EXTERNAL_HOST}:{external[n]}" for n in sorted(cluster.brokers)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=20,
                             retry_backoff_ms=200)
    for i in range(50):
        producer.send(topic, value=f"before-{i}".encode()).get(30)

    # Replication ran on INTERNAL: every replica has the records. Kill the
    # leader; the client finds the new one through EXTERNAL addresses only.
    leader = cluster.leader(topic, 0)
    wait_for("all replicas in sync", lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    cluster.brokers[leader].kill()
    for i in range(50):
        producer.send(topic, value=f"after-{i}".encode()).get(60)
    producer.close()
    survivor = next(n for n in cluster.live)
    resp = _metadata(EXTERNAL_HOST, external[survivor], topic)
    assert {b.host for b in resp.brokers} == {EXTERNAL_HOST}
    assert resp.topics[0].partitions[0].leader_id not in (leader, -1)

    consumer = KafkaConsumer(topic, bootstrap_servers=[f"{EXTERNAL_HOST}:{external[survivor]}"],
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    values: list[str] = []
    try:
        for record in consumer:
            values.append(record.value.decode())
            if len(values) == 100:
                break
    finally:
        consumer.close()
    assert values == [f"before-{i}" for i in range(50)] + [f"after-{i}" for i in range(50)]
