"""Process, wire and disk helpers for the robustness system tests.

Shared by test_bad_input.py, test_fuzz.py and test_crash_recovery.py:

* `TierdProc` - the harness's `TierdBroker` plus `--override` arguments
  (the metrics endpoint always on an ephemeral port), the metrics URL taken
  from the broker's startup line, and its resident memory.
* `start_tierd` - build, register (so conftest attaches its log to failure
  reports), start, and stop at teardown.
* `RawClient` - one blocking socket speaking framed Kafka requests built
  with kafka-python's protocol classes, plus raw bytes for malformed input.
* request builders, record-batch splitting with an independent CRC-32C
  check, a Prometheus text scraper and `HealthyClient`, a kafka-python
  producer/consumer pair that proves the broker still serves real clients.
* `produce_until_stopped` - a confluent-kafka producer run as its own
  process (`PRODUCER_MAIN`) that logs every delivery report, and
  `consume_all`, which reads topics back with librdkafka's CRC check on.

Concurrency: not thread-safe; one test thread drives each object.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from prometheus_client.parser import text_string_to_metric_families

from system_tests.harness import STARTUP_TIMEOUT_S, TierdBroker

# The broker prints this once it listens (see broker/app.py).
STARTUP_LINE = re.compile(r"tierd listening on (\S+) \(metrics: (\S+)\)")

# How long the startup line may lag the broker answering ApiVersions: it is
# printed before the first connection is served, so this only covers pipe
# buffering on a loaded machine.
STARTUP_LINE_TIMEOUT_S = 5.0

# Default socket timeout of RawClient: generous for a loaded 2-core machine,
# short enough that a hung broker fails the test rather than the suite.
RAW_TIMEOUT_S = 10.0

# Produce timeout sent in requests (the broker has one replica, so it is moot).
PRODUCE_TIMEOUT_MS = 5_000

# Kafka record batch v2 layout used by `split_batches` / `batch_crc_ok`.
BATCH_OVERHEAD = 12  # baseOffset int64 + batchLength int32
BATCH_CRC_AT = 17
BATCH_CRC_FROM = 21

# Special ListOffsets timestamps.
LATEST = -1
EARLIEST = -2


class TierdProc(TierdBroker):
    """tierd started with `--override` arguments and the metrics endpoint on.

    `overrides` go on the command line (after the harness's listener and
    log.dirs overrides); `tierd.metrics.port=0` is always added so every
    broker gets a free metrics port, announced on its startup line.
    """

    def __init__(
        self, workdir: Path, overrides: Mapping[str, str] | None = None, name: str = "tierd",
        port: int | None = None,
    ) -> None:
        if port is None:
            super().__init__(workdir, name=name)
        else:
            super().__init__(workdir, port, name=name)
        self.overrides = {"tierd.metrics.port": "0", **dict(overrides or {})}
        self._metrics_url = ""

    def command(self) -> list[str]:
        argv = super().command()
        for key, value in self.overrides.items():
            argv += ["--override", f"{key}={value}"]
        return argv

    def startup_line(self) -> re.Match[str]:
        """The startup line of the current run (the log spans restarts)."""
        deadline = time.monotonic() + STARTUP_LINE_TIMEOUT_S
        while True:
            text = self.log_tail(limit=1 << 30)
            run = text[text.rfind("===== start #") :]
            found = STARTUP_LINE.search(run)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no startup line in {self.log_path}:\n{run[-4000:]}")
            time.sleep(0.05)

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self._metrics_url = ""  # each run announces its own port
        super().start(timeout_s)

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint announced by the current run."""
        if not self._metrics_url:
            self._metrics_url = self.startup_line().group(2)
        return self._metrics_url

    def rss_bytes(self) -> int:
        """VmRSS of the broker process, from /proc."""
        assert self.pid is not None
        status = Path(f"/proc/{self.pid}/status").read_text()
        kb = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        assert kb is not None, status
        return int(kb.group(1)) * 1024

    def log_text(self, start: int = 0) -> str:
        """Everything the broker logged from byte `start` on."""
        return self.log_tail(start, limit=1 << 30)


def start_tierd(
    request: pytest.FixtureRequest,
    workdir: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    name: str = "tierd",
    port: int | None = None,
) -> TierdProc:
    """Start a private tierd, stopped (SIGTERM, then SIGKILL) when `request` ends.

    The broker joins conftest's registry, so a failing test shows its log.
    ``port``: its PLAINTEXT port (`bootstrap`), when ``overrides`` set
    ``listeners`` themselves and must name it.
    """
    broker = TierdProc(workdir, overrides, name=name, port=port)
    _register(request, broker)
    request.addfinalizer(broker.close)
    broker.start()
    return broker


def _register(request: pytest.FixtureRequest, broker: TierdBroker) -> None:
    from system_tests.conftest import REGISTRY_KEY

    request.config.stash[REGISTRY_KEY].add(broker)


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; return that.

    Raises:
        AssertionError: still falsy after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


# ---------------------------------------------------------------------------
# Raw wire protocol.


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    """Read exactly `count` bytes or raise EOFError."""
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise EOFError(f"connection closed after {len(chunks)} of {count} bytes")
        chunks += chunk
    return bytes(chunks)


def encode_request(
    req: Any, version: int, correlation_id: int, client_id: str = "tierd-system-tests"
) -> bytes:
    """`req` framed with its size and a request header, as a client sends it."""
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(version=version, header=True, framed=True))


def raw_header(
    api_key: int, api_version: int, correlation_id: int, client_id: bytes = b"tierd-system-tests"
) -> bytes:
    """A v1 request header for any api key/version (kafka-python cannot encode unknown ones)."""
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class RawClient:
    """A blocking connection that sends whatever bytes a test wants."""

    def __init__(self, host: str, port: int, timeout_s: float = RAW_TIMEOUT_S) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def local_address(self) -> str:
        """host:port of our end, as the broker logs its peer."""
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        """The next response frame (without its size)."""
        (size,) = struct.unpack(">i", recv_exactly(self.sock, 4))
        return recv_exactly(self.sock, size)

    def request(self, req: Any, version: int, response_cls: Any) -> Any:
        """Send `req` at `version` and decode the answer with `response_cls`."""
        correlation_id = self.next_correlation_id()
        self.send_raw(encode_request(req, version, correlation_id))
        payload = self.recv_frame()
        response = response_cls.decode(payload, version=version, header=True)
        assert response.header.correlation_id == correlation_id
        return response

    def wait_closed(self, timeout_s: float) -> tuple[bool, bytes]:
        """Read until the broker closes the connection or `timeout_s` passes.

        Returns:
            (closed, bytes received before the close or the timeout).
        """
        received = bytearray()
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False, bytes(received)
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False, bytes(received)
            except ConnectionResetError:
                return True, bytes(received)
            if not chunk:
                return True, bytes(received)
            received += chunk

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------
# Request builders (kafka-python's schema classes).


def produce_request(
    topic: str, partition: int, records: bytes | None, acks: int = -1, version: int = 9
) -> Any:
    topic_cls = ProduceRequest.TopicProduceData
    return ProduceRequest[version](
        transactional_id=None,
        acks=acks,
        timeout_ms=PRODUCE_TIMEOUT_MS,
        topic_data=[
            topic_cls(
                name=topic, partition_data=[topic_cls.PartitionProduceData(index=partition, records=records)]
            )
        ],
    )


def fetch_request(
    wanted: Mapping[tuple[str, int], int],
    version: int = 11,
    max_bytes: int = 64 * 1024 * 1024,
    max_wait_ms: int = 0,
) -> Any:
    """Fetch (v4-v12, topics by name) of {(topic, partition): offset}."""
    topic_cls = FetchRequest.FetchTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in wanted.items():
        by_topic.setdefault(topic, []).append(
            topic_cls.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=max_bytes,
            )
        )
    return FetchRequest[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[topic_cls(topic=t, partitions=ps) for t, ps in by_topic.items()],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets_request(topic: str, partitions: Mapping[int, int], version: int = 7) -> Any:
    """ListOffsets of {partition: timestamp} (LATEST / EARLIEST / a time in ms)."""
    topic_cls = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest[version](
        replica_id=-1,
        isolation_level=0,
        topics=[
            topic_cls(
                name=topic,
                partitions=[
                    topic_cls.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=ts)
                    for p, ts in partitions.items()
                ],
            )
        ],
    )


def metadata_request(topics: list[str] | None, version: int = 9) -> Any:
    topic_cls = MetadataRequest.MetadataRequestTopic
    return MetadataRequest[version](
        topics=None if topics is None else [topic_cls(name=t) for t in topics],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def create_topics_request(topics: list[tuple[str, int, int, Mapping[str, str]]], version: int = 5) -> Any:
    """CreateTopics of (name, partitions, replication factor, configs)."""
    topic_cls = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest[version](
        topics=[
            topic_cls(
                name=n,
                num_partitions=p,
                replication_factor=rf,
                assignments=[],
                configs=[topic_cls.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()],
            )
            for n, p, rf, cfg in topics
        ],
        timeout_ms=10_000,
        validate_only=False,
    )


# ---------------------------------------------------------------------------
# Record batches, checked independently of the broker's own codec.


def split_batches(data: bytes) -> list[bytes]:
    """Whole v2 batches in fetched `data` (a partial trailing batch is dropped, as
    Kafka allows a fetch to end mid-batch)."""
    batches = []
    pos = 0
    while len(data) - pos >= BATCH_OVERHEAD:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + BATCH_OVERHEAD + length
        if end > len(data):
            break
        batches.append(data[pos:end])
        pos = end
    return batches


def batch_crc_ok(batch: bytes) -> bool:
    (stored,) = struct.unpack_from(">I", batch, BATCH_CRC_AT)
    return crc32c.crc32c(batch[BATCH_CRC_FROM:]) == stored


def batch_offsets(batch: bytes) -> tuple[int, int]:
    """(base offset, last offset) of a batch."""
    base = struct.unpack_from(">q", batch, 0)[0]
    delta = struct.unpack_from(">i", batch, 23)[0]
    return base, base + delta


def same_batch(stored: bytes, produced: bytes, base_offset: int) -> bool:
    """Whether `stored` is `produced` as the broker keeps it at `base_offset`.

    The broker rewrites only baseOffset and partitionLeaderEpoch, which lie
    before the CRC'd range; every other byte must be identical.
    """
    return (
        batch_offsets(stored)[0] == base_offset
        and stored[8:12] == produced[8:12]
        and stored[16:] == produced[16:]
    )


def read_batches(client: RawClient, topic: str, partition: int, version: int = 11) -> tuple[list[bytes], int]:
    """Every batch of a partition from offset 0, fetched in order; and the high watermark.

    Raises:
        AssertionError: a fetch error, or a batch not starting where the last ended.
    """
    batches: list[bytes] = []
    offset = 0
    while True:
        resp = client.request(fetch_request({(topic, partition): offset}, version), version, FetchResponse)
        [part] = resp.responses[0].partitions
        assert part.error_code == 0, f"{topic}-{partition}@{offset}: {part}"
        got = split_batches(bytes(part.records or b""))
        if not got:
            assert offset == part.high_watermark, (offset, part.high_watermark)
            return batches, part.high_watermark
        for b in got:
            base, last = batch_offsets(b)
            assert base == offset, f"{topic}-{partition}: batch at {base}, expected {offset}"
            batches.append(b)
            offset = last + 1


def list_offsets(
    client: RawClient, topic: str, partitions: Mapping[int, int], version: int = 7
) -> dict[int, int]:
    """ListOffsets: {partition: offset} for {partition: timestamp} (or LATEST / EARLIEST)."""
    resp = client.request(list_offsets_request(topic, partitions, version), version, ListOffsetsResponse)
    out = {}
    for part in resp.topics[0].partitions:
        assert part.error_code == 0, part
        out[part.partition_index] = part.offset
    return out


# ---------------------------------------------------------------------------
# Metrics.


@dataclass
class MetricsSnapshot:
    """Samples of one scrape: {(sample name, sorted label items): value}."""

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def total(self, name: str, **labels: str) -> float:
        """Sum of `name` samples whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, lbl), v in self.samples.items() if n == name and want <= set(lbl))


def scrape(url: str) -> MetricsSnapshot:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    snap = MetricsSnapshot()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            snap.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return snap


# ---------------------------------------------------------------------------
# A real client proving the broker still serves.


class HealthyClient:
    """kafka-python producer + consumer on their own connections and topic.

    `check()` produces one fresh value with acks=all and reads it back at the
    offset the broker returned; any failure (timeout, error, wrong bytes)
    raises, so a broker that stopped serving real clients fails the test.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.checks = 0
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            request_timeout_ms=10_000,
            max_block_ms=10_000,
            linger_ms=0,
            retries=0,
        )
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            request_timeout_ms=15_000,
            fetch_max_wait_ms=100,
            consumer_timeout_ms=10_000,
        )
        self.consumer.assign([self.tp])

    def check(self, timeout_s: float = 10.0) -> int:
        """Produce one value, consume it back; return its offset."""
        value = f"healthy-{self.checks}-{uuid.uuid4().hex}".encode()
        meta = self.producer.send(self.topic, value=value, partition=0).get(timeout=timeout_s)
        self.consumer.seek(self.tp, meta.offset)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in self.consumer.poll(timeout_ms=500).values():
                for rec in records:
                    if rec.offset == meta.offset:
                        assert rec.value == value, (rec.value, value)
                        self.checks += 1
                        return meta.offset
        raise AssertionError(f"healthy client: offset {meta.offset} not consumed in {timeout_s}s")

    def close(self) -> None:
        self.producer.close(timeout=5)
        self.consumer.close()


# ---------------------------------------------------------------------------
# A producer in its own process, and reading a topic back with librdkafka.

# Run with: python -c PRODUCER_MAIN <bootstrap> <topic> <partitions> <ack file> <stop file>
PRODUCER_MAIN = "from system_tests._proc import produce_until_stopped; produce_until_stopped()"

# The continuous producer paces itself to about this many messages a second
# (a burst of PRODUCER_BURST, then a short sleep), so a few seconds of
# produce stay cheap to verify.
PRODUCER_BURST = 20
PRODUCER_PAUSE_S = 0.005


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int
    value: bytes


def producer_value(seq: int) -> bytes:
    """Message `seq` of the continuous producer: unique, printable, varied in size."""
    return f"m{seq:08d}-".encode() + b"x" * (seq * 37 % 300)


def produce_until_stopped() -> None:
    """confluent-kafka producer, acks=all, until the stop file appears.

    Every delivery report is appended to the ack file as a line
    ``ok <partition> <offset> <value>`` or ``err <partition> - <value> <error>``;
    at the end ``end <produced> <undelivered>``. Retries are effectively
    unbounded so the producer rides out a broker restart.
    """
    import os
    import sys

    from confluent_kafka import Producer

    bootstrap, topic, partitions, ack_path, stop_path = sys.argv[1:6]
    with open(ack_path, "w", buffering=1) as acks:

        def on_delivery(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            if err is None:
                acks.write(f"ok {msg.partition()} {msg.offset()} {value}\n")
            else:
                acks.write(f"err {msg.partition()} - {value} {err.str()!r}\n")

        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "linger.ms": 2,
                "message.send.max.retries": 10_000_000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "message.timeout.ms": 120_000,
            }
        )
        seq = 0
        while not os.path.exists(stop_path):
            try:
                producer.produce(
                    topic, value=producer_value(seq), partition=seq % int(partitions), on_delivery=on_delivery
                )
            except BufferError:
                producer.poll(0.05)
                continue
            seq += 1
            producer.poll(0)
            if seq % PRODUCER_BURST == 0:
                time.sleep(PRODUCER_PAUSE_S)
        undelivered = producer.flush(120)
        acks.write(f"end {seq} {undelivered}\n")


def read_acks(path: Path) -> tuple[list[Ack], list[str], str | None]:
    """(acknowledged messages, failure lines, the end line if the producer finished)."""
    acked, failed, end = [], [], None
    # Only whole lines: the producer may be half-way through writing the last one.
    for line in path.read_text().split("\n")[:-1]:
        kind, _, rest = line.partition(" ")
        if kind == "ok":
            partition, offset, value = rest.split(" ", 2)
            acked.append(Ack(int(partition), int(offset), value.encode()))
        elif kind == "err":
            failed.append(rest)
        elif kind == "end":
            end = rest
    return acked, failed, end


@dataclass(frozen=True)
class Consumed:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def consume_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> dict[int, list[Consumed]]:
    """Every record of every partition from offset 0 to the end, with librdkafka
    checking each batch's CRC (check.crcs). Any consumer error fails."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as Tp

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "check.crcs": True,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    out: dict[int, list[Consumed]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        consumer.assign([Tp(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"not at the end of {topic} after {timeout_s}s"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out[msg.partition()].append(
                Consumed(
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    tuple((k, bytes(v)) for k, v in (msg.headers() or [])),
                    msg.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return out
