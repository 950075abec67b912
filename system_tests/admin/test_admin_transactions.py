"""``tierd admin transactions`` against one real tierd, with a Java producer
holding a transaction open: list (with filters), describe, describe-producers,
find-hanging (a transaction its coordinator still has open is not hanging),
and abort, after which the partition's last stable offset moves past the
aborted records and a read_committed consumer (librdkafka) reads on. The
hanging case itself needs two brokers: system_tests/cluster/
test_hanging_transaction.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from system_tests import txn_java
from system_tests._proc import TierdProc, start_tierd, wait_for
from system_tests.admin import create_topic
from system_tests.admin.tool import ok, run_admin

NO_OFFSET = -1
WAIT_S = 30.0


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(request, tmp_path_factory.mktemp("admin-txn"), name="tierd-admin-txn")


def read_committed(broker: TierdProc, topic: str, expect: int) -> list[str]:
    """Values a read_committed librdkafka consumer gets from partition 0."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[str] = []
    try:
        def enough() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
            return len(got) >= expect
        wait_for(enough, WAIT_S, f"{expect} committed records of {topic}")
    finally:
        consumer.close()
    return got


def test_list_describe_find_and_abort(tierd: TierdProc, tmp_path: Path) -> None:
    topic = f"admin-txn-{uuid.uuid4().hex[:8]}"
    create_topic(tierd.bootstrap, topic, 1)
    txn_id = f"open-{topic}"
    b = tierd.bootstrap
    txn = txn_java.OpenTransaction(["--bootstrap", b, "--topic", topic, "--txn-id", txn_id,
                                    "--records", "3"], tmp_path / "open.stderr")
    try:
        listed = ok(b, "transactions", "list", "--json").json()
        [mine] = [t for t in listed if t["transactional_id"] == txn_id]
        assert mine["state"] == "Ongoing"
        pid = mine["producer_id"]
        assert ok(b, "transactions", "list", "--producer-id", str(pid), "--json").json() == [mine]
        table = ok(b, "transactions", "list", "--producer-id", str(pid)).stdout
        assert "TRANSACTIONAL-ID" in table and txn_id in table and "Ongoing" in table
        assert txn_id not in {t["transactional_id"] for t in ok(
            b, "transactions", "list", "--state", "CompleteAbort", "--json").json()}

        [d] = ok(b, "transactions", "describe", "--transactional-id", txn_id, "--json").json()
        assert (d["state"], d["producer_id"], d["partitions"]) == ("Ongoing", pid, [f"{topic}:0"])
        missing = run_admin(b, "transactions", "describe", "--transactional-id", f"no-{topic}")
        assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

        [p] = ok(b, "transactions", "describe-producers", "--topic", topic, "--partition", "0",
                 "--json").json()
        assert (p["producer_id"], p["producer_epoch"], p["txn_start_offset"],
                p["last_sequence"]) == (pid, d["producer_epoch"], 0, 2)
        # Open for longer than 0 ms, but its coordinator will end it: not hanging.
        assert ok(b, "transactions", "find-hanging", "--topic", topic,
                  "--max-transaction-timeout-ms", "0", "--json").json() == []

        plain = Producer({"bootstrap.servers": b})
        plain.produce(topic, b"after", partition=0)
        assert plain.flush(WAIT_S) == 0
        aborted = ok(b, "transactions", "abort", "--topic", topic, "--partition", "0",
                     "--producer-id", str(pid), "--producer-epoch", str(p["producer_epoch"]),
                     "--coordinator-epoch", "0", "--json").json()
        assert aborted["result"] == "aborted"
        [p] = ok(b, "transactions", "describe-producers", "--topic", topic, "--partition", "0",
                 "--json").json()
        assert (p["producer_id"], p["txn_start_offset"]) == (pid, NO_OFFSET)
        assert read_committed(tierd, topic, 1) == ["after"]
    finally:
        txn.close()


def test_abort_with_a_stale_epoch_is_refused(tierd: TierdProc, tmp_path: Path) -> None:
    topic = f"admin-txn-{uuid.uuid4().hex[:8]}"
    create_topic(tierd.bootstrap, topic, 1)
    b = tierd.bootstrap
    txn = txn_java.OpenTransaction(["--bootstrap", b, "--topic", topic, "--txn-id",
                                    f"stale-{topic}", "--records", "1"], tmp_path / "o.stderr")
    try:
        [p] = ok(b, "transactions", "describe-producers", "--topic", topic, "--partition", "0",
                 "--json").json()
        refused = run_admin(b, "transactions", "abort", "--topic", topic, "--partition", "0",
                            "--producer-id", str(p["producer_id"]),
                            "--producer-epoch", str(p["producer_epoch"] - 1),
                            "--coordinator-epoch", "0")
        assert refused.returncode == 1 and "INVALID_PRODUCER_EPOCH" in refused.stderr
        [after] = ok(b, "transactions", "describe-producers", "--topic", topic, "--partition",
                     "0", "--json").json()
        assert after["txn_start_offset"] == 0
    finally:
        txn.close()
