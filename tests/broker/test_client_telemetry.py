"""broker.client_telemetry: KIP-714 subscription and push rules, expiry, export."""

from __future__ import annotations

import gzip
import uuid

import lz4.frame
import pytest
import zstandard
from prometheus_client import CollectorRegistry

from broker import client_telemetry as ct
from broker.client_telemetry import ClientTelemetry, Subscription, decode_push
from protocol.errors import ErrorCode
from protocol.otlp import DataPoint, MetricsPayload, OtlpError

INTERVAL = 1000
SUB = Subscription(("org.apache.kafka.producer.",), INTERVAL)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def telemetry(sub: Subscription = SUB, max_bytes: int = 100,
              registry: CollectorRegistry | None = None) -> tuple[ClientTelemetry, Clock]:
    clock = Clock()
    return ClientTelemetry(sub, max_bytes, registry, clock), clock


def subscribe(t: ClientTelemetry) -> tuple[uuid.UUID, int]:
    answer = t.get_subscription(None, "c")
    assert answer.error == ErrorCode.NONE and answer.instance_id is not None
    return answer.instance_id, answer.subscription_id


def push(t: ClientTelemetry, inst: uuid.UUID | None, sub: int, terminating: bool = False,
         compression: int = 0, size: int = 10) -> ErrorCode:
    return t.check_push(inst, "c", sub, terminating, compression, size)


def payload(*values: float) -> MetricsPayload:
    return MetricsPayload((("client_id", "from-resource"),), tuple(
        DataPoint(f"m{i}", "gauge", (("b", "2"), ("a", "1")), v) for i, v in enumerate(values)))


def test_requested_metrics() -> None:
    assert Subscription((), 5).requested_metrics() == []
    assert Subscription(("*",), 5).requested_metrics() == [""]
    assert Subscription(("a.", "b."), 5).requested_metrics() == ["a.", "b."]
    assert ct.subscription_from_config([" a. ", ""], 7) == Subscription(("a.",), 7)


def test_new_client_gets_an_id_and_an_id_bound_subscription() -> None:
    t, _ = telemetry()
    a, sub_a = subscribe(t)
    b, sub_b = subscribe(t)
    assert a != b and a.int != 0
    assert sub_a == SUB.subscription_id(a) and sub_b == SUB.subscription_id(b)
    assert -(1 << 31) <= sub_a < 1 << 31
    # Another configuration, another id: a push to a broker configured differently fails.
    assert Subscription(("x.",), INTERVAL).subscription_id(a) != sub_a
    assert Subscription(SUB.prefixes, 2 * INTERVAL).subscription_id(a) != sub_a


def test_subscription_asked_again_within_the_interval_is_throttled() -> None:
    t, clock = telemetry()
    inst, _ = subscribe(t)
    assert t.get_subscription(inst, "c").error == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += INTERVAL
    assert t.get_subscription(inst, "c").error == ErrorCode.NONE


def test_push_timing() -> None:
    t, clock = telemetry()
    inst, sub = subscribe(t)
    assert push(t, inst, sub) == ErrorCode.NONE  # at once after the subscription
    assert push(t, inst, sub) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += INTERVAL - 1
    assert push(t, inst, sub) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.now += 1
    assert push(t, inst, sub) == ErrorCode.NONE
    # A terminating push is taken early; nothing is taken after it.
    assert push(t, inst, sub, terminating=True) == ErrorCode.NONE
    clock.now += INTERVAL
    assert push(t, inst, sub) == ErrorCode.INVALID_REQUEST


def test_push_errors_in_kafkas_order() -> None:
    t, _ = telemetry(max_bytes=100)
    assert push(t, None, 0) == ErrorCode.INVALID_REQUEST
    inst, sub = subscribe(t)
    assert push(t, inst, sub + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    inst, sub = subscribe(t)
    assert push(t, inst, sub, compression=5) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    inst, sub = subscribe(t)
    assert push(t, inst, sub, size=101) == ErrorCode.TELEMETRY_TOO_LARGE
    inst, sub = subscribe(t)
    assert push(t, inst, sub, size=100) == ErrorCode.NONE


def test_push_for_an_instance_this_broker_never_saw_is_taken() -> None:
    """A client moving to another broker pushes there with its id (Kafka creates the instance)."""
    t, _ = telemetry()
    inst = uuid.uuid4()
    assert push(t, inst, SUB.subscription_id(inst)) == ErrorCode.NONE


def test_export_latest_values_and_expiry() -> None:
    registry = CollectorRegistry()
    t, clock = telemetry(registry=registry)
    inst, sub = subscribe(t)
    assert push(t, inst, sub) == ErrorCode.NONE
    t.record(inst, payload(1.0, 2.0))
    t.record(inst, payload(5.0))  # replaces the previous push's values
    t.snapshot()
    assert registry.get_sample_value("tierd_client_metric", {
        "client_instance_id": str(inst), "client_id": "from-resource", "name": "m0",
        "attributes": "a=1,b=2"}) == 5.0
    assert registry.get_sample_value("tierd_client_metric", {
        "client_instance_id": str(inst), "client_id": "from-resource", "name": "m1",
        "attributes": "a=1,b=2"}) is None
    clock.now += t.expiry_ms
    t.snapshot()
    assert t.instance(inst) is None
    assert t.snapshot_copy == []


def test_expiry_is_three_intervals_when_longer_than_a_minute() -> None:
    t, clock = telemetry(Subscription(("a",), 30_000))
    assert t.expiry_ms == 90_000
    inst, _ = subscribe(t)
    clock.now += 89_999
    t.expire(clock.now)
    assert t.instance(inst) is not None
    clock.now += 1
    t.expire(clock.now)
    assert t.instance(inst) is None


def test_series_cap(monkeypatch) -> None:
    monkeypatch.setattr(ct, "MAX_EXPORTED_SERIES", 3)
    t, clock = telemetry(registry=CollectorRegistry())
    a, sub_a = subscribe(t)
    b, sub_b = subscribe(t)
    t.record(a, payload(1, 2))
    t.record(b, payload(1, 2))  # one point over the cap
    assert t.dropped._value.get() == 1
    t.record(a, payload(1))  # a shrinks: room for b next time
    t.record(b, payload(1, 2))
    t.snapshot()
    assert len(t.snapshot_copy) == 3


def test_instance_cap_forgets_the_least_recently_seen(monkeypatch) -> None:
    monkeypatch.setattr(ct, "MAX_CLIENT_INSTANCES", 2)
    t, clock = telemetry()
    a, _ = subscribe(t)
    b, _ = subscribe(t)
    clock.now += INTERVAL
    t.get_subscription(a, "c")  # a is now the most recent
    c, _ = subscribe(t)
    assert t.instance(b) is None
    assert t.instance(a) is not None and t.instance(c) is not None


def test_decode_push_decompresses_within_a_bound(monkeypatch) -> None:
    raw = bytes.fromhex("0a00")  # one empty ResourceMetrics
    assert decode_push(ct.NONE, raw).points == ()
    assert decode_push(ct.GZIP, gzip.compress(raw)).points == ()
    assert decode_push(ct.LZ4, lz4.frame.compress(raw)).points == ()
    assert decode_push(ct.ZSTD, zstandard.ZstdCompressor().compress(raw)).points == ()
    for codec in (ct.GZIP, ct.LZ4, ct.ZSTD):
        with pytest.raises(OtlpError):
            decode_push(codec, b"not compressed")
    # A small payload expanding beyond the bound is refused, whatever the codec.
    monkeypatch.setattr(ct, "MAX_DECOMPRESSED_BYTES", 1000)
    bomb = b"\x0a\x00" * 1000
    for codec, packed in ((ct.GZIP, gzip.compress(bomb)), (ct.LZ4, lz4.frame.compress(bomb)),
                          (ct.ZSTD, zstandard.ZstdCompressor().compress(bomb))):
        assert len(packed) < 200
        with pytest.raises(OtlpError):
            decode_push(codec, packed)
    assert len(decode_push(ct.GZIP, gzip.compress(bomb[:1000])).points) == 0


def test_snappy_is_not_offered_nor_taken() -> None:
    """Snappy's decoder cannot bound its output: not offered, and a push using it is refused."""
    assert ct.SNAPPY not in ct.ACCEPTED_COMPRESSION
    t, _ = telemetry()
    inst, sub = subscribe(t)
    assert push(t, inst, sub, compression=ct.SNAPPY) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_new_subscription_changes_ids_and_lets_clients_ask_at_once() -> None:
    t, clock = telemetry()
    inst, sub = subscribe(t)
    assert push(t, inst, sub) == ErrorCode.NONE
    changed = Subscription(("org.apache.kafka.consumer.",), INTERVAL)
    t.set_subscription(changed)
    assert push(t, inst, sub) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    clock.now += 1
    answer = t.get_subscription(inst, "c")  # not throttled: the instance starts afresh
    assert answer.error == ErrorCode.NONE
    assert answer.subscription_id == changed.subscription_id(inst) != sub
    assert answer.requested == ["org.apache.kafka.consumer."]
    clock.now += 1
    assert push(t, inst, answer.subscription_id) == ErrorCode.NONE


def test_refused_codec_lets_the_client_ask_again_at_once() -> None:
    t, _ = telemetry()
    inst, sub = subscribe(t)
    assert push(t, inst, sub, compression=ct.SNAPPY) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert t.get_subscription(inst, "c").error == ErrorCode.NONE


def test_terminated_instance_stays_terminated() -> None:
    t, clock = telemetry()
    inst, sub = subscribe(t)
    assert push(t, inst, sub, terminating=True) == ErrorCode.NONE
    for _ in range(2):
        clock.now += INTERVAL
        assert push(t, inst, sub) == ErrorCode.INVALID_REQUEST
