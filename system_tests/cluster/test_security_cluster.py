"""Cluster traffic over SASL_SSL with credentials from ZooKeeper (issue 12).

Three brokers whose inter-broker listener SECURE is SASL_SSL with
SCRAM-SHA-512: controller requests, replica fetches and transaction markers
all go through TLS and SCRAM. The brokers' own user ``admin`` is written to
ZooKeeper before they start, in Kafka's ``/config/users/<name>`` form (what
``kafka-configs --zookeeper`` writes), computed here independently of tierd's
code. A client user is then created through AlterUserScramCredentials on one
broker and authenticates on every broker (each reads ZooKeeper). Produce with
acks=all and min.insync.replicas=2 only succeeds if replication works, and
after the leader is SIGKILLed the survivors elect a new one and serve every
acknowledged record over SASL_SSL. With the ACL authorizer on, alice is
refused until ACLs made through one broker (kept in ZooKeeper, Kafka's
``/kafka-acl`` nodes) reach every broker; the brokers' own user is a super
user, so replication is never refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse
from kazoo.client import KazooClient

from system_tests.certs import make_pki
from system_tests.clients.base import ClientSecurity, librdkafka_options
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.harness import free_port
from system_tests.raw_secure import Raw

# DescribeAcls of everything.
EVERY_ACL = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                 principal_filter=None, host_filter=None, operation=1, permission_type=1)

ADMIN_PASSWORD = "broker-admin-Secret"
ALICE_PASSWORD = "alice-cluster-Secret"


def kafka_scram_text(password: str, iterations: int = 4096) -> str:
    """A SCRAM-SHA-512 credential in Kafka's ZooKeeper text form (RFC 5802 keys)."""
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    b64 = base64.b64encode
    return (f"salt={b64(salt).decode()},stored_key={b64(hashlib.sha512(client_key).digest()).decode()},"
            f"server_key={b64(server_key).decode()},iterations={iterations}")


def _metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def grant_alice(admin: AdminClient, topic: str, cluster: Cluster, secure: dict[int, int]
                ) -> None:
    """READ and WRITE on the topic and READ on its reader group for alice,
    created through one broker; returns once every broker has them."""
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                           "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.READ, AclOperation.WRITE)]
    bindings.append(AclBinding(ResourceType.GROUP, f"{topic}-reader", ResourcePatternType.LITERAL,
                               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        stored = json.loads(zk.get(f"/kafka-acl/Topic/{topic}")[0])
    finally:
        zk.stop()
        zk.close()
    assert sorted((e["principal"], e["operation"], e["permissionType"], e["host"])
                  for e in stored["acls"]) == [("User:alice", "Read", "Allow", "*"),
                                               ("User:alice", "Write", "Allow", "*")]

    def seen_by(n: int) -> bool:
        conn = Raw(cluster.brokers[n].port)
        try:
            resp = conn.call(DescribeAclsRequest[2](**EVERY_ACL), 2, DescribeAclsResponse)
        finally:
            conn.close()
        return sum(len(r.acls) for r in resp.resources) == 3

    for n in cluster.brokers:
        wait_for(f"broker {n} to enforce the new ACLs", lambda n=n: seen_by(n))


def test_replication_and_failover_over_sasl_ssl(cluster: Cluster, topic: str,
                                                tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        zk.ensure_path("/config/users")
        zk.create("/config/users/admin", json.dumps(
            {"version": 1, "config": {"SCRAM-SHA-512": kafka_scram_text(ADMIN_PASSWORD)}}
        ).encode())
    finally:
        zk.stop()
        zk.close()

    secure = {n: free_port() for n in cluster.brokers}
    metrics = {n: free_port() for n in cluster.brokers}
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="admin" password="{ADMIN_PASSWORD}";')
    for n, broker in cluster.brokers.items():
        broker.config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SECURE://127.0.0.1:{secure[n]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
            "inter.broker.listener.name": "SECURE",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.secure.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_pem),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
            "tierd.metrics.port": str(metrics[n]),
            # ACLs in ZooKeeper; the brokers' own user and the harness's
            # PLAINTEXT listener are super users.
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
        })
    cluster.start()

    as_admin = librdkafka_options(ClientSecurity("SASL_SSL", ca_file=pki.ca_pem,
                                                 mechanism="SCRAM-SHA-512", username="admin",
                                                 password=ADMIN_PASSWORD))
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{secure[1]}", **as_admin})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(  # admin outlives it
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        ALICE_PASSWORD.encode())])["alice"].result(timeout=30)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        stored = json.loads(zk.get("/config/users/alice")[0])
    finally:
        zk.stop()
        zk.close()
    assert set(stored["config"]) == {"SCRAM-SHA-512"}
    assert "iterations=8192" in stored["config"]["SCRAM-SHA-512"]
    assert ALICE_PASSWORD not in json.dumps(stored)

    cluster.create_topic(topic, 1, rf=3, configs={"min.insync.replicas": "2"})
    as_alice = librdkafka_options(ClientSecurity("SASL_SSL", ca_file=pki.ca_pem,
                                                 mechanism="SCRAM-SHA-512", username="alice",
                                                 password=ALICE_PASSWORD))
    bootstrap = ",".join(f"127.0.0.1:{secure[n]}" for n in sorted(cluster.brokers))

    def produce(values: list[str], timeout_ms: int = 60000) -> list[str]:
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": bootstrap, **as_alice, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": timeout_ms})
        for value in values:
            producer.produce(topic, value.encode(), partition=0,
                             on_delivery=lambda err, _msg: errors.append(err.name()) if err
                             else None)
        assert producer.flush(90) == 0
        return errors

    # Without ACLs alice may not write; ACLs made through broker 1 are kept
    # in ZooKeeper (Kafka's nodes) and enforced by every broker.
    assert set(produce(["refused"], timeout_ms=10000)) == {"TOPIC_AUTHORIZATION_FAILED"}
    grant_alice(admin, topic, cluster, secure)

    assert produce([f"before-{i}" for i in range(200)]) == []
    wait_for("every replica in sync over SASL_SSL",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    # Brokers authenticated to each other with SCRAM on SECURE.
    assert sum(_metric(metrics[n], "tierd_successful_authentication_total",
                       listener="SECURE", mechanism="SCRAM-SHA-512")
               for n in cluster.brokers) > 0

    leader = cluster.leader(topic, 0)
    cluster.brokers[leader].kill()
    assert produce([f"after-{i}" for i in range(100)]) == []
    survivor = next(n for n in cluster.live)

    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{secure[survivor]}", **as_alice,
                         "group.id": f"{topic}-reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    values: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline_polls = 600
        while len(values) < 300 and deadline_polls:
            deadline_polls -= 1
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    assert values == [f"before-{i}" for i in range(200)] + [f"after-{i}" for i in range(100)]
    for n in cluster.live:
        log = cluster.brokers[n].log_tail(limit=1 << 30)
        assert "authentication failed" not in log
        assert ADMIN_PASSWORD not in "\n".join(
            line for line in log.splitlines() if not line.startswith("===== start"))


def test_client_quotas_are_kept_in_zookeeper(cluster: Cluster) -> None:
    """A quota set through one broker is in ZooKeeper under Kafka's node and
    every broker answers it; a user's quota and SCRAM credential share that
    user's node without disturbing each other."""
    from system_tests.test_quotas import alter, describe

    cluster.start()
    one, two = cluster.brokers[1], cluster.brokers[2]
    assert alter(one, [("user", "alice"), ("client-id", "etl")],
                 [("producer_byte_rate", 1e6)]).error_code == 0
    assert alter(one, [("user", "alice")], [("consumer_byte_rate", 3e6)]).error_code == 0
    want = {(("client-id", "etl"), ("user", "alice")): {"producer_byte_rate": 1e6},
            (("user", "alice"),): {"consumer_byte_rate": 3e6}}
    wait_for("broker 2 to see the quotas", lambda: describe(two, []) == want)

    admin = AdminClient({"bootstrap.servers": two.bootstrap})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        b"pw")])["alice"].result(timeout=30)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        user = json.loads(zk.get("/config/users/alice")[0])["config"]
        client = json.loads(zk.get("/config/users/alice/clients/etl")[0])["config"]
    finally:
        zk.stop()
        zk.close()
    assert set(user) == {"consumer_byte_rate", "SCRAM-SHA-512"}
    assert float(user["consumer_byte_rate"]) == 3e6
    assert float(client["producer_byte_rate"]) == 1e6
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=30)
    assert len(described.scram_credential_infos) == 1
    # Each broker re-reads ZooKeeper every second.
    wait_for("broker 3 to see the quotas", lambda: describe(cluster.brokers[3], []) == want)
