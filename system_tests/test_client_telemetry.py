"""KIP-714 client metrics: real clients subscribe and push, /metrics shows their values.

The broker's subscription comes from ``tierd.client.metrics.names`` and
``tierd.client.metrics.interval.ms``. A Java 4.3 consumer asks for it
(GetTelemetrySubscriptions) and pushes its metrics every interval
(PushTelemetry, OTLP, compressed with zstd, the first codec the broker
accepts); the broker exports them as ``tierd_client_metric``. The
error rules are driven over a raw socket. librdkafka's producer pushes
its own (fewer) metrics the same way.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from protocol.telemetry_apis import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from system_tests import javatool
from system_tests._proc import RawClient, TierdProc, scrape, start_tierd, wait_for

CONSUMER_PREFIX = "org.apache.kafka.consumer."
PRODUCER_PREFIX = "org.apache.kafka.producer."
SUBSCRIBED = {"tierd.client.metrics.names": CONSUMER_PREFIX,
              "tierd.client.metrics.interval.ms": "1000"}

UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118
INVALID_REQUEST = 42
INVALID_RECORD = 87
THROTTLING_QUOTA_EXCEEDED = 89
UNSUPPORTED_COMPRESSION_TYPE = 76


def client_series(broker: TierdProc, client_id: str) -> dict[str, float]:
    """{metric name (with attributes): value} the broker exports for ``client_id``."""
    snap = scrape(broker.metrics_url)
    out = {}
    for (name, labels), value in snap.samples.items():
        lbl = dict(labels)
        if name == "tierd_client_metric" and lbl.get("client_id") == client_id:
            out[f"{lbl['name']}{{{lbl['attributes']}}}"] = value
    return out


def produce(broker: TierdProc, topic: str, client_id: str, count: int) -> None:
    javatool.run(["produce", "--bootstrap", broker.bootstrap, "--topic", topic,
                  "--count", str(count), "--size", "100", "--prop", f"client.id={client_id}"])


def java_member(broker: TierdProc, topic: str, client_id: str, workdir: Path
                ) -> subprocess.Popen[bytes]:
    """A Java consumer group member polling ``topic`` until its stdin is closed."""
    with open(workdir / "member.err", "wb") as err:
        return subprocess.Popen(
            javatool.command(["group-member", "--bootstrap", broker.bootstrap, "--topic", topic,
                              "--group", f"g-{client_id}", "--prop", f"client.id={client_id}",
                              "--prop", "auto.offset.reset=earliest"]),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)


def stop(member: subprocess.Popen[bytes]) -> None:
    assert member.stdin is not None
    member.stdin.close()
    member.wait(60)


def test_java_consumer_metrics_exported(request: pytest.FixtureRequest, tmp_path: Path,
                                        topic: str) -> None:
    broker = start_tierd(request, tmp_path, SUBSCRIBED)
    produce(broker, topic, f"producer-{uuid.uuid4().hex[:8]}", 25)
    client_id = f"telemetry-{uuid.uuid4().hex[:8]}"
    consumed = f"{CONSUMER_PREFIX}fetch.manager.records.consumed.total{{}}"
    member = java_member(broker, topic, client_id, tmp_path)
    try:
        # Cumulative values (the broker asks for DeltaTemporality false):
        # the client-level total reaches what was produced.
        series = wait_for(lambda: (s := client_series(broker, client_id)).get(consumed) == 25
                          and s, 60, "the consumer's pushed records-consumed total")
    finally:
        stop(member)
    assert all(name.startswith(CONSUMER_PREFIX) for name in series), sorted(series)
    assert series[f"{CONSUMER_PREFIX}fetch.manager.records.consumed.total{{topic={topic}}}"] == 25
    snap = scrape(broker.metrics_url)
    instances = {dict(lbl)["client_instance_id"] for (name, lbl) in snap.samples
                 if name == "tierd_client_metric" and dict(lbl).get("client_id") == client_id}
    assert len(instances) == 1
    assert uuid.UUID(instances.pop()).int != 0
    assert snap.total("tierd_requests_total", api="PushTelemetry") >= 1


def test_subscription_set_on_a_running_broker_reaches_a_running_client(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    """No subscription at start: the Java client asks again every interval and
    starts pushing once ``tierd.client.metrics.names`` is set dynamically."""
    broker = start_tierd(request, tmp_path, {"tierd.client.metrics.interval.ms": "1000"})
    produce(broker, topic, f"producer-{uuid.uuid4().hex[:8]}", 3)
    client_id = f"late-{uuid.uuid4().hex[:8]}"
    member = java_member(broker, topic, client_id, tmp_path)
    try:
        wait_for(lambda: scrape(broker.metrics_url).total(
            "tierd_requests_total", api="GetTelemetrySubscriptions") >= 2, 60,
            "the client asking for a subscription again")
        assert client_series(broker, client_id) == {}
        javatool.run(["admin", "--bootstrap", broker.bootstrap, "broker-configs-alter",
                      "--default", "--set", f"tierd.client.metrics.names={CONSUMER_PREFIX}"])
        series = wait_for(lambda: client_series(broker, client_id), 60,
                          "the consumer's metrics after the subscription was set")
        assert all(name.startswith(CONSUMER_PREFIX) for name in series), sorted(series)
    finally:
        stop(member)


def test_librdkafka_producer_metrics_exported(request: pytest.FixtureRequest, tmp_path: Path,
                                              topic: str) -> None:
    """librdkafka (>= 2.5, KIP-714) subscribes and pushes too."""
    from confluent_kafka import Producer

    broker = start_tierd(request, tmp_path, {**SUBSCRIBED,
                                             "tierd.client.metrics.names": PRODUCER_PREFIX})
    client_id = f"rdkafka-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id})
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0

    def pushed() -> dict[str, float]:
        producer.poll(0.1)
        return client_series(broker, client_id)

    series = wait_for(pushed, 60, "librdkafka's pushed metrics on /metrics")
    assert all(name.startswith(PRODUCER_PREFIX) for name in series), sorted(series)
    # One broker connection at least (cumulative: librdkafka was asked for no deltas).
    assert series[f"{PRODUCER_PREFIX}connection.creation.total{{}}"] >= 1
    assert f"{PRODUCER_PREFIX}node.request.latency.avg{{node.id=0}}" in series
    producer.flush(10)


def test_no_subscription_pushes_nothing(request: pytest.FixtureRequest, tmp_path: Path,
                                        topic: str) -> None:
    broker = start_tierd(request, tmp_path)
    client_id = f"quiet-{uuid.uuid4().hex[:8]}"
    produce(broker, topic, client_id, 5)
    with RawClient(broker.host, broker.port) as raw:
        answer = raw.request(GetTelemetrySubscriptionsRequest[0](client_instance_id=None), 0,
                             GetTelemetrySubscriptionsResponse)
    assert answer.error_code == 0
    assert answer.requested_metrics == []
    assert client_series(broker, client_id) == {}


def _subscribe(raw: RawClient) -> GetTelemetrySubscriptionsResponse:
    answer = raw.request(GetTelemetrySubscriptionsRequest[0](client_instance_id=None), 0,
                         GetTelemetrySubscriptionsResponse)
    assert answer.error_code == 0, answer
    return answer


def _push(raw: RawClient, instance: uuid.UUID | None, subscription: int, *,
          terminating: bool = False, compression: int = 0, metrics: bytes = b"") -> int:
    req = PushTelemetryRequest[0](client_instance_id=instance, subscription_id=subscription,
                                  terminating=terminating, compression_type=compression,
                                  metrics=metrics)
    return int(raw.request(req, 0, PushTelemetryResponse).error_code)


@pytest.fixture
def subscribed_broker(request: pytest.FixtureRequest, tmp_path: Path) -> TierdProc:
    return start_tierd(request, tmp_path, {**SUBSCRIBED,
                                           "tierd.client.metrics.interval.ms": "60000",
                                           "telemetry.max.bytes": "64"})


def test_subscription_rules(subscribed_broker: TierdProc) -> None:
    with RawClient(subscribed_broker.host, subscribed_broker.port) as raw:
        answer = _subscribe(raw)
        instance = answer.client_instance_id
        assert instance is not None
        assert answer.requested_metrics == [CONSUMER_PREFIX]
        assert answer.push_interval_ms == 60000
        assert answer.telemetry_max_bytes == 64
        assert answer.delta_temporality is False  # cumulative values, as Prometheus wants
        assert list(answer.accepted_compression_types) == [4, 3, 1]  # zstd, lz4, gzip
        # Asking again within the interval is throttled.
        again = raw.request(GetTelemetrySubscriptionsRequest[0](client_instance_id=instance), 0,
                            GetTelemetrySubscriptionsResponse)
        assert again.error_code == THROTTLING_QUOTA_EXCEEDED
        sub = answer.subscription_id
        assert _push(raw, None, sub) == INVALID_REQUEST
        assert _push(raw, instance, sub + 1) == UNKNOWN_SUBSCRIPTION_ID
        # The first push after the subscription was spent by the one above.
        assert _push(raw, instance, sub) == THROTTLING_QUOTA_EXCEEDED


def test_push_errors(subscribed_broker: TierdProc) -> None:
    with RawClient(subscribed_broker.host, subscribed_broker.port) as raw:
        a = _subscribe(raw)
        assert _push(raw, a.client_instance_id, a.subscription_id,
                     compression=9) == UNSUPPORTED_COMPRESSION_TYPE
        b = _subscribe(raw)
        assert _push(raw, b.client_instance_id, b.subscription_id,
                     metrics=b"\x0a" * 65) == TELEMETRY_TOO_LARGE
        c = _subscribe(raw)
        # A length-delimited field claiming more bytes than there are.
        assert _push(raw, c.client_instance_id, c.subscription_id,
                     metrics=b"\x0a\x7f") == INVALID_RECORD
        d = _subscribe(raw)
        assert _push(raw, d.client_instance_id, d.subscription_id, terminating=True) == 0
        # Nothing is taken after a terminating push.
        assert _push(raw, d.client_instance_id, d.subscription_id,
                     terminating=True) == INVALID_REQUEST
