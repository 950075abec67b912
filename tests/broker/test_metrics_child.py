"""BrokerMetrics.child: the remembered label child is the exported one."""

from __future__ import annotations

from broker.metrics import BrokerMetrics


def test_a_remembered_child_counts_into_the_exported_series() -> None:
    metrics = BrokerMetrics()
    first = metrics.child(metrics.requests, "Fetch", "12")
    assert metrics.child(metrics.requests, "Fetch", "12") is first
    first.inc()
    metrics.child(metrics.requests, "Fetch", "12").inc(2)
    metrics.child(metrics.requests, "Produce", "9").inc()
    metrics.child(metrics.latency, "Fetch").observe(0.002)
    value = metrics.registry.get_sample_value
    assert value("tierd_requests_total", {"api": "Fetch", "version": "12"}) == 3
    assert value("tierd_requests_total", {"api": "Produce", "version": "9"}) == 1
    assert value("tierd_request_latency_seconds_count", {"api": "Fetch"}) == 1
