"""Transactions end to end: the Java client and confluent-kafka against a real tierd.

One tierd serves the module, started as
`python -m broker --override listeners=... --override log.dirs=... --override tierd.metrics.port=0`
with the timed-out-transaction check every second (Kafka's default is 10 s)
so timeout tests are quick. Restart tests get a broker of their own.

What is checked:

* 20 committed and 20 aborted Java transactions interleaved over 3
  partitions (each also sending offsets to the transaction): a read_committed
  Java consumer sees exactly the committed records, each partition in
  production order; a read_uncommitted one sees all; the group's committed
  offset is the last committed transaction's.
* ListOffsets latest with read_committed answers the LSO (the first offset
  of the open transaction) while a Java transaction is open, and a
  read_committed consumer stops there.
* confluent-kafka: transactional commit and abort, and consume-transform-
  produce with send_offsets_to_transaction.
* A broker restart with an open transaction: aborted once its timeout runs
  out (after a SIGKILL), or resumed and committed by the same producer
  (after a clean stop).
* Bad input on raw connections: a fenced producer epoch (PRODUCER_FENCED,
  or INVALID_PRODUCER_EPOCH for old request versions and for Produce),
  EndTxn for an unknown transactional id (INVALID_PRODUCER_ID_MAPPING),
  a transactional batch for a partition outside the transaction
  (INVALID_TXN_STATE), a transaction timeout above the maximum
  (INVALID_TRANSACTION_TIMEOUT); afterwards the partition is intact.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceResponse,
)

from protocol.records import ATTR_TRANSACTIONAL, build_batch
from system_tests import txn_java
from system_tests._proc import (
    LATEST,
    RawClient,
    TierdProc,
    fetch_request,
    list_offsets_request,
    produce_request,
    split_batches,
    start_tierd,
    wait_for,
)
from system_tests.admin import create_topic

PARTITIONS = 3
# Kafka error codes.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
# How often the broker looks for timed-out transactions in these tests.
ABORT_CHECK_MS = 1000
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS)}
TXN_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(request, tmp_path_factory.mktemp("txn"), OVERRIDES, name="tierd-txn")


def new_topic(broker: TierdProc, partitions: int = PARTITIONS) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def java_consume(broker: TierdProc, topic: str, isolation: str, expect: int,
                 settle_ms: int = 1500) -> list[tuple[int, int, str]]:
    out = txn_java.run(["consume", "--bootstrap", broker.bootstrap, "--topic", topic,
                        "--isolation", isolation, "--expect", str(expect),
                        "--settle-ms", str(settle_ms), "--timeout-ms", "60000"])
    return [(p, o, v) for p, o, v in out["records"]]


def java_offsets(broker: TierdProc, topic: str, isolation: str) -> dict[int, int]:
    out = txn_java.run(["list-offsets", "--bootstrap", broker.bootstrap, "--topic", topic,
                        "--isolation", isolation])
    return {int(p): o for p, o in out["offsets"].items()}


def by_partition(records: list[tuple[int, int, str]]) -> dict[int, list[str]]:
    """Values per partition in offset order (offsets checked strictly increasing)."""
    out: dict[int, list[tuple[int, str]]] = {}
    for p, o, v in records:
        out.setdefault(p, []).append((o, v))
    for rows in out.values():
        assert [o for o, _ in rows] == sorted({o for o, _ in rows}), "offsets out of order"
    return {p: [v for _, v in sorted(rows)] for p, rows in out.items()}


def produced_order(values: list[str], partitions: int) -> dict[int, list[str]]:
    """TxnTool's placement: txn-<i>-<j> goes to partition (i + j) % partitions."""
    out: dict[int, list[str]] = {}
    for v in values:
        _, i, j = v.split("-")
        out.setdefault((int(i) + int(j)) % partitions, []).append(v)
    return out


# -- Java client --------------------------------------------------------------------------------


def test_java_interleaved_commits_and_aborts(tierd: TierdProc) -> None:
    topic = new_topic(tierd)
    group = f"g-{topic}"
    result = txn_java.run(["txns", "--bootstrap", tierd.bootstrap, "--topic", topic,
                           "--txn-id", f"java-{topic}", "--transactions", "40", "--records", "3",
                           "--partitions", str(PARTITIONS), "--offsets-group", group])
    committed, aborted = result["committed"], result["aborted"]
    assert len(committed) == len(aborted) == 60  # 20 transactions of 3 records each

    seen = java_consume(tierd, topic, "read_committed", len(committed))
    assert by_partition(seen) == produced_order(committed, PARTITIONS)

    everything = java_consume(tierd, topic, "read_uncommitted", len(committed) + len(aborted))
    all_values = [f"txn-{i}-{j}" for i in range(40) for j in range(3)]
    assert by_partition(everything) == produced_order(all_values, PARTITIONS)

    # sendOffsetsToTransaction: transaction i sent offset i + 1; the last committed is i = 38.
    consumer = Consumer({"bootstrap.servers": tierd.bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        consumer.close()
    assert tp.offset == 39


def test_java_list_offsets_read_committed_is_the_lso_while_open(tierd: TierdProc,
                                                                tmp_path: Path) -> None:
    topic = new_topic(tierd, 1)
    plain = Producer({"bootstrap.servers": tierd.bootstrap})
    for i in range(5):
        plain.produce(topic, f"plain-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    txn = txn_java.OpenTransaction(["--bootstrap", tierd.bootstrap, "--topic", topic,
                                    "--txn-id", f"open-{topic}", "--records", "3"],
                                   tmp_path / "open.stderr")
    try:
        assert java_offsets(tierd, topic, "read_committed") == {0: 5}
        assert java_offsets(tierd, topic, "read_uncommitted") == {0: 8}
        seen = java_consume(tierd, topic, "read_committed", 5, settle_ms=1000)
        assert [v for _, _, v in seen] == [f"plain-{i}" for i in range(5)]
        assert txn.send("commit") == {"result": "commit"}
    finally:
        txn.close()
    assert java_offsets(tierd, topic, "read_committed") == {0: 9}  # 8 records + the marker
    seen = java_consume(tierd, topic, "read_committed", 8)
    assert [v for _, _, v in seen][5:] == ["open-0", "open-1", "open-2"]


def test_java_fenced_producer(tierd: TierdProc) -> None:
    topic = new_topic(tierd, 1)
    out = txn_java.run(["fence", "--bootstrap", tierd.bootstrap, "--topic", topic,
                        "--txn-id", f"fence-{topic}"])
    assert out["a_error"] in ("ProducerFencedException", "InvalidProducerEpochException")
    assert out["b_committed"] is True
    seen = java_consume(tierd, topic, "read_committed", 1)
    assert [v for _, _, v in seen] == ["fencer-0"]


# -- confluent-kafka ----------------------------------------------------------------------------


def confluent_read(broker: TierdProc, topic: str, isolation: str, expect: int,
                   partitions: int = PARTITIONS) -> list[str]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[str] = []
    deadline = time.monotonic() + 30
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


def test_confluent_commit_and_abort(tierd: TierdProc) -> None:
    topic = new_topic(tierd)
    producer = Producer({"bootstrap.servers": tierd.bootstrap, "transactional.id": f"ck-{topic}"})
    producer.init_transactions(30)
    committed, aborted = [], []
    for i in range(6):
        producer.begin_transaction()
        values = [f"ck-{i}-{j}" for j in range(PARTITIONS)]
        for j, value in enumerate(values):
            producer.produce(topic, value.encode(), partition=j)
        producer.flush(30)  # abort would purge what is still queued
        if i % 2 == 0:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
            aborted += values
    assert sorted(confluent_read(tierd, topic, "read_committed", len(committed))) == sorted(committed)
    everything = committed + aborted
    assert sorted(confluent_read(tierd, topic, "read_uncommitted", len(everything))) \
        == sorted(everything)


def test_confluent_consume_transform_produce(tierd: TierdProc) -> None:
    source, sink = new_topic(tierd, 1), new_topic(tierd, 1)
    group = f"eos-{source}"
    feeder = Producer({"bootstrap.servers": tierd.bootstrap})
    for i in range(10):
        feeder.produce(source, f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": tierd.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": tierd.bootstrap, "transactional.id": f"eos-{sink}"})
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + 60
    try:
        while done < 10 and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(5, 1.0) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, m.value().replace(b"in", b"out"), partition=0)
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            done += len(msgs)
        [committed] = consumer.committed([TopicPartition(source, 0)], timeout=30)
    finally:
        consumer.close()
    assert done == 10
    assert committed.offset == 10
    assert confluent_read(tierd, sink, "read_committed", 10, 1) == [f"out-{i}" for i in range(10)]


# -- restart with an open transaction -------------------------------------------------------------


def test_open_transaction_is_aborted_after_a_crash_and_its_timeout(request: pytest.FixtureRequest,
                                                                    tmp_path: Path) -> None:
    broker = start_tierd(request, tmp_path / "crash", OVERRIDES, name="tierd-txn-crash")
    topic = new_topic(broker, 1)
    txn = txn_java.OpenTransaction(["--bootstrap", broker.bootstrap, "--topic", topic,
                                    "--txn-id", f"crash-{topic}", "--records", "3",
                                    "--txn-timeout-ms", "10000"], tmp_path / "open.stderr")
    try:
        broker.kill()
        broker.start()
        assert java_offsets(broker, topic, "read_committed") == {0: 0}  # still open
        wait_for(lambda: java_offsets(broker, topic, "read_committed") == {0: 4}, 45,
                 "the timed-out transaction to be aborted")
        answer = txn.send("commit")
        assert "error" in answer, answer  # the old producer was fenced
    finally:
        txn.close()
    assert java_consume(broker, topic, "read_committed", 0, settle_ms=1000) == []
    assert len(java_consume(broker, topic, "read_uncommitted", 3)) == 3


def test_open_transaction_resumes_after_a_clean_restart(request: pytest.FixtureRequest,
                                                         tmp_path: Path) -> None:
    broker = start_tierd(request, tmp_path / "restart", OVERRIDES, name="tierd-txn-restart")
    topic = new_topic(broker, 1)
    txn = txn_java.OpenTransaction(["--bootstrap", broker.bootstrap, "--topic", topic,
                                    "--txn-id", f"resume-{topic}", "--records", "3",
                                    "--txn-timeout-ms", str(TXN_TIMEOUT_MS)],
                                   tmp_path / "open.stderr")
    try:
        broker.restart()
        assert java_offsets(broker, topic, "read_committed") == {0: 0}
        assert txn.send("commit") == {"result": "commit"}
    finally:
        txn.close()
    seen = java_consume(broker, topic, "read_committed", 3)
    assert [v for _, _, v in seen] == ["open-0", "open-1", "open-2"]


# -- bad input over raw connections ---------------------------------------------------------------


def init_pid(client: RawClient, txn_id: str, timeout_ms: int = TXN_TIMEOUT_MS,
             version: int = 4) -> Any:
    return client.request(InitProducerIdRequest[version](
        transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1,
        producer_epoch=-1), version, InitProducerIdResponse)


def add_partitions(client: RawClient, txn_id: str, pid: int, epoch: int,
                   partitions: dict[str, list[int]], version: int) -> dict[tuple[str, int], int]:
    req_cls = AddPartitionsToTxnRequest[version]
    resp = client.request(req_cls(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[req_cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                             for t, ps in partitions.items()]), version, AddPartitionsToTxnResponse)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(client: RawClient, txn_id: str, pid: int, epoch: int, commit: bool,
            version: int = 3) -> int:
    return client.request(EndTxnRequest[version](
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
        version, EndTxnResponse).error_code


def txn_produce(client: RawClient, txn_id: str, topic: str, pid: int, epoch: int,
                seq: int, value: bytes) -> int:
    batch = build_batch([(None, value)], timestamp=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, attributes=ATTR_TRANSACTIONAL)
    req = produce_request(topic, 0, batch)
    req.transactional_id = txn_id
    resp = client.request(req, 9, ProduceResponse)
    return resp.responses[0].partition_responses[0].error_code


def test_bad_input_gets_kafkas_error_codes(tierd: TierdProc) -> None:
    topic = new_topic(tierd, 2)
    txn_id = f"raw-{topic}"
    with RawClient(tierd.host, tierd.port) as client:
        coord = client.request(FindCoordinatorRequest[1](key=txn_id, key_type=1), 1,
                               FindCoordinatorResponse)
        assert (coord.error_code, coord.port) == (NONE, tierd.port)

        assert end_txn(client, f"unknown-{topic}", 1, 0, True) == INVALID_PRODUCER_ID_MAPPING
        assert init_pid(client, txn_id, 900_001).error_code == INVALID_TRANSACTION_TIMEOUT

        old = init_pid(client, txn_id)
        new = init_pid(client, txn_id)
        pid, epoch = new.producer_id, new.producer_epoch
        assert (old.error_code, new.error_code, pid) == (NONE, NONE, old.producer_id)
        assert epoch == old.producer_epoch + 1

        # The fenced (older) epoch, as each request version spells it.
        tp = {topic: [0]}
        assert add_partitions(client, txn_id, pid, old.producer_epoch, tp, 3) == \
            {(topic, 0): PRODUCER_FENCED}
        assert add_partitions(client, txn_id, pid, old.producer_epoch, tp, 1) == \
            {(topic, 0): INVALID_PRODUCER_EPOCH}
        assert end_txn(client, txn_id, pid, old.producer_epoch, True, 3) == PRODUCER_FENCED
        assert end_txn(client, txn_id, pid, old.producer_epoch, True, 1) == INVALID_PRODUCER_EPOCH

        # A topic that does not exist: nothing is added.
        assert add_partitions(client, txn_id, pid, epoch, {topic: [0], "no-such-topic": [0]}, 3) \
            == {(topic, 0): OPERATION_NOT_ATTEMPTED,
                ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}

        assert add_partitions(client, txn_id, pid, epoch, tp, 3) == {(topic, 0): NONE}
        assert txn_produce(client, txn_id, topic, pid, old.producer_epoch, 0, b"zombie") == \
            INVALID_PRODUCER_EPOCH
        # Partition 1 was never added to the transaction.
        batch = build_batch([(None, b"stray")], timestamp=int(time.time() * 1000),
                            producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            attributes=ATTR_TRANSACTIONAL)
        req = produce_request(topic, 1, batch)
        req.transactional_id = txn_id
        resp = client.request(req, 9, ProduceResponse)
        assert resp.responses[0].partition_responses[0].error_code == INVALID_TXN_STATE

        assert txn_produce(client, txn_id, topic, pid, epoch, 0, b"kept") == NONE
        assert txn_produce(client, txn_id, topic, pid, epoch, 1, b"dropped") == NONE
        offsets = client.request(_committed_list_offsets(topic), 4, ListOffsetsResponse)
        assert offsets.topics[0].partitions[0].offset == 0  # LSO: the open transaction
        assert end_txn(client, txn_id, pid, epoch, False) == NONE
        assert end_txn(client, txn_id, pid, epoch, True) == INVALID_TXN_STATE

        # Nothing corrupted: a read_committed fetch gets the batches plus the
        # abort marker, with the aborted transaction listed.
        req = fetch_request({(topic, 0): 0})
        req.isolation_level = 1
        part = client.request(req, 11, FetchResponse).responses[0].partitions[0]
        assert part.error_code == NONE
        assert (part.high_watermark, part.last_stable_offset) == (3, 3)
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
        assert len(split_batches(bytes(part.records))) == 3
        assert client.request(_committed_list_offsets(topic, partition=1), 4,
                              ListOffsetsResponse).topics[0].partitions[0].offset == 0
    assert confluent_read(tierd, topic, "read_committed", 0, 2) == []


def _committed_list_offsets(topic: str, partition: int = 0) -> Any:
    req = list_offsets_request(topic, {partition: LATEST}, version=4)
    req.isolation_level = 1
    return req


def test_confluent_transaction_timeout_above_the_maximum_is_refused(tierd: TierdProc) -> None:
    producer = Producer({"bootstrap.servers": tierd.bootstrap, "transactional.id": "too-long",
                         "transaction.timeout.ms": "900001"})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(30)
    assert info.value.args[0].code() == INVALID_TRANSACTION_TIMEOUT
