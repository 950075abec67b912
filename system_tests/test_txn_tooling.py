"""The transaction tooling of KIP-664 on one tierd: the Java 4.3 Admin's
listTransactions, describeTransactions and describeProducers while a Java
producer holds a transaction open and after it commits, and the error codes
on raw connections (unknown id, not the coordinator's partition, unknown or
invalid topic, a partition this broker does not host, an unknown state
filter). Aborting a hanging transaction needs two brokers (see
system_tests/cluster/test_hanging_transaction.py).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from system_tests import javatool, txn_java
from system_tests._proc import RawClient, TierdProc, start_tierd
from system_tests.admin import create_topic

# Kafka error codes.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUEST = 42
TRANSACTIONAL_ID_NOT_FOUND = 105
TXN_TIMEOUT_MS = 45_000


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(request, tmp_path_factory.mktemp("txn-tooling"), name="tierd-txn-tooling")


def admin(broker: TierdProc, *ops: list[str]) -> list[dict]:
    """Several Java Admin calls in one JVM; each result (asserted to succeed)."""
    results = javatool.run_batch([["admin", "--bootstrap", broker.bootstrap, *op] for op in ops])
    for op, r in zip(ops, results, strict=True):
        assert r["exit"] == 0, (op, r)
    return [r["result"] for r in results]


def test_java_admin_sees_an_open_transaction_and_its_end(tierd: TierdProc,
                                                         tmp_path: Path) -> None:
    topic = f"tool-{uuid.uuid4().hex[:8]}"
    create_topic(tierd.bootstrap, topic, 2)
    txn_id = f"open-{topic}"
    before = int(time.time() * 1000)
    txn = txn_java.OpenTransaction(["--bootstrap", tierd.bootstrap, "--topic", topic,
                                    "--txn-id", txn_id, "--records", "3", "--partitions", "2",
                                    "--txn-timeout-ms", str(TXN_TIMEOUT_MS)],
                                   tmp_path / "open.stderr")
    try:
        listed, ongoing, committed, slow, described, unknown, producers = admin(
            tierd, ["list-transactions"], ["list-transactions", "--state", "Ongoing"],
            ["list-transactions", "--state", "CompleteCommit"],
            ["list-transactions", "--duration-ms", "3600000"],
            ["describe-transactions", "--txn-id", txn_id],
            ["describe-transactions", "--txn-id", f"never-{topic}"],
            ["describe-producers", "--topic", topic, "--partition", "0", "--partition", "1"])
        [mine] = [t for t in listed["transactions"] if t["transactional_id"] == txn_id]
        assert mine["state"] == "Ongoing"
        pid = mine["producer_id"]
        assert mine in ongoing["transactions"]
        assert txn_id not in {t["transactional_id"] for t in committed["transactions"]}
        assert txn_id not in {t["transactional_id"] for t in slow["transactions"]}
        [only] = admin(tierd, ["list-transactions", "--producer-id", str(pid)])
        assert only["transactions"] == [mine]

        d = described["transactions"][txn_id]
        assert (d["state"], d["producer_id"], d["timeout_ms"]) == ("Ongoing", pid, TXN_TIMEOUT_MS)
        assert d["partitions"] == [f"{topic}:0", f"{topic}:1"]
        assert before <= d["start_ms"] <= int(time.time() * 1000)
        assert unknown["transactions"][f"never-{topic}"]["error"]["class"] == \
            "TransactionalIdNotFoundException"

        # Records "open-0" and "open-2" on partition 0, "open-1" on partition 1.
        for partition in ("0", "1"):
            [p] = producers["partitions"][partition]
            assert (p["producer_id"], p["producer_epoch"], p["txn_start_offset"]) == \
                (pid, d["producer_epoch"], 0)
            assert p["coordinator_epoch"] is None  # no marker yet
        assert producers["partitions"]["0"][0]["last_sequence"] == 1
        assert producers["partitions"]["1"][0]["last_sequence"] == 0
        assert txn.send("commit") == {"result": "commit"}
    finally:
        txn.close()

    described, producers = admin(
        tierd, ["describe-transactions", "--txn-id", txn_id],
        ["describe-producers", "--topic", topic, "--partition", "0"])
    d = described["transactions"][txn_id]
    assert (d["state"], d["partitions"]) == ("CompleteCommit", [])
    [p] = producers["partitions"]["0"]
    assert p["txn_start_offset"] is None
    assert p["coordinator_epoch"] is not None and p["coordinator_epoch"] >= 0


def test_raw_requests_get_kafkas_error_codes(tierd: TierdProc) -> None:
    topic = f"tool-raw-{uuid.uuid4().hex[:8]}"
    create_topic(tierd.bootstrap, topic, 1)
    with RawClient(tierd.host, tierd.port) as client:
        req = DescribeProducersRequest[0]
        resp = client.request(req(topics=[
            req.TopicRequest(name=topic, partition_indexes=[0, 7]),
            req.TopicRequest(name="no-such-topic", partition_indexes=[0]),
            req.TopicRequest(name="bad/name", partition_indexes=[0])]),
            0, DescribeProducersResponse)
        codes = {(t.name, p.partition_index): (p.error_code, p.active_producers)
                 for t in resp.topics for p in t.partitions}
        assert codes == {(topic, 0): (NONE, []), (topic, 7): (UNKNOWN_TOPIC_OR_PARTITION, []),
                         ("no-such-topic", 0): (UNKNOWN_TOPIC_OR_PARTITION, []),
                         ("bad/name", 0): (INVALID_TOPIC_EXCEPTION, [])}

        req = DescribeTransactionsRequest[0]
        resp = client.request(req(transactional_ids=[f"none-{topic}", ""]), 0,
                              DescribeTransactionsResponse)
        assert [(s.transactional_id, s.error_code) for s in resp.transaction_states] == \
            [(f"none-{topic}", TRANSACTIONAL_ID_NOT_FOUND), ("", INVALID_REQUEST)]

        req = ListTransactionsRequest[1]
        resp = client.request(req(state_filters=["Ongoing", "Hanging"], producer_id_filters=[],
                                  duration_filter=-1), 1, ListTransactionsResponse)
        assert (resp.error_code, resp.unknown_state_filters) == (NONE, ["Hanging"])
        resp = client.request(ListTransactionsRequest[0](state_filters=["Hanging"],
                                                         producer_id_filters=[]),
                              0, ListTransactionsResponse)
        assert (resp.error_code, resp.transaction_states) == (NONE, [])
