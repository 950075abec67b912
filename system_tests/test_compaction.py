"""Log compaction through real brokers and real clients (issue 11).

Each test starts its own tierd with the cleaner looking for work every
100 ms, writes to a compacted topic with a real client, waits (deadline,
never a fixed sleep) until the cleaner has cleaned everything below the
active segment, and reads the topic back with real clients: the latest
value of every key, at its original offset, and far fewer records than
were written. The crash test SIGKILLs the broker while passes run.

Rolling on demand: the topics use segment.ms=1000, and ``clean_everything``
keeps appending a small record on a key of its own until a pass has
covered the offset of its first one, so no test depends on segment sizes.
A test that reads the log before cleaning creates its topic with HELD
(min.compaction.lag.ms of an hour): small segments roll while it produces,
and without the hold a pass may clean them before that first read.
``clean_everything`` lifts the hold with IncrementalAlterConfigs.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidRecordError

from system_tests import txn_java
from system_tests._proc import TierdProc, scrape, start_tierd, wait_for
from system_tests.admin import create_topic
from system_tests.clients import DRIVERS
from system_tests.tiered_helpers import alter_topic

CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "8192", "segment.ms": "1000",
             "min.cleanable.dirty.ratio": "0.01", "retention.ms": "-1"}
HELD = {**COMPACTED, "min.compaction.lag.ms": "3600000"}
ROLL_KEY = b"__roll__"
_CLEANED = re.compile(r"cleaned log .*?cleaned_up_to=(\d+).*?topic=(\S+)")


def cleaned_up_to(broker: TierdProc, topic: str) -> int:
    """The highest offset below which a pass on ``topic``-0 has cleaned (-1: none yet)."""
    found = [int(m.group(1)) for m in _CLEANED.finditer(broker.log_text())
             if m.group(2) == topic]
    return max(found, default=-1)


def clean_everything(broker: TierdProc, topic: str, timeout_s: float = 60) -> None:
    """Lift any hold (HELD), roll the active segment (segment.ms) and wait for a
    pass past what was written."""
    alter_topic(broker, topic, min_compaction_lag_ms="0")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        first = producer.send(topic, key=ROLL_KEY, value=b"roll", partition=0).get(30).offset

        def done() -> bool:
            if cleaned_up_to(broker, topic) >= first:
                return True
            producer.send(topic, key=ROLL_KEY, value=b"roll", partition=0).get(30)
            return False

        wait_for(done, timeout_s, f"a cleaning pass of {topic} past offset {first}",
                 interval_s=0.3)
    finally:
        producer.close()


def fold(pairs: list[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """A changelog's table: the last value per key, a tombstone deleting it."""
    table: dict[bytes, bytes] = {}
    for key, value in pairs:
        assert key is not None
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of partition 0 from the start, with kafka-python."""
    records = DRIVERS["kafka-python"].consume(bootstrap, topic, {0: 0}, timeout_s=60)
    return [(r.offset, r.key, r.value) for r in records]


def debezium_changelog(rows: int, updates: int, rng: random.Random
                       ) -> list[tuple[bytes, bytes | None]]:
    """Debezium-style events: keyed by primary key, create/update envelopes, and for
    deleted rows a delete envelope followed by a tombstone."""
    out: list[tuple[bytes, bytes | None]] = []
    state: dict[int, dict[str, Any]] = {}
    for n in range(rows * updates):
        row = rng.randrange(rows)
        key = json.dumps({"schema": None, "payload": {"id": row}}).encode()
        before = state.get(row)
        after = {"id": row, "name": f"customer-{row}", "version": n, "pad": "x" * rng.randrange(80)}
        op = "u" if before else "c"
        out.append((key, json.dumps({"payload": {"before": before, "after": after,
                                                 "op": op}}).encode()))
        state[row] = after
        if rng.random() < 0.03:
            out.append((key, json.dumps({"payload": {"before": after, "after": None,
                                                     "op": "d"}}).encode()))
            out.append((key, None))
            state.pop(row)
    return out


def test_changelog_reads_latest_value_per_key_with_every_client(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    broker = start_tierd(request, tmp_path / "broker", CLEANER)
    create_topic(broker.bootstrap, topic, 1, configs=HELD)
    events = debezium_changelog(200, 15, random.Random(11))
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                             compression_type="lz4", linger_ms=5)
    offsets = [producer.send(topic, key=k, value=v, partition=0) for k, v in events]
    producer.flush()
    written = [f.get(30).offset for f in offsets]
    producer.close()
    before = read_all(broker.bootstrap, topic)
    assert len(before) == len(events)

    clean_everything(broker, topic)

    expected = fold(events)
    after = read_all(broker.bootstrap, topic)
    data = [(o, k, v) for o, k, v in after if k != ROLL_KEY]
    assert fold([(k, v) for _, k, v in data]) == expected
    # Each surviving record is the last one written for its key, at its own offset.
    last_offset = {k: o for (k, _), o in zip(events, written, strict=True)}
    assert all(last_offset[k] == o for o, k, _ in data), "a superseded value survived"
    assert len(data) <= len(last_offset), "more than one record per key"
    offsets_seen = [o for o, _, _ in after]
    assert offsets_seen == sorted(set(offsets_seen))
    assert scrape(broker.metrics_url).total("tierd_cleaner_passes") >= 1

    # Other clients read the same table, each from offset 0 through the gaps.
    for name in ("java", "confluent"):
        got = DRIVERS[name].consume(broker.bootstrap, topic, {0: 0}, timeout_s=60)
        rows = [(r.key, r.value) for r in got if r.key != ROLL_KEY]
        assert fold(rows) == expected, f"{name} read another table"
        assert [r.offset for r in got] == offsets_seen, f"{name} read other offsets"


def test_keyless_record_refused_on_compacted_topic(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    broker = start_tierd(request, tmp_path / "broker", CLEANER)
    create_topic(broker.bootstrap, topic, 1, configs=COMPACTED)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(InvalidRecordError):
            producer.send(topic, value=b"no key", partition=0).get(30)
        assert producer.send(topic, key=b"k", value=b"keyed", partition=0).get(30).offset == 0
    finally:
        producer.close()
    assert "without key" in broker.log_text()
    assert scrape(broker.metrics_url).total("tierd_error_responses_total",
                                            error="INVALID_RECORD") >= 1


def _java_consume(bootstrap: str, topic: str, isolation: str, expect: int) -> list[list[Any]]:
    out = txn_java.run(["consume", "--bootstrap", bootstrap, "--topic", topic,
                        "--isolation", isolation, "--expect", str(expect),
                        "--timeout-ms", "30000", "--settle-ms", "1500"])
    return list(out["records"])


def test_transactions_cleaned_read_committed_unchanged(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    broker = start_tierd(request, tmp_path / "broker", CLEANER)
    create_topic(broker.bootstrap, topic, 1, configs=HELD)
    keys, per_txn = 5, 10
    result = txn_java.run(["txns", "--bootstrap", broker.bootstrap, "--topic", topic,
                           "--txn-id", f"{topic}-txn", "--transactions", "40",
                           "--records", str(per_txn), "--keys", str(keys)])
    committed, aborted = result["committed"], result["aborted"]

    def key_of(value: str) -> int:
        return int(value.rsplit("-", 1)[1]) % keys

    expected: dict[int, str] = {}
    for value in committed:
        expected[key_of(value)] = value
    before = _java_consume(broker.bootstrap, topic, "read_committed", len(committed))
    assert {key_of(v): v for _, _, v in before} == expected

    clean_everything(broker, topic)

    after = _java_consume(broker.bootstrap, topic, "read_committed", keys)
    data = [(o, v) for _, o, v in after if v != "roll"]
    assert {key_of(v): v for _, v in data} == expected
    assert len(data) == keys, "committed values superseded later survived cleaning"
    everything = _java_consume(broker.bootstrap, topic, "read_uncommitted", keys)
    assert not {v for _, _, v in everything} & set(aborted), "aborted data survived cleaning"


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out |= {int(c) for c in text}
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_sigkill_during_cleaning_loses_nothing(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    """Kill the broker at random moments of cleaning passes (the cleaner slowed
    to ~1 MB/s so passes last), restart, and finally let cleaning finish: the
    table is whole, offsets unique and ordered, no cleaning leftovers, and the
    worker process never outlives its broker."""
    rng = random.Random(5)
    overrides = {**CLEANER, "log.cleaner.io.max.bytes.per.second": "1000000"}
    broker = start_tierd(request, tmp_path / "broker", overrides)
    create_topic(broker.bootstrap, topic, 1,
                 configs={**COMPACTED, "segment.bytes": "65536"})
    events: list[tuple[bytes, bytes | None]] = []
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    for n in range(12_000):
        key = f"key-{rng.randrange(1500)}".encode()
        value = None if rng.random() < 0.02 else f"value-{n}-".encode().ljust(100, b".")
        events.append((key, value))
        producer.send(topic, key=key, value=value, partition=0)
    producer.flush()
    producer.close()
    expected = fold(events)
    log_dir = broker.data_dir

    for attempt in range(4):
        wait_for(lambda: _children(broker.pid), 30, "the cleaner worker to start")
        workers = _children(broker.pid)
        time.sleep(rng.uniform(0.05, 1.5))  # a random point inside a pass
        broker.kill()
        wait_for(lambda ws=workers: not any(_alive(w) for w in ws), 10,
                 "the cleaner worker to die with its broker")
        broker.start()
        table = read_all(broker.bootstrap, topic)
        offsets = [o for o, _, _ in table]
        assert offsets == sorted(set(offsets)), f"attempt {attempt}: duplicate offsets"
        assert fold([(k, v) for _, k, v in table if k != ROLL_KEY]) == expected, \
            f"attempt {attempt}: the table changed"

    broker.overrides.pop("log.cleaner.io.max.bytes.per.second")
    broker.stop()
    broker.start()
    clean_everything(broker, topic)
    table = read_all(broker.bootstrap, topic)
    assert fold([(k, v) for _, k, v in table if k != ROLL_KEY]) == expected
    assert len([1 for _, k, _ in table if k != ROLL_KEY]) <= 1500
    leftovers = [name for name in os.listdir(Path(log_dir) / f"{topic}-0")
                 if name.endswith((".cleaned", ".swap", ".deleted"))]
    assert not leftovers


def test_consumer_offsets_compacted_and_commits_survive_restart(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    overrides = {**CLEANER, "offsets.topic.num.partitions": "1",
                 "offsets.topic.segment.bytes": "16384"}
    broker = start_tierd(request, tmp_path / "broker", overrides)
    create_topic(broker.bootstrap, topic, 2, configs={"retention.ms": "-1"})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="committer",
                             enable_auto_commit=False)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    from kafka.structs import OffsetAndMetadata

    for n in range(1, 1501):
        consumer.commit({tps[0]: OffsetAndMetadata(n, "", -1),
                         tps[1]: OffsetAndMetadata(2 * n, "", -1)})
    consumer.close()
    offsets_dir = Path(broker.data_dir) / "__consumer_offsets-0"

    def size() -> int:
        return sum(p.stat().st_size for p in offsets_dir.glob("*.log"))

    # 3,000 commit records of ~100 bytes were written; cleaned, what is left
    # is at most the active segment and the two latest commits.
    wait_for(lambda: cleaned_up_to(broker, "__consumer_offsets") > 0 and size() < 2 * 16384,
             60, "__consumer_offsets to be cleaned")
    broker.stop()
    broker.start()
    check = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="committer",
                          enable_auto_commit=False)
    try:
        assert check.committed(tps[0]) == 1500
        assert check.committed(tps[1]) == 3000
    finally:
        check.close()
    assert "logs loaded" in broker.log_text()


def _vm_hwm(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    assert found is not None
    return int(found.group(1)) * 1024


def test_million_keys_with_a_small_key_map(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    """1,000,000 distinct keys, a key map with room for a fifth of them: the
    cleaner takes several passes, its worker's memory stays within the map's
    bound (an unbounded map of 1M keys would take ~140 MiB), and the result is
    the latest value of every key."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    keys, buffer = 1_000_000, 32 << 20  # 32 MiB * 0.9 / 160 B = 188,743 keys per pass
    broker = start_tierd(request, tmp_path / "broker",
                         {**CLEANER, "log.cleaner.dedupe.buffer.size": str(buffer)})
    create_topic(broker.bootstrap, topic, 1,
                 configs={**COMPACTED, "segment.bytes": str(8 << 20)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "compression.type": "lz4", "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 500_000})
    failures: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    def send(key: int, value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, key=b"%07d" % key, value=value, partition=0,
                                 on_delivery=report)
                return
            except BufferError:
                producer.poll(0.05)

    for k in range(keys):
        send(k, b"first")
    for k in range(0, keys, 10):
        send(k, b"second")
    assert producer.flush(120) == 0 and not failures
    end = keys + keys // 10

    clean_everything(broker, topic, timeout_s=240)
    passes = len([m for m in _CLEANED.finditer(broker.log_text()) if m.group(2) == topic])
    assert passes >= 5, f"{passes} passes: the key map was not the bound"
    [worker] = [c for c in _children(broker.pid)
                if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]
    peak = _vm_hwm(worker)
    assert peak < 110 << 20, f"cleaner worker peaked at {peak >> 20} MiB"

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition(topic, 0, 0)])
        table: dict[bytes, bytes] = {}
        count = 0
        deadline = time.monotonic() + 120
        last = -1
        while last < end - 1 and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                assert msg.error() is None, msg.error()
                assert msg.offset() > last
                last = msg.offset()
                count += 1
                table[msg.key()] = msg.value()
    finally:
        consumer.close()
    table.pop(ROLL_KEY, None)
    assert len(table) == keys
    assert all(v == (b"second" if int(k) % 10 == 0 else b"first") for k, v in table.items())
    assert count - (last - end + 1) <= keys + 1, "superseded values survived"
