"""Real Kafka clients against a real broker: every message back, exactly once, intact.

Each client library produces ~200 messages of varied sizes (empty to 100 KB),
with null keys, null values and headers where the client can express them,
under each compression codec; then reads them back from offset 0 and from
offsets in the middle of partitions. `messages.verify_consumed` demands the
exact produced sequence per partition at the offsets the producer was told.
Cross-client tests produce with one library and consume with another.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Mapping, Sequence

import pytest

from system_tests import javatool
from system_tests.admin import create_topic, wait_for_end_offsets
from system_tests.clients import CODECS, DRIVERS, ClientDriver
from system_tests.clients.base import run_tool
from system_tests.harness import BrokerProcess
from system_tests.messages import (
    Delivery,
    MessageProfile,
    OutMessage,
    Record,
    by_partition,
    make_messages,
    payload,
    sha256,
    verify_consumed,
)

# The messages carry fixed timestamps of 2024 (system_tests/messages.py): without
# this, time retention (7 days) may delete them between produce and consume
# whenever the broker's retention check runs mid-test.
KEEP_OLD_RECORDS = {"retention.ms": "-1"}

PARTITIONS = 3
MESSAGE_COUNT = 200

# Cross-client runs use fewer messages: they test interoperability of the
# record format, not volume.
CROSS_MESSAGE_COUNT = 60

CLIENTS = sorted(DRIVERS)


def all_from_zero(partitions: int = PARTITIONS) -> dict[int, int]:
    """Start offsets for reading every partition from the beginning."""
    return {p: 0 for p in range(partitions)}


def fill_offsets(deliveries: Sequence[Delivery], records: Sequence[Record]) -> list[Delivery]:
    """Deliveries with offsets taken from a verified full read, where the producer gave none.

    Only valid after `verify_consumed` passed for a read from offset 0: the
    records of each partition are then the messages of that partition in order.
    """
    if all(d.offset is not None for d in deliveries):
        return list(deliveries)
    offsets = {p: iter(r.offset for r in recs) for p, recs in by_partition(records).items()}
    return [Delivery(d.partition, next(offsets[d.partition])) for d in deliveries]


def interesting_starts(messages: Sequence[OutMessage], deliveries: Sequence[Delivery]) -> dict[int, int]:
    """Start offsets inside the data: the middle of p0, the last record of p1, the end of p2.

    The middle of a partition usually falls inside a (compressed) batch, so the
    client must drop the batch's leading records; the end offset must yield
    nothing and still let the consumer finish.
    """
    per_partition: dict[int, list[int]] = {}
    for m, d in zip(messages, deliveries, strict=True):
        assert d.offset is not None
        per_partition.setdefault(m.partition, []).append(d.offset)
    p0, p1, p2 = (per_partition[p] for p in range(PARTITIONS))
    return {0: p0[len(p0) // 2], 1: p1[-1], 2: p2[-1] + 1}


def round_trip(
    broker: BrokerProcess,
    topic: str,
    producer: ClientDriver,
    consumer: ClientDriver,
    messages: Sequence[OutMessage],
    codec: str,
) -> None:
    """Produce with one driver, read back with another from 0 and from mid-partition."""
    deliveries = producer.produce(broker.bootstrap, topic, messages, compression=codec)
    records = consumer.consume(broker.bootstrap, topic, all_from_zero())
    verify_consumed(messages, deliveries, records)
    deliveries = fill_offsets(deliveries, records)
    starts = interesting_starts(messages, deliveries)
    records = consumer.consume(broker.bootstrap, topic, starts)
    verify_consumed(messages, deliveries, records, starts)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(broker: BrokerProcess, topic: str, client: str, codec: str) -> None:
    driver = DRIVERS[client]
    create_topic(broker.bootstrap, topic, PARTITIONS, configs=KEEP_OLD_RECORDS)
    messages = make_messages(MESSAGE_COUNT, PARTITIONS, driver.profile)
    round_trip(broker, topic, driver, driver, messages, codec)


def cross_pairs() -> list[tuple[str, str, str]]:
    """Every ordered (producer, consumer) pair of distinct clients, codecs rotated."""
    pairs = [(p, c) for p, c in itertools.product(CLIENTS, CLIENTS) if p != c]
    codecs = itertools.cycle(CODECS)
    return [(p, c, next(codecs)) for p, c in pairs]


@pytest.mark.parametrize(("producer", "consumer", "codec"), cross_pairs())
def test_cross_client(broker: BrokerProcess, topic: str, producer: str, consumer: str, codec: str) -> None:
    produce_with, consume_with = DRIVERS[producer], DRIVERS[consumer]
    create_topic(broker.bootstrap, topic, PARTITIONS, configs=KEEP_OLD_RECORDS)
    messages = make_messages(CROSS_MESSAGE_COUNT, PARTITIONS, produce_with.profile)
    round_trip(broker, topic, produce_with, consume_with, messages, codec)


@pytest.mark.parametrize("acks", ["0", "1"])
@pytest.mark.parametrize("client", CLIENTS)
def test_acks_modes(broker: BrokerProcess, topic: str, client: str, acks: str) -> None:
    """acks=0 and acks=1 deliver everything too (acks=all is covered above)."""
    driver = DRIVERS[client]
    create_topic(broker.bootstrap, topic, PARTITIONS, configs=KEEP_OLD_RECORDS)
    messages = make_messages(CROSS_MESSAGE_COUNT, PARTITIONS, driver.profile)
    deliveries = driver.produce(broker.bootstrap, topic, messages, compression="lz4", acks=acks)
    if acks == "0":
        assert all(d.offset is None for d in deliveries)
        counts = {p: sum(1 for m in messages if m.partition == p) for p in range(PARTITIONS)}
        wait_for_end_offsets(broker.bootstrap, topic, counts)
    records = driver.consume(broker.bootstrap, topic, all_from_zero())
    verify_consumed(messages, deliveries, records)


def test_kcat_metadata(broker: BrokerProcess, topic: str) -> None:
    """`kcat -L` sees the broker at its advertised address and the topic's partitions."""
    create_topic(broker.bootstrap, topic, PARTITIONS, configs=KEEP_OLD_RECORDS)
    done = run_tool(["kcat", "-b", broker.bootstrap, "-L", "-J", "-m", "15"])
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    metadata = json.loads(done.stdout)
    brokers = {b["id"]: b["name"] for b in metadata["brokers"]}
    assert list(brokers.values()) == [broker.bootstrap], metadata["brokers"]
    topics = {t["topic"]: t for t in metadata["topics"]}
    assert topic in topics, sorted(topics)
    ours = topics[topic]
    assert "error" not in ours, ours
    assert sorted(p["partition"] for p in ours["partitions"]) == list(range(PARTITIONS))
    for partition in ours["partitions"]:
        assert "error" not in partition, partition
        assert partition["leader"] in brokers, partition
        assert [r["id"] for r in partition["replicas"]] == [partition["leader"]]
        assert [r["id"] for r in partition["isrs"]] == [partition["leader"]]


def test_java_generated_produce_and_admin(broker: BrokerProcess, topic: str) -> None:
    """KafkaTool's --count mode, digests and basic admin calls, in one JVM.

    Also pins that messages.payload() matches KafkaTool's generatedValue(),
    which other tests rely on to verify Java-generated load.
    """
    b = ["--bootstrap", broker.bootstrap]
    count, size = 50, 333
    produce = [
        "produce", *b, "--topic", topic, "--count", str(count), "--size", str(size),
        "--partition", "1", "--compression", "zstd", "--report-offsets",
    ]  # fmt: skip
    results = javatool.run_batch(
        [
            ["admin", *b, "create-topic", "--topic", topic, "--partitions", "2"],
            produce,
            ["consume", *b, "--topic", topic, "--partition", "1", "--digest"],
            ["admin", *b, "describe-topics", "--topic", topic],
            ["admin", *b, "list-offsets", "--topic", topic, "--spec", "earliest"],
            ["admin", *b, "list-offsets", "--topic", topic, "--spec", "latest"],
            ["admin", *b, "describe-cluster"],
        ]
    )
    for result in results:
        assert result["exit"] == javatool.EXIT_OK, result
    _, produced, consumed, described, earliest, latest, cluster = (r["result"] for r in results)
    assert produced["offsets"] == [[1, i] for i in range(count)]
    expected = [(f"k{i}".encode(), sha256(payload(i, size, binary=True))) for i in range(count)]
    got = [(_b64decode(r["k"]), r["v_sha256"]) for r in consumed["records"]]
    assert got == expected
    assert [r["o"] for r in consumed["records"]] == list(range(count))
    partitions = described["topics"][topic]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1]
    assert _offsets(earliest) == {"0": 0, "1": 0}
    assert _offsets(latest) == {"0": 0, "1": count}
    assert [f"{n['host']}:{n['port']}" for n in cluster["nodes"]] == [broker.bootstrap]


def _offsets(result: Mapping[str, object]) -> dict[str, int]:
    offsets = result["offsets"]
    assert isinstance(offsets, dict)
    return {p: info["offset"] for p, info in offsets.items()}


def _b64decode(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_profiles_are_what_drivers_claim() -> None:
    """Guard the message generator: a text profile yields only text, binary yields bytes."""
    text = make_messages(MESSAGE_COUNT, PARTITIONS, DRIVERS["kcat"].profile)
    assert all(m.value is not None and m.value.isascii() for m in text)
    assert all(b"\t" not in (m.value or b"") and b"\n" not in (m.value or b"") for m in text)
    assert not any(m.key is None and m.value == b"" for m in text)
    binary = make_messages(MESSAGE_COUNT, PARTITIONS, MessageProfile())
    assert any(m.key is None for m in binary) and any(m.value is None for m in binary)
    assert any(m.value and not m.value.isascii() for m in binary)


def test_java_admin_list_offsets_specs_and_delete_records(broker: BrokerProcess, topic: str,
                                                          tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Java AdminClient listOffsets for earliest, latest, max timestamp, earliestLocal and
    by timestamp; deleteRecords then earliest moves (issue 2's AdminClient checks)."""
    b = ["--bootstrap", broker.bootstrap]
    base = 1_700_000_000_000
    # Timestamps rise, except record 7 carries the maximum: max-timestamp must find it.
    stamps = [base + i * 1000 for i in range(12)]
    stamps[7] = base + 99_000
    lines = [f"0\t{base64.b64encode(b'k%d' % i).decode()}\t"
             f"{base64.b64encode(b'v%d' % i).decode()}\t{ts}\t-" for i, ts in enumerate(stamps)]
    records = tmp_path / "records.tsv"
    records.write_text("\n".join(lines) + "\n")
    specs = ["earliest", "latest", "max-timestamp", "earliest-local", "latest-tiered",
             f"ts:{base + 3500}", f"ts:{base + 200_000}"]
    results = javatool.run_batch(
        [["admin", *b, "create-topic", "--topic", topic, "--partitions", "1"],
         ["produce", *b, "--topic", topic, "--input", str(records), "--report-offsets"],
         *[["admin", *b, "list-offsets", "--topic", topic, "--spec", s] for s in specs],
         ["admin", *b, "delete-records", "--topic", topic, "--before", "0:5"],
         ["admin", *b, "list-offsets", "--topic", topic, "--spec", "earliest"],
         ["admin", *b, "list-offsets", "--topic", topic, "--spec", "earliest-local"],
         ["admin", *b, "describe-topics", "--topic", topic]])
    for result in results:
        assert result["exit"] == javatool.EXIT_OK, result
    out = [r["result"] for r in results]
    by_spec = {s: out[2 + i]["offsets"]["0"] for i, s in enumerate(specs)}
    assert by_spec["earliest"]["offset"] == 0
    assert by_spec["latest"]["offset"] == 12
    assert (by_spec["max-timestamp"]["offset"], by_spec["max-timestamp"]["timestamp"]) == (
        7, base + 99_000)
    assert by_spec["earliest-local"]["offset"] == 0  # not tiered: the log start
    assert by_spec["latest-tiered"]["offset"] == -1  # not tiered: none
    assert (by_spec[f"ts:{base + 3500}"]["offset"],
            by_spec[f"ts:{base + 3500}"]["timestamp"]) == (4, base + 4000)
    assert by_spec[f"ts:{base + 200_000}"]["offset"] == -1
    after_delete, earliest, earliest_local, described = out[-4:]
    assert after_delete["low_watermarks"]["0"] == 5
    assert _offsets(earliest) == {"0": 5}
    assert _offsets(earliest_local) == {"0": 5}
    assert [p["partition"] for p in described["topics"][topic]["partitions"]] == [0]


def test_describe_log_dirs_and_configs_with_kafka_python(broker: BrokerProcess, topic: str) -> None:
    """DescribeLogDirs reports the partitions' sizes; topic configs survive AlterConfigs."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
        for i in range(20):
            producer.send(topic, value=b"x" * 100, partition=i % 2).get(timeout=10)
        producer.close()
        result = admin.describe_log_dirs()
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for d in result[0]["log_dirs"] for t in d["topics"] for p in t["partitions"]}
        # 10 single-record batches of 100-byte values per partition.
        assert sizes[(topic, 0)] >= 10 * 100 and sizes[(topic, 1)] >= 10 * 100, sizes
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "7200000"})])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert '"7200000"' in json.dumps(described, default=str) or "7200000" in str(described)
    finally:
        admin.close()
