"""PySpark's Kafka source access pattern, with the Java client (issue 3).

Spark's driver plans a batch with AdminClient (describeTopics for partition
discovery, listOffsets earliest / latest / by timestamp); each executor then
reads one partition with a KafkaConsumer that has group.id set but never
subscribes: assign() + seek() + poll(). Run with both isolation levels over
100k records in 4 partitions; count, order and content are verified.
"""

from __future__ import annotations

import base64
from hashlib import sha256

from system_tests import javatool
from system_tests.harness import BrokerProcess
from system_tests.messages import payload

PARTITIONS = 4
PER_PARTITION = 25_000
SIZE = 100


def _expected_digests() -> list[str]:
    return [sha256(payload(i, SIZE, binary=True)).hexdigest() for i in range(PER_PARTITION)]


def test_spark_kafka_source_pattern(broker: BrokerProcess, topic: str) -> None:
    b = ["--bootstrap", broker.bootstrap]
    produce = [["produce", *b, "--topic", topic, "--count", str(PER_PARTITION), "--size", str(SIZE),
                "--partition", str(p), "--compression", "lz4", "--acks", "all"]
               for p in range(PARTITIONS)]
    starts = [arg for p in range(PARTITIONS) for arg in ("--start", f"{p}:0")]
    consume = [
        ["consume", *b, "--topic", topic, *starts, "--group-id", f"spark-{topic}",
         "--isolation", isolation, "--digest", "--timeout-ms", "120000"]
        for isolation in ("read_committed", "read_uncommitted")]
    results = javatool.run_batch(
        [["admin", *b, "create-topic", "--topic", topic, "--partitions", str(PARTITIONS)],
         *produce,
         ["admin", *b, "describe-topics", "--topic", topic],
         ["admin", *b, "list-offsets", "--topic", topic, "--spec", "earliest"],
         ["admin", *b, "list-offsets", "--topic", topic, "--spec", "latest"],
         ["admin", *b, "list-offsets", "--topic", topic, "--spec", "ts:0"],
         *consume],
        timeout_s=600)
    for result in results:
        assert result["exit"] == javatool.EXIT_OK, str(result)[:2000]
    out = [r["result"] for r in results]
    described, earliest, latest, by_ts = out[1 + PARTITIONS:5 + PARTITIONS]
    partitions = described["topics"][topic]["partitions"]
    assert [p["partition"] for p in partitions] == list(range(PARTITIONS))
    assert {p: v["offset"] for p, v in earliest["offsets"].items()} == {
        str(p): 0 for p in range(PARTITIONS)}
    assert {p: v["offset"] for p, v in latest["offsets"].items()} == {
        str(p): PER_PARTITION for p in range(PARTITIONS)}
    assert {p: v["offset"] for p, v in by_ts["offsets"].items()} == {
        str(p): 0 for p in range(PARTITIONS)}
    digests = _expected_digests()
    for consumed in out[-2:]:
        assert consumed["count"] == PARTITIONS * PER_PARTITION
        for p in range(PARTITIONS):
            mine = [r for r in consumed["records"] if r["p"] == p]
            assert [r["o"] for r in mine] == list(range(PER_PARTITION)), f"partition {p} order"
            assert [base64.b64decode(r["k"]) for r in mine] == [
                f"k{i}".encode() for i in range(PER_PARTITION)]
            assert [r["v_sha256"] for r in mine] == digests, f"partition {p} content"
