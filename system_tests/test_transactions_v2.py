"""Transactions v2 (KIP-890 part 2) end to end against a real tierd.

* ApiVersions finalizes transaction.version 2 (tierd.transaction.version,
  default 2), so the Java 4.3 producer uses transactions v2: interleaved
  committed and aborted transactions with offsets, and the broker's request
  counters prove the protocol it spoke: EndTxn v5, Produce v12 and
  TxnOffsetCommit v5, and no AddPartitionsToTxn or AddOffsetsToTxn at all.
  A read_committed consumer sees exactly the committed records.
* librdkafka (transactions v1) commits and aborts on the same broker beside
  it, with AddPartitionsToTxn and EndTxn below v5.
* With tierd.transaction.version=0 the same Java producer falls back to
  transactions v1 (AddPartitionsToTxn, EndTxn v4).
* On a raw connection, as a v2 client: Produce v12 adds its partition, EndTxn
  v5 answers the bumped epoch, a retried EndTxn gets it again, and a zombie
  still at the old epoch is refused by the coordinator and the partition
  (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED); a v1 batch for a partition
  outside the transaction is refused (INVALID_TXN_STATE, KIP-890 part 1).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.producer import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceResponse,
)

from protocol.records import ATTR_TRANSACTIONAL, build_batch
from system_tests import txn_java
from system_tests._proc import RawClient, TierdProc, produce_request, scrape, start_tierd
from system_tests.admin import create_topic

PARTITIONS = 3
NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
PRODUCER_FENCED = 90
TXN_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(request, tmp_path_factory.mktemp("tv2"), {}, name="tierd-tv2")


def new_topic(broker: TierdProc, partitions: int = PARTITIONS) -> str:
    name = f"tv2-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def requests_by_version(broker: TierdProc, api: str) -> dict[int, float]:
    snap = scrape(broker.metrics_url)
    out: dict[int, float] = {}
    for (name, labels), value in snap.samples.items():
        lbl = dict(labels)
        if name == "tierd_requests_total" and lbl.get("api") == api and value:
            out[int(lbl["version"])] = out.get(int(lbl["version"]), 0) + value
    return out


def counters(broker: TierdProc) -> dict[str, dict[int, float]]:
    return {api: requests_by_version(broker, api)
            for api in ("EndTxn", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit",
                        "Produce")}


def grown(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
          ) -> dict[str, dict[int, float]]:
    """Requests counted between two scrapes, per api and version (zeros left out)."""
    out: dict[str, dict[int, float]] = {}
    for api, versions in after.items():
        diff = {v: n - before.get(api, {}).get(v, 0) for v, n in versions.items()}
        out[api] = {v: n for v, n in diff.items() if n}
    return out


def java_committed_values(broker: TierdProc, topic: str, expect: int) -> list[str]:
    out = txn_java.run(["consume", "--bootstrap", broker.bootstrap, "--topic", topic,
                        "--isolation", "read_committed", "--expect", str(expect),
                        "--settle-ms", "1500", "--timeout-ms", "60000"])
    return [v for _, _, v in out["records"]]


def run_java_transactions(broker: TierdProc, topic: str) -> dict[str, Any]:
    return txn_java.run(["txns", "--bootstrap", broker.bootstrap, "--topic", topic,
                         "--txn-id", f"java-{topic}", "--transactions", "10", "--records", "3",
                         "--partitions", str(PARTITIONS), "--offsets-group", f"g-{topic}"])


def test_java_producer_uses_transactions_v2(tierd: TierdProc) -> None:
    topic = new_topic(tierd)
    before = counters(tierd)
    result = run_java_transactions(tierd, topic)
    used = grown(before, counters(tierd))
    # 5 commits and 5 aborts, each ended by EndTxn v5; partitions and offsets
    # reached the transaction through Produce v12 and TxnOffsetCommit v5.
    assert used["EndTxn"] == {5: 10}
    assert set(used["Produce"]) == {12}
    assert used["TxnOffsetCommit"] == {5: 10}
    assert used["AddPartitionsToTxn"] == {} and used["AddOffsetsToTxn"] == {}
    committed = result["committed"]
    assert len(committed) == len(result["aborted"]) == 15
    assert sorted(java_committed_values(tierd, topic, len(committed))) == sorted(committed)
    consumer = Consumer({"bootstrap.servers": tierd.bootstrap, "group.id": f"g-{topic}"})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        consumer.close()
    assert tp.offset == 9  # transaction i sends offset i + 1; the last committed is i = 8


def test_librdkafka_transactions_v1_beside_it(tierd: TierdProc) -> None:
    topic = new_topic(tierd)
    before = counters(tierd)
    producer = Producer({"bootstrap.servers": tierd.bootstrap, "transactional.id": f"ck-{topic}"})
    producer.init_transactions(30)
    committed = []
    for i in range(4):
        producer.begin_transaction()
        values = [f"ck-{i}-{j}" for j in range(PARTITIONS)]
        for j, value in enumerate(values):
            producer.produce(topic, value.encode(), partition=j)
        producer.flush(30)
        if i % 2 == 0:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
    used = grown(before, counters(tierd))
    assert used["AddPartitionsToTxn"] and max(used["AddPartitionsToTxn"]) <= 3
    assert sum(used["EndTxn"].values()) == 4 and max(used["EndTxn"]) < 5
    assert sorted(java_committed_values(tierd, topic, len(committed))) == sorted(committed)


def test_transaction_version_0_keeps_java_on_v1(request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    broker = start_tierd(request, tmp_path / "tv0", {"tierd.transaction.version": "0"},
                         name="tierd-tv0")
    topic = new_topic(broker)
    before = counters(broker)
    result = run_java_transactions(broker, topic)
    used = grown(before, counters(broker))
    assert used["EndTxn"] == {4: 10}
    assert used["AddPartitionsToTxn"] and max(used["AddPartitionsToTxn"]) <= 3
    assert used["AddOffsetsToTxn"] == {4: 10}
    assert max(used["Produce"]) <= 11
    committed = result["committed"]
    assert sorted(java_committed_values(broker, topic, len(committed))) == sorted(committed)


# -- a raw v2 client ------------------------------------------------------------------------------


def produce(client: RawClient, txn_id: str, topic: str, partition: int, pid: int, epoch: int,
            seq: int, value: bytes, version: int = 12) -> int:
    batch = build_batch([(None, value)], timestamp=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, attributes=ATTR_TRANSACTIONAL)
    req = produce_request(topic, partition, batch, version=version)
    req.transactional_id = txn_id
    resp = client.request(req, version, ProduceResponse)
    return int(resp.responses[0].partition_responses[0].error_code)


def end_txn_v5(client: RawClient, txn_id: str, pid: int, epoch: int,
               commit: bool) -> tuple[int, int, int]:
    resp = client.request(EndTxnRequest[5](transactional_id=txn_id, producer_id=pid,
                                           producer_epoch=epoch, committed=commit),
                          5, EndTxnResponse)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def test_epoch_bump_fences_a_zombie(tierd: TierdProc) -> None:
    topic = new_topic(tierd, 2)
    txn_id = f"raw-{topic}"
    with RawClient(tierd.host, tierd.port) as client:
        init = client.request(InitProducerIdRequest[4](
            transactional_id=txn_id, transaction_timeout_ms=TXN_TIMEOUT_MS, producer_id=-1,
            producer_epoch=-1), 4, InitProducerIdResponse)
        pid, epoch = init.producer_id, init.producer_epoch
        # KIP-890 part 1: a v1 batch for a partition never added is refused.
        assert produce(client, txn_id, topic, 1, pid, epoch, 0, b"stray", version=11) == \
            INVALID_TXN_STATE
        # Part 2: Produce v12 adds the partition itself.
        assert produce(client, txn_id, topic, 0, pid, epoch, 0, b"first") == NONE
        assert end_txn_v5(client, txn_id, pid, epoch, True) == (NONE, pid, epoch + 1)
        assert end_txn_v5(client, txn_id, pid, epoch, True) == (NONE, pid, epoch + 1)  # retry

        # The zombie, still at the old epoch: fenced by the coordinator and the log.
        assert produce(client, txn_id, topic, 0, pid, epoch, 1, b"zombie") == \
            INVALID_PRODUCER_EPOCH
        # Its EndTxn is taken as a retry of the commit, which an abort contradicts.
        assert end_txn_v5(client, txn_id, pid, epoch, False)[0] == INVALID_TXN_STATE
        assert end_txn_v5(client, txn_id, pid + 1, epoch, False)[0] != NONE
        # The live producer goes on at the bumped epoch, sequences from 0.
        assert produce(client, txn_id, topic, 0, pid, epoch + 1, 0, b"second") == NONE
        assert end_txn_v5(client, txn_id, pid, epoch + 1, False) == (NONE, pid, epoch + 2)
        assert produce(client, txn_id, topic, 0, pid, epoch + 2, 0, b"third") == NONE
        assert end_txn_v5(client, txn_id, pid, epoch + 2, True) == (NONE, pid, epoch + 3)
    assert java_committed_values(tierd, topic, 2) == ["first", "third"]
