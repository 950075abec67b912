"""Bad input over real sockets: the documented answer, a log line, a metric, no crash.

One tierd process serves the module, started with auto topic creation off
and `socket.request.max.bytes` lowered to 1 MiB. Each test sends one kind of
bad input on a raw connection and checks:

* the protocol's answer - an error code in the response, or (for frames the
  broker cannot or must not understand) the connection closed with nothing
  sent back;
* the Prometheus counters `tierd_error_responses` / `tierd_protocol_errors`
  grew by exactly the expected amount;
* every connection the broker closed has a log line naming its peer;
* nothing was appended where the input was rejected;
* the broker is still running and a kafka-python client on its own
  connections still produces and consumes (`Watch.still_serving`).
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.consumer import FetchResponse, OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceResponse

from protocol.records import build_batch
from system_tests._proc import (
    LATEST,
    HealthyClient,
    RawClient,
    TierdProc,
    batch_crc_ok,
    create_topics_request,
    encode_request,
    fetch_request,
    frame,
    list_offsets,
    metadata_request,
    produce_request,
    raw_header,
    same_batch,
    scrape,
    split_batches,
    start_tierd,
    wait_for,
)
from system_tests.admin import create_topic

# socket.request.max.bytes for this module's broker: small, so a frame just
# above it is cheap to describe, and a frame exactly at it cheap to send.
MAX_REQUEST_BYTES = 1_048_576

# A broker that rejects a frame by its size must close within this time; it
# needs only the 4 size bytes, so anything slower means it waited for a body.
PROMPT_CLOSE_S = 2.0

# Kafka error codes (the numbers are the protocol; names as the broker's
# metrics label them).
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40

ERRORS = "tierd_error_responses_total"
PROTOCOL_ERRORS = "tierd_protocol_errors_total"

PRODUCE_VERSION = 9
FETCH_VERSION = 11


@pytest.fixture(scope="module")
def tierd(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TierdProc:
    return start_tierd(
        request,
        tmp_path_factory.mktemp("bad-input"),
        {
            "auto.create.topics.enable": "false",
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
        },
        name="tierd-bad-input",
    )


@pytest.fixture(scope="module")
def healthy(tierd: TierdProc) -> Iterator[HealthyClient]:
    create_topic(tierd.bootstrap, "healthy-bad-input")
    client = HealthyClient(tierd.bootstrap, "healthy-bad-input")
    client.check()
    yield client
    client.close()


class Watch:
    """Metrics and log position at the start of a test, and the checks after it."""

    def __init__(self, broker: TierdProc, healthy: HealthyClient) -> None:
        self.broker = broker
        self.healthy = healthy
        self.log_mark = broker.log_size()
        self.before = scrape(broker.metrics_url)

    def delta(self, name: str, **labels: str) -> float:
        return scrape(self.broker.metrics_url).total(name, **labels) - self.before.total(name, **labels)

    def assert_delta(self, expected: float, name: str, **labels: str) -> None:
        """The counter grew by exactly `expected`.

        The broker bumps it before it answers or closes, so one scrape should
        do; a short retry only covers a slow HTTP thread on a loaded machine.
        """
        deadline = time.monotonic() + 2.0
        while (got := self.delta(name, **labels)) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got == expected, f"{name}{labels} grew by {got}, expected {expected}"

    def assert_close_logged(self, peer: str, reason: str) -> None:
        """The broker logged closing the connection from `peer`, with `reason`."""
        pattern = re.compile(
            rf"closing connection.*(?=.*\bpeer={re.escape(peer)}\b)(?=.*\breason={reason}\b)"
        )

        def logged() -> bool:
            return any(pattern.search(line) for line in self.broker.log_text(self.log_mark).splitlines())

        wait_for(logged, 2.0, f"log line: closing connection peer={peer} reason={reason}")

    def still_serving(self) -> None:
        assert self.broker.is_running(), f"broker exited with {self.broker.returncode()}"
        self.healthy.check()


@pytest.fixture
def watch(tierd: TierdProc, healthy: HealthyClient) -> Watch:
    return Watch(tierd, healthy)


def raw(broker: TierdProc) -> RawClient:
    return RawClient(broker.host, broker.port)


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(
    client: RawClient, topic: str, partition: int, records: bytes | None, acks: int = -1
) -> tuple[int, int]:
    """(error code, base offset) of a one-partition produce."""
    resp = client.request(
        produce_request(topic, partition, records, acks, PRODUCE_VERSION), PRODUCE_VERSION, ProduceResponse
    )
    [topic_resp] = resp.responses
    [part] = topic_resp.partition_responses
    assert topic_resp.name == topic and part.index == partition
    return part.error_code, part.base_offset


def latest_offset(client: RawClient, topic: str, partition: int) -> int:
    return list_offsets(client, topic, {partition: LATEST})[partition]


def fetch_all(client: RawClient, topic: str, partition: int) -> bytes:
    resp = client.request(fetch_request({(topic, partition): 0}, FETCH_VERSION), FETCH_VERSION, FetchResponse)
    [part] = resp.responses[0].partitions
    assert part.error_code == 0, part
    return bytes(part.records or b"")


def topic_exists(client: RawClient, topic: str) -> bool:
    resp = client.request(metadata_request([topic]), 9, MetadataResponse)
    [meta] = resp.topics
    assert meta.error_code in (0, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION), meta
    return meta.error_code == 0


def batch(*values: bytes) -> bytes:
    return build_batch([(None, v) for v in values], timestamp=now_ms())


def batch_of_size(size: int) -> bytes:
    """A one-record batch of exactly `size` bytes (varint widths make this a search)."""
    value_len = size - len(batch(b""))
    while (got := len(batch(b"v" * value_len))) != size:
        value_len -= got - size
    return batch(b"v" * value_len)


# ---------------------------------------------------------------------------


def test_produce_to_unknown_topic_is_rejected_not_created(watch: Watch, topic: str) -> None:
    create_topic(watch.broker.bootstrap, topic)
    missing = f"{topic}-missing"
    with raw(watch.broker) as client:
        assert produce(client, missing, 0, batch(b"v")) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert produce(client, topic, 7, batch(b"v")) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert not topic_exists(client, missing)
        assert latest_offset(client, topic, 0) == 0
    watch.assert_delta(2, ERRORS, api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION")
    watch.still_serving()


def test_fetch_out_of_range_offset_spares_other_partitions(watch: Watch, topic: str) -> None:
    create_topic(watch.broker.bootstrap, topic, partitions=4)
    produced = {}
    with raw(watch.broker) as client:
        for p in range(4):
            produced[p] = batch(b"a%d" % p, b"b%d" % p, b"c%d" % p)
            assert produce(client, topic, p, produced[p]) == (0, 0)
        wanted = {(topic, 0): 1000, (topic, 1): 0, (topic, 2): 3, (topic, 3): -1}
        resp = client.request(fetch_request(wanted, FETCH_VERSION), FETCH_VERSION, FetchResponse)
    parts = {p.partition_index: p for t in resp.responses for p in t.partitions}
    assert sorted(parts) == [0, 1, 2, 3]
    assert parts[0].error_code == OFFSET_OUT_OF_RANGE
    assert parts[3].error_code == OFFSET_OUT_OF_RANGE
    # Partition 1 answered normally: the whole batch, as produced.
    assert parts[1].error_code == 0 and parts[1].high_watermark == 3
    [got] = split_batches(bytes(parts[1].records))
    assert batch_crc_ok(got) and same_batch(got, produced[1], base_offset=0)
    # Partition 2 at its end offset: no error, no data.
    assert parts[2].error_code == 0 and not parts[2].records
    watch.assert_delta(2, ERRORS, api="Fetch", error="OFFSET_OUT_OF_RANGE")
    watch.still_serving()


@pytest.mark.parametrize("size", [MAX_REQUEST_BYTES + 1, 2**31 - 1, -1], ids=["limit+1", "2GiB", "negative"])
def test_oversized_frame_closes_connection_without_reading_body(watch: Watch, size: int) -> None:
    rss_before = watch.broker.rss_bytes()
    with raw(watch.broker) as client:
        peer = client.local_address
        started = time.monotonic()
        client.send_raw(struct.pack(">i", size))  # the size only: no body follows
        closed, answer = client.wait_closed(PROMPT_CLOSE_S)
        elapsed = time.monotonic() - started
    assert closed, f"connection still open {PROMPT_CLOSE_S}s after a {size}-byte frame size"
    assert answer == b"", answer
    assert elapsed < PROMPT_CLOSE_S
    # Nothing near the announced size was allocated.
    assert watch.broker.rss_bytes() - rss_before < 32 * 1024 * 1024
    watch.assert_delta(1, PROTOCOL_ERRORS, reason="frame_too_large")
    watch.assert_close_logged(peer, "frame_too_large")
    watch.still_serving()


def test_frame_of_exactly_the_limit_is_served(watch: Watch, topic: str) -> None:
    """The bound is inclusive, as Kafka's: a request of socket.request.max.bytes is read."""
    create_topic(watch.broker.bootstrap, topic, configs={"max.message.bytes": "2000000"})
    value_len = MAX_REQUEST_BYTES - 200
    while True:
        records = build_batch([(None, b"x" * value_len)], timestamp=now_ms())
        wire = encode_request(produce_request(topic, 0, records, -1, PRODUCE_VERSION), PRODUCE_VERSION, 1)
        excess = len(wire) - 4 - MAX_REQUEST_BYTES
        if excess == 0:
            break
        value_len -= excess
    with raw(watch.broker) as client:
        client.send_raw(wire)
        resp = ProduceResponse.decode(client.recv_frame(), version=PRODUCE_VERSION, header=True)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    watch.still_serving()


@pytest.mark.parametrize(
    "flip_at", [-1, 17, 40, 65], ids=["last-record-byte", "crc-field", "base-timestamp", "first-record"]
)
def test_corrupt_crc_is_rejected_and_not_appended(watch: Watch, topic: str, flip_at: int) -> None:
    create_topic(watch.broker.bootstrap, topic)
    good = batch(b"first", b"second")
    with raw(watch.broker) as client:
        assert produce(client, topic, 0, good) == (0, 0)
        corrupt = bytearray(batch(b"corrupt-one", b"corrupt-two"))
        corrupt[flip_at] ^= 0x5A
        assert produce(client, topic, 0, bytes(corrupt)) == (CORRUPT_MESSAGE, -1)
        # A corrupt batch after a good one in the same record set: all or nothing.
        assert produce(client, topic, 0, good + bytes(corrupt)) == (CORRUPT_MESSAGE, -1)
        assert latest_offset(client, topic, 0) == 2
        stored = split_batches(fetch_all(client, topic, 0))
    assert len(stored) == 1 and batch_crc_ok(stored[0])
    watch.assert_delta(2, ERRORS, api="Produce", error="CORRUPT_MESSAGE")
    watch.still_serving()


def test_batch_above_max_message_bytes_is_too_large(watch: Watch, topic: str) -> None:
    limit = 4096
    create_topic(watch.broker.bootstrap, topic, configs={"max.message.bytes": str(limit)})
    with raw(watch.broker) as client:
        assert produce(client, topic, 0, batch(b"x" * 5000)) == (MESSAGE_TOO_LARGE, -1)
        # One byte over the limit is too large; the limit itself is allowed
        # (Kafka rejects only batches above max.message.bytes).
        assert produce(client, topic, 0, batch_of_size(limit + 1)) == (MESSAGE_TOO_LARGE, -1)
        assert produce(client, topic, 0, batch_of_size(limit)) == (0, 0)
        assert latest_offset(client, topic, 0) == 1
    watch.assert_delta(2, ERRORS, api="Produce", error="MESSAGE_TOO_LARGE")
    watch.still_serving()


def _advertised(broker: TierdProc) -> dict[int, tuple[int, int]]:
    with raw(broker) as client:
        resp = client.request(
            ApiVersionsRequest[3](client_software_name="tierd-tests", client_software_version="1"),
            3,
            ApiVersionsResponse,
        )
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


UNSUPPORTED = {
    "produce-v2": lambda adv, cid: encode_request(produce_request("t", 0, b"", -1, 2), 2, cid),
    "produce-above-max": lambda adv, cid: frame(raw_header(0, adv[0][1] + 1, cid) + b"\x00" * 32),
    "fetch-v99": lambda adv, cid: frame(raw_header(1, 99, cid) + b"\x00" * 32),
    "api-key-9999": lambda adv, cid: frame(raw_header(9999, 0, cid)),
    "api-key-negative": lambda adv, cid: frame(raw_header(-1, 0, cid)),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_api_or_version_closes_connection(watch: Watch, case: str) -> None:
    advertised = _advertised(watch.broker)
    with raw(watch.broker) as client:
        peer = client.local_address
        client.send_raw(UNSUPPORTED[case](advertised, 77))
        closed, answer = client.wait_closed(5.0)
    assert closed and answer == b"", (closed, answer)
    watch.assert_delta(1, PROTOCOL_ERRORS, reason="unsupported_version")
    watch.assert_close_logged(peer, "unsupported_version")
    watch.still_serving()


@pytest.mark.parametrize("version", [5, 127])
def test_api_versions_above_max_gets_v0_fallback(watch: Watch, version: int) -> None:
    advertised = _advertised(watch.broker)
    with raw(watch.broker) as client:
        client.send_raw(frame(raw_header(18, version, 4242) + b"\x00" * 8))
        payload = client.recv_frame()
        # v0 response: header v0 (correlation id), error_code, [api_key, min, max].
        correlation_id, error_code, count = struct.unpack_from(">ihi", payload)
        assert (correlation_id, error_code) == (4242, UNSUPPORTED_VERSION)
        assert len(payload) == 10 + 6 * count, "v0 layout: no throttle time or tagged fields"
        table = {k: (lo, hi) for k, lo, hi in struct.iter_unpack(">hhh", payload[10:])}
        assert table == advertised
        assert table[18][1] < version
        # The connection stays usable: the client retries with a version both know.
        resp = client.request(
            ApiVersionsRequest[table[18][1]](client_software_name="tierd-tests", client_software_version="1"),
            table[18][1],
            ApiVersionsResponse,
        )
        assert resp.error_code == 0
    watch.assert_delta(1, ERRORS, api="ApiVersions", error="UNSUPPORTED_VERSION")
    watch.still_serving()


def test_create_topics_validation_errors(watch: Watch, topic: str) -> None:
    create_topic(watch.broker.bootstrap, topic)
    cases = [
        ("bad/name", 1, 1, {}, INVALID_TOPIC_EXCEPTION),
        ("a" * 250, 1, 1, {}, INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, {}, INVALID_TOPIC_EXCEPTION),
        (topic, 1, 1, {}, TOPIC_ALREADY_EXISTS),
        (f"{topic}-p0", 0, 1, {}, INVALID_PARTITIONS),
        (f"{topic}-rf3", 1, 3, {}, INVALID_REPLICATION_FACTOR),
        (f"{topic}-key", 1, 1, {"no.such.config": "1"}, INVALID_CONFIG),
        (f"{topic}-value", 1, 1, {"retention.ms": "forever"}, INVALID_CONFIG),
        (f"{topic}-enum", 1, 1, {"cleanup.policy": "shred"}, INVALID_CONFIG),
        ("a" * 249, 1, 1, {}, 0),  # longest legal name, created alongside the failures
    ]
    with raw(watch.broker) as client:
        resp = client.request(create_topics_request([c[:4] for c in cases]), 5, CreateTopicsResponse)
        got = {r.name: r.error_code for r in resp.topics}
        assert got == {c[0]: c[4] for c in cases}
        for name, *_, code in cases:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                assert not topic_exists(client, name), name
        assert topic_exists(client, "a" * 249)
    for name, count in (
        ("INVALID_TOPIC_EXCEPTION", 3),
        ("TOPIC_ALREADY_EXISTS", 1),
        ("INVALID_PARTITIONS", 1),
        ("INVALID_REPLICATION_FACTOR", 1),
        ("INVALID_CONFIG", 3),
    ):
        watch.assert_delta(count, ERRORS, api="CreateTopics", error=name)
    watch.still_serving()


def test_invalid_acks_is_rejected(watch: Watch, topic: str) -> None:
    create_topic(watch.broker.bootstrap, topic)
    with raw(watch.broker) as client:
        assert produce(client, topic, 0, batch(b"v"), acks=2) == (INVALID_REQUIRED_ACKS, -1)
        assert produce(client, topic, 0, batch(b"v"), acks=-2) == (INVALID_REQUIRED_ACKS, -1)
        assert latest_offset(client, topic, 0) == 0
    watch.assert_delta(2, ERRORS, api="Produce", error="INVALID_REQUIRED_ACKS")
    watch.still_serving()


def _truncated_produce(cid: int) -> bytes:
    wire = encode_request(produce_request("t", 0, batch(b"value"), -1, PRODUCE_VERSION), PRODUCE_VERSION, cid)
    return frame(wire[4 : len(wire) // 2])


MALFORMED = {
    "truncated-body": _truncated_produce,
    "short-header": lambda cid: frame(b"\x00\x03\x00"),
    "client-id-overrun": lambda cid: frame(struct.pack(">hhih", 3, 9, cid, 1000) + b"abc"),
    "flexible-header-tag-overrun": lambda cid: frame(raw_header(3, 9, cid) + b"\x01\x00\x7f" + b"\x00" * 4),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_undecodable_request_closes_connection(watch: Watch, case: str) -> None:
    with raw(watch.broker) as client:
        peer = client.local_address
        client.send_raw(MALFORMED[case](5))
        closed, answer = client.wait_closed(5.0)
    assert closed and answer == b"", (closed, answer)
    watch.assert_delta(1, PROTOCOL_ERRORS, reason="invalid_request")
    watch.assert_close_logged(peer, "invalid_request")
    watch.still_serving()


def test_requests_pipelined_before_a_bad_frame_are_still_answered(watch: Watch, topic: str) -> None:
    """Kafka serves a connection's requests one at a time, answering each before
    it reads the next, so a request pipelined ahead of a bad frame is answered
    before the connection is closed. A Produce that was appended must never
    lose its response (the client would retry and duplicate it)."""
    create_topic(watch.broker.bootstrap, topic)
    good = encode_request(produce_request(topic, 0, batch(b"v"), -1, PRODUCE_VERSION), PRODUCE_VERSION, 1)
    with raw(watch.broker) as client:
        peer = client.local_address
        client.send_raw(good + frame(raw_header(9999, 0, 2)))
        closed, answer = client.wait_closed(5.0)
    assert closed
    with raw(watch.broker) as client:
        assert latest_offset(client, topic, 0) == 1, "the Produce was not appended"
    assert len(answer) >= 4, "the Produce was appended but its response was dropped"
    (size,) = struct.unpack_from(">i", answer)
    assert len(answer) == 4 + size, "only the Produce may be answered"
    resp = ProduceResponse.decode(answer[4:], version=PRODUCE_VERSION, header=True)
    part = resp.responses[0].partition_responses[0]
    assert (resp.header.correlation_id, part.error_code, part.base_offset) == (1, 0, 0)
    watch.assert_close_logged(peer, "unsupported_version")
    watch.still_serving()


# Requests whose non-nullable array is sent as null (length -1). Kafka's
# generated parsers reject that ("non-nullable field ... was serialized as
# null"): an invalid request, so the connection is closed - not a handler crash.
NULL_ARRAYS = {
    "listoffsets-topics": lambda cid: frame(raw_header(2, 2, cid) + struct.pack(">ibi", -1, 0, -1)),
    "produce-partition-data": lambda cid: frame(
        raw_header(0, 3, cid)
        + struct.pack(">hhii", -1, -1, 1000, 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">i", -1)
    ),
    "fetch-topics": lambda cid: frame(raw_header(1, 4, cid) + struct.pack(">iiiibi", -1, 0, 0, 1000, 0, -1)),
}


@pytest.mark.parametrize("case", sorted(NULL_ARRAYS))
def test_null_for_non_nullable_array_is_an_invalid_request(watch: Watch, case: str) -> None:
    with raw(watch.broker) as client:
        peer = client.local_address
        client.send_raw(NULL_ARRAYS[case](9))
        closed, answer = client.wait_closed(5.0)
    assert closed and answer == b"", (closed, answer)
    assert watch.delta(PROTOCOL_ERRORS, reason="handler_error") == 0, (
        "a handler raised on the null array (see the broker log's traceback)"
    )
    watch.assert_delta(1, PROTOCOL_ERRORS, reason="invalid_request")
    watch.assert_close_logged(peer, "invalid_request")
    watch.still_serving()


def test_offset_commit_with_maximal_retention_is_answered(watch: Watch, topic: str) -> None:
    """OffsetCommit v2-v4 carry retention_time_ms, and Long.MAX ("keep forever")
    is a legal value. Kafka computes the expiry in wrapping long arithmetic and
    commits; the broker must answer, not raise while encoding the expiry."""
    create_topic(watch.broker.bootstrap, topic)
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest[2](
        group_id=f"{topic}-group",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=2**63 - 1,
        topics=[
            topic_cls(
                name=topic,
                partitions=[
                    topic_cls.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0, committed_metadata=""
                    )
                ],
            )
        ],
    )
    with raw(watch.broker) as client:
        try:
            resp = client.request(req, 2, OffsetCommitResponse)
        except EOFError:
            pytest.fail("the broker closed the connection instead of answering (see its log)")
    assert resp.topics[0].partitions[0].error_code == 0, resp
    assert watch.delta(PROTOCOL_ERRORS, reason="handler_error") == 0
    watch.still_serving()


def test_concurrent_init_producer_id_requests_are_all_answered(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A fleet of idempotent producers starting at once on a fresh broker: each
    InitProducerId is answered with its own producer id (found by test_fuzz,
    whose workers send InitProducerId concurrently)."""
    broker = start_tierd(request, tmp_path / "pids", name="tierd-pids")
    clients = [raw(broker) for _ in range(16)]
    answers: list[tuple[int, int] | None] = []
    try:
        for i, client in enumerate(clients):
            req = InitProducerIdRequest[4](
                transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            )
            client.send_raw(encode_request(req, 4, i + 1))
        for client in clients:
            try:
                resp = InitProducerIdResponse.decode(client.recv_frame(), version=4, header=True)
                answers.append((resp.error_code, resp.producer_id))
            except EOFError:
                answers.append(None)
    finally:
        for client in clients:
            client.close()
    closed = answers.count(None)
    assert closed == 0, f"{closed} of {len(clients)} connections closed instead of answered"
    assert all(code == 0 for code, _ in answers), answers
    assert len({pid for _, pid in answers}) == len(clients), answers
