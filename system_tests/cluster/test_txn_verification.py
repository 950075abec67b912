"""KIP-890 across brokers: a partition leader asks the transaction coordinator,
another broker, before the first transactional batch of a transaction.

On three brokers and a real ZooKeeper, with a transactional id coordinated
by a broker that does not lead the partition:

* part 1 (verification): a Produce v11 transactional batch for a partition
  never added to the transaction is refused with INVALID_TXN_STATE (the
  leader's AddPartitionsToTxn verify-only request to the coordinator says
  it is not in the transaction), so no hanging transaction starts; once
  AddPartitionsToTxn added it, the same batch is taken;
* part 2 (transactions v2): a Produce v12 batch makes the leader add its
  partition at the coordinator; EndTxn v5 writes the marker under the
  bumped epoch, and a zombie's batch at the old epoch is refused;
* the Java 4.3 producer commits and aborts with transactions v2 through
  the cluster, and a read_committed consumer sees exactly the committed
  records.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    ProduceResponse,
)

from protocol.records import ATTR_TRANSACTIONAL, build_batch
from system_tests import txn_java
from system_tests._proc import RawClient, produce_request
from system_tests.cluster.cluster import WAIT_S, Cluster
from system_tests.cluster.test_hanging_transaction import coordinator, init_producer_id

INTERNAL = {"transaction.state.log.num.partitions": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2"}
NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48


def produce(cluster: Cluster, node: int, txn_id: str, topic: str, pid: int, epoch: int,
            seq: int, value: bytes, version: int) -> int:
    batch = build_batch([(None, value)], timestamp=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, attributes=ATTR_TRANSACTIONAL)
    req = produce_request(topic, 0, batch, version=version)
    req.transactional_id = txn_id
    broker = cluster.brokers[node]
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(req, version, ProduceResponse)
    return int(resp.responses[0].partition_responses[0].error_code)


def add_partition(cluster: Cluster, node: int, txn_id: str, topic: str, pid: int,
                  epoch: int) -> int:
    req_cls = AddPartitionsToTxnRequest[3]
    broker = cluster.brokers[node]
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(req_cls(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[req_cls.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
            3, AddPartitionsToTxnResponse)
    return int(resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def end_txn(cluster: Cluster, node: int, txn_id: str, pid: int, epoch: int, commit: bool,
            version: int) -> tuple[int, int]:
    broker = cluster.brokers[node]
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(EndTxnRequest[version](
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
            version, EndTxnResponse)
    return resp.error_code, resp.producer_epoch if version >= 5 else epoch


def read_committed(cluster: Cluster, topic: str, expect: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": ",".join(cluster.bootstrap()),
                         "group.id": f"r-{uuid.uuid4()}", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got: list[str] = []
    deadline = time.monotonic() + WAIT_S
    settle: float | None = None
    try:
        while time.monotonic() < (settle or deadline):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
            if len(got) >= expect and settle is None:
                settle = time.monotonic() + 1.5
    finally:
        consumer.close()
    return got


def test_leaders_ask_a_remote_coordinator(cluster: Cluster) -> None:
    cluster.start(INTERNAL)
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, rf=3)
    leader = cluster.leader(topic, 0)
    ids = (f"verify-{topic}-{i}" for i in range(100))
    v1_id, coord1 = next((t, c) for t in ids if (c := coordinator(cluster, t)) != leader)
    v2_id, coord2 = next((t, c) for t in ids if (c := coordinator(cluster, t)) != leader)

    # Part 1: not added, refused; added, taken; committed.
    pid, epoch = init_producer_id(cluster, coord1, v1_id)
    assert produce(cluster, leader, v1_id, topic, pid, epoch, 0, b"v1", 11) == INVALID_TXN_STATE
    assert add_partition(cluster, coord1, v1_id, topic, pid, epoch) == NONE
    assert produce(cluster, leader, v1_id, topic, pid, epoch, 0, b"v1", 11) == NONE
    assert end_txn(cluster, coord1, v1_id, pid, epoch, True, 4) == (NONE, epoch)

    # Part 2: Produce v12 adds the partition; EndTxn v5 bumps the epoch.
    pid, epoch = init_producer_id(cluster, coord2, v2_id)
    assert produce(cluster, leader, v2_id, topic, pid, epoch, 0, b"v2", 12) == NONE
    assert end_txn(cluster, coord2, v2_id, pid, epoch, True, 5) == (NONE, epoch + 1)
    assert produce(cluster, leader, v2_id, topic, pid, epoch, 1, b"zombie", 12) == \
        INVALID_PRODUCER_EPOCH
    assert read_committed(cluster, topic, 2) == ["v1", "v2"]


def test_java_transactions_v2_on_a_cluster(cluster: Cluster) -> None:
    cluster.start(INTERNAL)
    topic = f"javav2-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, rf=3)
    result = txn_java.run(["txns", "--bootstrap", ",".join(cluster.bootstrap()), "--topic", topic,
                           "--txn-id", f"java-{topic}", "--transactions", "6", "--records", "3",
                           "--partitions", "3", "--offsets-group", f"g-{topic}"])
    committed = result["committed"]
    assert len(committed) == 9
    assert sorted(read_committed(cluster, topic, len(committed))) == sorted(committed)
