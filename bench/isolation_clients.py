"""The isolation scenario's client processes: the probe producer and the
catch-up reader, each in a process of its own so that neither shares a GIL
with the other or with the benchmark that drives them (and so that the pinned
run can put them on the clients' core with everything else).

``python -m bench.isolation_clients probe --bootstrap H:P --topic T --out F``
sends one 1 KiB acks=all record every millisecond, one record a request, to
partition 0 of T until SIGTERM (a raw client: see ``probe``), then writes
one line per answered request, ``<wall-clock send time> <latency s>``, to F.
It prints ``ready`` once connected, before the first timed record.

``python -m bench.isolation_clients reader --bootstrap H:P --topic T
--min-seconds S --out F`` reads partition 0 of T from offset 0 to its end as
fast as librdkafka goes, again and again with a fresh consumer until S
seconds have passed (at least once), checking that every offset arrives once
and in order, and writes one JSON object a pass to F: start and end
(wall clock), records, value bytes and errors.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import uuid
from types import FrameType

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka.protocol.producer import ProduceResponse

from bench.kafka_util import consumer_config
from protocol import records
from system_tests._proc import encode_request, produce_request

PROBE_INTERVAL_S = 0.001
PROBE_SIZE = 1024
PRODUCE_VERSION = 9
READ_BATCH = 10_000
# As the throughput scenario: no client-side queue backoff or long-poll stall.
FETCH_QUEUE_BACKOFF_MS = 5
FETCH_WAIT_MAX_MS = 10
STALL_S = 30.0
READER_NICENESS = 19


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


def probe(bootstrap: str, topic: str, out: str) -> int:
    """Send until SIGTERM; write the samples; exit 1 on any error answer.

    A raw Kafka client on one socket, one thread: every millisecond a
    ProduceRequest v9 (acks=all) carrying one 1 KiB record, sent on schedule
    whether or not earlier answers have come (Kafka answers a connection's
    requests in order), and each answer's latency taken when it is read, with
    ``select`` waiting for whichever comes first. So the figures are the
    broker's: no client library's batching or wake-up timers are in them (a
    librdkafka probe added whole milliseconds of its own at p99), and a slow
    answer never delays the sends behind it (no coordinated omission).
    """
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    batch = records.build_batch([(None, bytes(PROBE_SIZE))], timestamp=int(time.time() * 1000))
    template = bytearray(encode_request(produce_request(topic, 0, batch, acks=-1,
                                                        version=PRODUCE_VERSION),
                                        PRODUCE_VERSION, 0))
    sent: dict[int, tuple[float, float]] = {}  # correlation id -> (wall clock, perf counter)
    samples: list[tuple[float, float]] = []
    errors: list[str] = []
    pending = bytearray()
    correlation_id = 0

    def send() -> None:
        nonlocal correlation_id
        correlation_id += 1
        struct.pack_into(">i", template, 8, correlation_id)  # size, api key, version, id
        sent[correlation_id] = (time.time(), time.perf_counter())
        sock.sendall(template)

    def receive() -> None:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the broker closed the probe's connection")
        now = time.perf_counter()
        pending.extend(data)
        while len(pending) >= 4:
            (size,) = struct.unpack_from(">i", pending, 0)
            if len(pending) < 4 + size:
                return
            payload = bytes(pending[4:4 + size])
            del pending[:4 + size]
            answer = ProduceResponse[PRODUCE_VERSION].decode(payload, version=PRODUCE_VERSION,
                                                             header=True)
            wall, started = sent.pop(answer.header.correlation_id)
            codes = {p.error_code for t in answer.responses for p in t.partition_responses}
            if codes != {0}:
                errors.append(f"error codes {codes}")
            samples.append((wall, now - started))

    send()  # one first, so that the connection and the leader are warm
    while sent:
        receive()
    samples.clear()
    print("ready", flush=True)
    next_send = time.monotonic()
    while not stop.requested:
        now = time.monotonic()
        if now >= next_send:
            send()
            # On time from the start; a probe held up does not make up for the
            # records it missed in a burst.
            next_send = max(next_send + PROBE_INTERVAL_S, now - 0.01)
            continue
        readable, _, _ = select.select([sock], [], [], next_send - now)
        if readable:
            receive()
    deadline = time.monotonic() + 30
    while sent and time.monotonic() < deadline:
        if select.select([sock], [], [], 1.0)[0]:
            receive()
    sock.close()
    with open(out, "w") as f:
        f.writelines(f"{wall:.6f} {lat:.6f}\n" for wall, lat in samples)
    if sent or errors:
        print(f"probe: {len(sent)} unanswered, {len(errors)} errors (first: "
              f"{errors[0] if errors else '-'})", file=sys.stderr)
        return 1
    return 0


def read_pass(bootstrap: str, topic: str) -> dict[str, float]:
    """One pass over partition 0 from offset 0 to the end seen at its start."""
    consumer = Consumer(consumer_config(
        bootstrap, f"bench-isolation-{uuid.uuid4().hex[:8]}",
        **{"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
           "fetch.wait.max.ms": FETCH_WAIT_MAX_MS}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        started = time.time()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        expected, records, size, errors = low, 0, 0, 0
        last_progress = time.monotonic()
        while expected < high:
            batch = consumer.consume(num_messages=READ_BATCH, timeout=0.5)
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_S:
                raise RuntimeError(f"read of {topic} stalled at offset {expected} of {high}")
            for msg in batch:
                if msg.error() is not None:
                    errors += 1
                    continue
                if msg.offset() != expected:
                    raise RuntimeError(f"{topic}: offset {msg.offset()}, expected {expected}")
                expected += 1
                records += 1
                size += len(msg.value() or b"")
        ended = time.time()
    finally:
        consumer.close()
    return {"start": started, "end": ended, "records": records, "bytes": size,
            "errors": errors, "low": low, "high": high}


def reader(bootstrap: str, topic: str, min_seconds: float, out: str) -> int:
    """Passes until ``min_seconds`` have gone by; one JSON line a pass.

    The reader runs at the lowest priority: it keeps a core busy, and on the
    clients' core of the pinned run it would otherwise delay the probe, whose
    latency is to show the broker's doing (on a real deployment the two are
    different machines). It still gets every cycle the probe does not want.
    """
    os.nice(READER_NICENESS)
    started = time.monotonic()
    with open(out, "w") as f:
        while True:
            f.write(json.dumps(read_pass(bootstrap, topic)) + "\n")
            f.flush()
            if time.monotonic() - started >= min_seconds:
                return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.isolation_clients")
    parser.add_argument("role", choices=("probe", "reader"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--min-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.role == "probe":
        return probe(args.bootstrap, args.topic, args.out)
    return reader(args.bootstrap, args.topic, args.min_seconds, args.out)


if __name__ == "__main__":
    sys.exit(main())
