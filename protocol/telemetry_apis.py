"""KIP-714 client telemetry messages kafka-python lacks: GetTelemetrySubscriptions
(API key 71) and PushTelemetry (API key 72).

The layouts follow Kafka's message schemas of the same names, written as
Python data and built with the same schema machinery as ``broker_apis``.
Both are flexible from v0, the only version there is:

- GetTelemetrySubscriptions v0: a client sends its instance id (zero on its
  first request: the broker assigns one) and learns what to push: the
  subscription id, accepted compression types, push interval, largest
  payload, delta or cumulative temporality, and the metric name prefixes.
- PushTelemetry v0: the client pushes its metrics as an OTLP ``MetricsData``
  protobuf (``protocol.otlp``), possibly compressed, naming the
  subscription id it pushes for; ``Terminating`` marks its last push.
"""

from __future__ import annotations

from typing import Any

from protocol.broker_apis import _f, _message

GET_TELEMETRY_SUBSCRIPTIONS_KEY = 71
PUSH_TELEMETRY_KEY = 72

GetTelemetrySubscriptionsRequest: Any = _message(
    "GetTelemetrySubscriptionsRequest", GET_TELEMETRY_SUBSCRIPTIONS_KEY, "request", "0", "0+", [
        # All zeros (decoded as None) on the client's first request.
        _f("ClientInstanceId", "uuid")])

GetTelemetrySubscriptionsResponse: Any = _message(
    "GetTelemetrySubscriptionsResponse", GET_TELEMETRY_SUBSCRIPTIONS_KEY, "response", "0",
    "0+", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        # The assigned id when the request's was zero, else the client's own.
        _f("ClientInstanceId", "uuid"),
        _f("SubscriptionId", "int32"),
        _f("AcceptedCompressionTypes", "[]int8"),
        _f("PushIntervalMs", "int32"),
        _f("TelemetryMaxBytes", "int32"),
        _f("DeltaTemporality", "bool"),
        # Empty: push nothing; one empty string: push every metric.
        _f("RequestedMetrics", "[]string")])

PushTelemetryRequest: Any = _message(
    "PushTelemetryRequest", PUSH_TELEMETRY_KEY, "request", "0", "0+", [
        _f("ClientInstanceId", "uuid"),
        _f("SubscriptionId", "int32"),
        _f("Terminating", "bool"),
        _f("CompressionType", "int8"),
        _f("Metrics", "bytes")])

PushTelemetryResponse: Any = _message(
    "PushTelemetryResponse", PUSH_TELEMETRY_KEY, "response", "0", "0+", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16")])
