"""Crash and restart with real processes: nothing acknowledged is lost or altered.

* SIGTERM between produce and consume: the clean-shutdown marker is written,
  the restart trusts it, and every partition reads back byte for byte.
* SIGKILL while a confluent-kafka producer (own process, acks=all) is
  producing: after the restart every acknowledged message is at its
  acknowledged offset with its bytes, offsets are contiguous, every batch
  served passes librdkafka's CRC check, and the same producer carries on.
* A torn tail (garbage appended, a batch cut in half, a batch with a bad
  CRC, zero fill) on the last segment after SIGKILL: the broker starts,
  serves every whole batch before the damage, and appends after it.
* Index files and checkpoint files deleted while the broker is down: all
  data still reads back and ListOffsets by timestamp answers as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.protocol.producer import ProduceResponse

from protocol.records import build_batch
from system_tests._proc import (
    EARLIEST,
    LATEST,
    PRODUCER_MAIN,
    RawClient,
    TierdProc,
    batch_crc_ok,
    batch_offsets,
    consume_all,
    list_offsets,
    produce_request,
    producer_value,
    read_acks,
    read_batches,
    same_batch,
    start_tierd,
    wait_for,
)
from system_tests.admin import create_topic
from system_tests.harness import REPO_ROOT

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

# Small segments so every test spans several segment files (and their indexes).
SEGMENT_BYTES = 16 * 1024
INDEX_INTERVAL_BYTES = 512

PRODUCE_VERSION = 9


@pytest.fixture
def tierd(request: pytest.FixtureRequest, tmp_path: Path) -> TierdProc:
    return start_tierd(request, tmp_path / "crash", name="tierd-crash")


def raw(broker: TierdProc) -> RawClient:
    return RawClient(broker.host, broker.port)


def partition_dir(broker: TierdProc, topic: str, partition: int) -> Path:
    return broker.data_dir / f"{topic}-{partition}"


def log_since_start(broker: TierdProc) -> str:
    text = broker.log_text()
    return text[text.rfind("===== start #") :]


def produce_raw(client: RawClient, topic: str, partition: int, batch: bytes) -> int:
    resp = client.request(
        produce_request(topic, partition, batch, -1, PRODUCE_VERSION), PRODUCE_VERSION, ProduceResponse
    )
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------


def test_sigterm_restart_serves_everything_byte_identical(tierd: TierdProc, topic: str) -> None:
    partitions = 3
    create_topic(tierd.bootstrap, topic, partitions, configs={"segment.bytes": str(SEGMENT_BYTES)})
    sent: dict[tuple[int, int], tuple[bytes, bytes, tuple, int]] = {}
    base_ts = now_ms() - 60_000
    for codec in ("none", "lz4"):
        producer = Producer(
            {"bootstrap.servers": tierd.bootstrap, "acks": "all", "compression.type": codec, "linger.ms": 5}
        )
        for i in range(300):
            key, value = f"{codec}-{i}".encode(), os.urandom(i * 13 % 2000)
            headers = ((f"h{i % 3}", f"v{i}".encode()),)

            def on_delivery(err, msg, key=key, value=value, headers=headers, ts=base_ts + i):
                assert err is None, err
                sent[(msg.partition(), msg.offset())] = (key, value, headers, ts)

            producer.produce(
                topic,
                key=key,
                value=value,
                headers=list(headers),
                partition=i % partitions,
                timestamp=base_ts + i,
                on_delivery=on_delivery,
            )
        assert producer.flush(30) == 0
    assert len(sent) == 600
    with raw(tierd) as client:
        before = {p: read_batches(client, topic, p) for p in range(partitions)}

    assert tierd.stop() == 0
    assert (tierd.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    tierd.start()
    assert "clean_shutdown=True" in log_since_start(tierd)

    with raw(tierd) as client:
        after = {p: read_batches(client, topic, p) for p in range(partitions)}
    assert after == before
    consumed = consume_all(tierd.bootstrap, topic, partitions)
    for p, records in consumed.items():
        assert [r.offset for r in records] == list(range(before[p][1]))
        for r in records:
            assert (r.key, r.value, r.headers, r.timestamp) == sent.pop((p, r.offset))
    assert not sent, f"acknowledged but not consumed: {sorted(sent)[:10]}"


def test_sigkill_during_produce_loses_no_acknowledged_message(
    tierd: TierdProc, topic: str, tmp_path: Path
) -> None:
    partitions = 3
    create_topic(tierd.bootstrap, topic, partitions, configs={"segment.bytes": str(4 * SEGMENT_BYTES)})
    ack_path, stop_path = tmp_path / "acks.txt", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with (tmp_path / "producer.log").open("wb") as out:
        producer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                PRODUCER_MAIN,
                tierd.bootstrap,
                topic,
                str(partitions),
                str(ack_path),
                str(stop_path),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def acked() -> int:
            return len(read_acks(ack_path)[0]) if ack_path.exists() else 0

        wait_for(lambda: acked() >= 3000, 30, "3000 acknowledged messages before the kill")
        tierd.kill()
        acked_at_kill = read_acks(ack_path)[0]
        assert not (tierd.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
        time.sleep(0.5)  # the producer notices and queues up
        tierd.start()
        assert "clean_shutdown=False" in log_since_start(tierd)
        wait_for(
            lambda: acked() >= len(acked_at_kill) + 3000,
            60,
            "3000 more acknowledged messages after the restart",
        )
        stop_path.touch()
        assert producer.wait(60) == 0, (tmp_path / "producer.log").read_text()
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()

    acks, failures, end = read_acks(ack_path)
    assert end is not None and end.endswith(" 0"), f"producer did not flush: {end}"
    assert not failures, failures[:5]
    last_before_kill = {}
    for a in acked_at_kill:
        last_before_kill[a.partition] = max(last_before_kill.get(a.partition, -1), a.offset)
    after_restart = [a for a in acks if a.offset > last_before_kill.get(a.partition, -1)]
    assert len(after_restart) >= 1000, "the producer did not carry on after the restart"

    consumed = consume_all(tierd.bootstrap, topic, partitions)
    by_offset = {p: {r.offset: r.value for r in consumed[p]} for p in range(partitions)}
    with raw(tierd) as client:
        for p in range(partitions):
            batches, high_watermark = read_batches(client, topic, p)
            assert all(batch_crc_ok(b) for b in batches), f"corrupt batch served in {topic}-{p}"
            assert sorted(by_offset[p]) == list(range(high_watermark)), f"gap in {topic}-{p}"
            # Unacknowledged retries may repeat a message; nothing else may appear.
            for value in by_offset[p].values():
                assert value is not None and value == producer_value(int(value[1:9])), value[:20]
    lost = [a for a in acks if by_offset[a.partition].get(a.offset) != a.value]
    assert not lost, f"{len(lost)} acknowledged messages missing or altered, e.g. {lost[:3]}"


TORN_TAILS = ("garbage", "truncated-mid-batch", "bad-crc-batch", "zero-fill")


@pytest.mark.parametrize("damage", TORN_TAILS)
def test_torn_tail_is_cut_at_the_last_whole_batch(tierd: TierdProc, topic: str, damage: str) -> None:
    create_topic(tierd.bootstrap, topic, 1, configs={"segment.bytes": str(SEGMENT_BYTES)})
    with raw(tierd) as client:
        for _ in range(40):
            produce_raw(
                client,
                topic,
                0,
                build_batch([(b"k%d" % j, os.urandom(200)) for j in range(5)], timestamp=now_ms()),
            )
        stored, end = read_batches(client, topic, 0)
    assert len(stored) == 40 and end == 200
    tierd.kill()

    segments = sorted(partition_dir(tierd, topic, 0).glob("*.log"))
    assert len(segments) >= 3, segments
    last = segments[-1]
    keep = len(stored)
    with last.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if damage == "garbage":
            f.write(os.urandom(1000))
        elif damage == "truncated-mid-batch":
            f.truncate(size - len(stored[-1]) // 2)
            keep -= 1
        elif damage == "bad-crc-batch":
            bogus = bytearray(stored[-1])
            bogus[:8] = (end).to_bytes(8, "big")  # follows on, as a real next batch would
            bogus[-1] ^= 0xFF
            f.write(bytes(bogus))
        else:
            f.write(bytes(4096))
    tierd.start()

    with raw(tierd) as client:
        served, new_end = read_batches(client, topic, 0)
        assert served == stored[:keep]
        expected_end = batch_offsets(stored[keep - 1])[1] + 1
        assert new_end == expected_end
        assert list_offsets(client, topic, {0: LATEST}) == {0: expected_end}
        fresh = build_batch([(b"after", b"the crash")], timestamp=now_ms())
        assert produce_raw(client, topic, 0, fresh) == expected_end
        served, _ = read_batches(client, topic, 0)
    assert served[:keep] == stored[:keep] and len(served) == keep + 1
    assert same_batch(served[-1], fresh, expected_end)
    consumed = consume_all(tierd.bootstrap, topic, 1)
    assert [r.offset for r in consumed[0]] == list(range(expected_end + 1))


def _remove_indexes_and_checkpoints(data_dir: Path) -> list[str]:
    doomed = [
        p
        for p in data_dir.rglob("*")
        if p.is_file()
        and (p.suffix in (".index", ".timeindex", ".snapshot") or p.name.endswith("checkpoint"))
    ]
    for p in doomed:
        p.unlink()
    return sorted({p.name if p.parent == data_dir else f"*/{p.suffix or p.name}" for p in doomed})


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_deleted_indexes_and_checkpoints_are_rebuilt(tierd: TierdProc, topic: str, stop: str) -> None:
    partitions, batches = 2, 60
    create_topic(
        tierd.bootstrap,
        topic,
        partitions,
        configs={"segment.bytes": str(SEGMENT_BYTES), "index.interval.bytes": str(INDEX_INTERVAL_BYTES)},
    )
    t0 = now_ms() - 3_600_000
    # Batch i holds 3 records stamped t0 + i*1000 + {0, 100, 200} ms.
    with raw(tierd) as client:
        for p in range(partitions):
            for i in range(batches):
                stamps = [t0 + i * 1000 + j * 100 for j in range(3)]
                produce_raw(
                    client,
                    topic,
                    p,
                    build_batch([(None, os.urandom(150)) for _ in stamps], timestamps=stamps),
                )
        before = {p: read_batches(client, topic, p) for p in range(partitions)}
    queries = {
        t0 - 5: 0,
        t0 + 50: 1,
        t0 + 150: 2,
        t0 + 250: 3,
        t0 + 31_000: 93,
        t0 + 37_100: 112,
        t0 + (batches - 1) * 1000 + 200: batches * 3 - 1,
        t0 + batches * 1000: -1,
    }

    def answers(client: RawClient) -> dict[int, dict[int, int]]:
        return {
            ts: list_offsets(client, topic, {p: ts for p in range(partitions)})
            for ts in [*queries, EARLIEST, LATEST]
        }

    with raw(tierd) as client:
        expected = {ts: {p: off for p in range(partitions)} for ts, off in queries.items()}
        expected[EARLIEST] = {p: 0 for p in range(partitions)}
        expected[LATEST] = {p: batches * 3 for p in range(partitions)}
        assert answers(client) == expected  # the broker was right before the crash

    if stop == "sigterm":
        assert tierd.stop() == 0
    else:
        tierd.kill()
    removed = _remove_indexes_and_checkpoints(tierd.data_dir)
    assert any(name.endswith(".index") for name in removed), removed
    assert any(name.endswith(".timeindex") for name in removed), removed
    assert any("checkpoint" in name for name in removed), removed
    tierd.start()

    with raw(tierd) as client:
        assert {p: read_batches(client, topic, p) for p in range(partitions)} == before
        assert answers(client) == expected
    consumed = consume_all(tierd.bootstrap, topic, partitions)
    assert all(len(consumed[p]) == batches * 3 for p in range(partitions))
