"""Log compaction in cluster mode: every replica cleans its own log (as Kafka's
do), a new leader serves its cleaned log after a SIGKILL failover, and a
replica that was down catches up by fetching the leader's cleaned batches
(fewer records than offsets) and ends with the same table."""

from __future__ import annotations

import random
import re

from kafka import KafkaProducer

from protocol import records
from system_tests.clients import DRIVERS
from system_tests.cluster.cluster import Cluster, wait_for

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "8192", "segment.ms": "1000",
             "min.cleanable.dirty.ratio": "0.01", "retention.ms": "-1",
             "min.insync.replicas": "2"}
ROLL_KEY = b"__roll__"
_CLEANED = re.compile(r"cleaned log .*?cleaned_up_to=(\d+).*?topic=(\S+)")


def _cleaned_up_to(cluster: Cluster, node: int, topic: str) -> int:
    text = cluster.brokers[node].log_tail(limit=1 << 30)
    return max((int(m.group(1)) for m in _CLEANED.finditer(text) if m.group(2) == topic),
               default=-1)


def _fold(pairs) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    table: dict[bytes, bytes] = {}
    for key, value in pairs:
        if key == ROLL_KEY:
            continue
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def _replica_records(cluster: Cluster, node: int, topic: str) -> list[records.Record]:
    directory = cluster.brokers[node].workdir / "data" / f"{topic}-0"
    out: list[records.Record] = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for header in records.iter_headers(data):
            assert records.crc_ok(data, header)
            out.extend(records.decode_records(data, header))
    return out


def test_every_replica_cleans_and_failover_serves_the_cleaned_log(
        cluster: Cluster, topic: str) -> None:
    cluster.start({"log.cleaner.backoff.ms": "100"})
    cluster.create_topic(topic, 1, rf=3, configs=COMPACTED)
    rng = random.Random(3)
    events = []
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", retries=50,
                             linger_ms=5)
    for n in range(4000):
        key = f"row-{rng.randrange(300)}".encode()
        value = None if rng.random() < 0.03 else f"v{n}-".encode().ljust(60, b".")
        events.append((key, value))
        producer.send(topic, key=key, value=value, partition=0)
    producer.flush()
    expected = _fold(events)

    first = producer.send(topic, key=ROLL_KEY, value=b"roll", partition=0).get(30).offset

    def all_cleaned() -> bool:
        if all(_cleaned_up_to(cluster, n, topic) >= first for n in cluster.brokers):
            return True
        producer.send(topic, key=ROLL_KEY, value=b"roll", partition=0).get(30)
        return False

    wait_for("every replica to clean past the writes", all_cleaned, timeout_s=60)
    for node in cluster.brokers:
        recs = _replica_records(cluster, node, topic)
        assert _fold((r.key, r.value) for r in recs) == expected, f"broker {node}'s table"
        assert len([r for r in recs if r.key != ROLL_KEY]) <= 300, f"broker {node} kept extras"

    leader = cluster.leader(topic, 0)
    cluster.brokers[leader].kill()
    wait_for("a new leader", lambda: cluster.partitions(topic)[0]["leader"] not in (-1, leader))
    got = DRIVERS["kafka-python"].consume(",".join(cluster.bootstrap()), topic, {0: 0},
                                          timeout_s=60)
    assert _fold((r.key, r.value) for r in got) == expected
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))

    more = [(f"row-{k}".encode(), b"after-failover") for k in range(0, 300, 7)]
    for key, value in more:
        producer.send(topic, key=key, value=value, partition=0)
    producer.flush()
    producer.close()
    expected = _fold(events + more)

    # The killed replica comes back, truncates and fetches the leader's cleaned batches.
    cluster.brokers[leader].start()
    wait_for("the restarted replica back in the ISR",
             lambda: len(cluster.partitions(topic)[0]["isr"]) == 3)
    recs = _replica_records(cluster, leader, topic)
    assert _fold((r.key, r.value) for r in recs) == expected
    got = DRIVERS["kafka-python"].consume(",".join(cluster.bootstrap()), topic, {0: 0},
                                          timeout_s=60)
    assert _fold((r.key, r.value) for r in got) == expected
