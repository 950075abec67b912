"""A hanging transaction on a three-broker cluster, found and aborted as an
operator does with kafka-transactions (KIP-664).

How the transaction comes to hang: a producer takes a producer id and epoch
for its transactional id from the coordinator (InitProducerId), then writes
a transactional batch straight to a partition whose leader is another
broker, without AddPartitionsToTxn first. That leader does not coordinate
the id, and its transaction.partition.verification.enable is off here, so,
as a Kafka broker without KIP-890's verification does (an older broker, or
one with that switch off), it takes the batch on the log's producer-epoch
checks alone. (With verification on, the default, the leader asks the
coordinator first and refuses the batch: INVALID_TXN_STATE, see
test_txn_verification.py.) The coordinator never
learns of the partition: it writes no marker there, its transaction
timeout never fires (the id's transaction has no partitions), and the
partition's last stable offset stays at the batch for good, so
read_committed consumers stop there. This is the client bug KIP-664 was
written for (a producer whose AddPartitionsToTxn was lost or skipped).

Then, with real clients: ``tierd admin transactions find-hanging`` names the
producer; the Java 4.3 Admin's describeProducers shows its open transaction
(start offset, no coordinator epoch; a follower asked directly answers
NOT_LEADER_OR_FOLLOWER), listTransactions / describeTransactions
show that its coordinator has nothing open for that partition, and
abortTransaction (WriteTxnMarkers to the leader) ends it: the last stable
offset moves to the log end and a read_committed librdkafka consumer reads
the records written after the hanging batch, without it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceResponse

from protocol.records import ATTR_TRANSACTIONAL, build_batch
from system_tests import javatool
from system_tests._proc import LATEST, RawClient, list_offsets_request, produce_request
from system_tests.admin.tool import ok
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for

INTERNAL = {"transaction.state.log.num.partitions": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            # Brokers that take a transactional batch without asking the coordinator.
            "transaction.partition.verification.enable": "false"}
AFTER = [f"after-{i}" for i in range(5)]
TXN_TIMEOUT_MS = 60_000


def coordinator(cluster: Cluster, txn_id: str) -> int:
    """The broker coordinating ``txn_id`` (FindCoordinator, retried while the
    transaction state topic is being created and led)."""
    broker = cluster.brokers[1]

    def ask() -> int | None:
        with RawClient(broker.host, broker.port) as client:
            resp = client.request(FindCoordinatorRequest[1](key=txn_id, key_type=1), 1,
                                  FindCoordinatorResponse)
        return resp.node_id if resp.error_code == 0 else None

    return wait_for(f"coordinator of {txn_id}", ask)


def init_producer_id(cluster: Cluster, node: int, txn_id: str) -> tuple[int, int]:
    broker = cluster.brokers[node]

    def init() -> tuple[int, int] | None:
        with RawClient(broker.host, broker.port) as client:
            resp = client.request(InitProducerIdRequest[4](
                transactional_id=txn_id, transaction_timeout_ms=TXN_TIMEOUT_MS, producer_id=-1,
                producer_epoch=-1), 4, InitProducerIdResponse)
        return (resp.producer_id, resp.producer_epoch) if resp.error_code == 0 else None

    return wait_for(f"a producer id for {txn_id}", init)


def last_stable_offset(cluster: Cluster, node: int, topic: str) -> int:
    req = list_offsets_request(topic, {0: LATEST}, version=4)
    req.isolation_level = 1
    broker = cluster.brokers[node]
    with RawClient(broker.host, broker.port) as client:
        return int(client.request(req, 4, ListOffsetsResponse).topics[0].partitions[0].offset)


def java_admin(cluster: Cluster, *ops: list[str]) -> list[dict[str, Any]]:
    results = javatool.run_batch([["admin", "--bootstrap", ",".join(cluster.bootstrap()), *op]
                                  for op in ops])
    for op, r in zip(ops, results, strict=True):
        assert r["exit"] == 0, (op, r)
    return [r["result"] for r in results]


def test_hanging_transaction_is_found_and_aborted(cluster: Cluster) -> None:
    cluster.start(INTERNAL)
    topic = f"hang-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, rf=3)
    leader = cluster.leader(topic, 0)
    # A transactional id coordinated by another broker than the partition's leader.
    txn_id, coord = next((t, c) for t in (f"hang-{topic}-{i}" for i in range(100))
                         if (c := coordinator(cluster, t)) != leader)
    pid, epoch = init_producer_id(cluster, coord, txn_id)

    batch = build_batch([(None, b"hanging")], timestamp=int(time.time() * 1000),
                        producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        attributes=ATTR_TRANSACTIONAL)
    req = produce_request(topic, 0, batch)
    req.transactional_id = txn_id
    broker = cluster.brokers[leader]
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(req, 9, ProduceResponse)
    assert resp.responses[0].partition_responses[0].error_code == 0
    plain = Producer({"bootstrap.servers": ",".join(cluster.bootstrap())})
    for value in AFTER:
        plain.produce(topic, value.encode(), partition=0)
    assert plain.flush(WAIT_S) == 0
    assert last_stable_offset(cluster, leader, topic) == 0

    bootstrap = ",".join(cluster.bootstrap())
    [hanging] = ok(bootstrap, "transactions", "find-hanging", "--topic", topic,
                   "--max-transaction-timeout-ms", "0", "--json").json()
    assert (hanging["producer_id"], hanging["producer_epoch"], hanging["txn_start_offset"],
            hanging["transactional_id"]) == (pid, epoch, 0, txn_id)

    follower = next(n for n in cluster.brokers if n != leader)
    producers, on_follower, listed, described = java_admin(
        cluster, ["describe-producers", "--topic", topic, "--partition", "0"],
        ["describe-producers", "--topic", topic, "--partition", "0", "--broker", str(follower)],
        ["list-transactions", "--producer-id", str(pid)],
        ["describe-transactions", "--txn-id", txn_id])
    # Only the leader answers (a follower: NOT_LEADER_OR_FOLLOWER).
    assert on_follower["partitions"]["0"]["error"]["class"] == "NotLeaderOrFollowerException"
    [state] = [p for p in producers["partitions"]["0"] if p["producer_id"] == pid]
    assert (state["producer_epoch"], state["txn_start_offset"], state["coordinator_epoch"]) == \
        (epoch, 0, None)
    assert listed["transactions"] == [{"transactional_id": txn_id, "producer_id": pid,
                                       "state": "Empty"}]
    d = described["transactions"][txn_id]
    assert (d["coordinator"], d["state"], d["partitions"]) == (coord, "Empty", [])

    # kafka-transactions abort gives coordinator epoch 0 when the producer has none.
    [aborted, producers] = java_admin(
        cluster, ["abort-transaction", "--topic", topic, "--partition", "0",
                  "--producer-id", str(pid), "--producer-epoch", str(epoch),
                  "--coordinator-epoch", "0"],
        ["describe-producers", "--topic", topic, "--partition", "0"])
    assert aborted == {"aborted": f"{topic}:0"}
    [state] = [p for p in producers["partitions"]["0"] if p["producer_id"] == pid]
    assert (state["txn_start_offset"], state["coordinator_epoch"]) == (None, 0)
    # The hanging batch, five records, the abort marker.
    assert last_stable_offset(cluster, leader, topic) == 1 + len(AFTER) + 1
    assert ok(bootstrap, "transactions", "find-hanging", "--topic", topic,
              "--max-transaction-timeout-ms", "0", "--json").json() == []

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[str] = []

    def read_all() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
        return len(got) >= len(AFTER)

    try:
        wait_for("the records after the aborted transaction", read_all)
    finally:
        consumer.close()
    assert got == AFTER
