"""Writes deploy/grafana/dashboards/tierd.json, the provisioned Grafana dashboard.

Kept as code so every panel's query names a metric tierd really exports
(tests/deploy/test_dashboard.py checks them against a running broker's
/metrics). Run from the repository root: ``python deploy/grafana/build_dashboard.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).parent / "dashboards" / "tierd.json"

# (title, unit, [(PromQL, legend)]) per panel, two per row.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("Produce rate", "ops", [
        ("sum by (instance) (rate(tierd_messages_in_total[1m]))", "{{instance}} records/s")]),
    ("Produce / fetch bytes", "Bps", [
        ("sum(rate(tierd_bytes_in_total[1m]))", "in"),
        ("sum(rate(tierd_bytes_out_total[1m]))", "out")]),
    ("Requests by API", "reqps", [
        ("sum by (api) (rate(tierd_requests_total[1m]))", "{{api}}")]),
    ("Request latency p99", "s", [
        ("histogram_quantile(0.99, sum by (le, api) "
         "(rate(tierd_request_latency_seconds_bucket{api=~\"Produce|Fetch\"}[1m])))", "{{api}}")]),
    ("Under-replicated partitions", "short", [
        ("sum(tierd_UnderReplicatedPartitions)", "under-replicated"),
        ("sum(tierd_UnderMinIsrPartitionCount)", "under min ISR")]),
    ("Tiering copy lag", "bytes", [
        ("sum by (topic) (RemoteCopyLagBytes)", "{{topic}} bytes")]),
    ("Tiering copy lag (segments)", "short", [
        ("sum by (topic) (RemoteCopyLagSegments)", "{{topic}}")]),
    ("Remote bytes", "bytes", [
        ("sum by (topic) (RemoteLogSizeBytes)", "{{topic}}")]),
    ("Remote fetch rate", "reqps", [
        ("sum by (topic) (rate(RemoteFetchRequestsPerSec_total[1m]))", "{{topic}} reads/s"),
        ("sum(rate(RemoteFetchErrorsPerSec_total[1m]))", "errors/s")]),
    ("Remote fetch latency", "s", [
        ("histogram_quantile(0.5, sum by (le) (rate(RemoteLogReaderFetchTimeSeconds_bucket[1m])))",
         "p50"),
        ("histogram_quantile(0.99, sum by (le) (rate(RemoteLogReaderFetchTimeSeconds_bucket[1m])))",
         "p99")]),
    ("Remote reader queue", "short", [
        ("sum by (instance) (RemoteLogReaderTaskQueueSize)", "{{instance}}")]),
    ("Copies and deletes", "ops", [
        ("sum(rate(RemoteCopyRequestsPerSec_total[1m]))", "copies/s"),
        ("sum(rate(RemoteCopyErrorsPerSec_total[1m]))", "copy errors/s"),
        ("sum(rate(RemoteDeleteRequestsPerSec_total[1m]))", "deletes/s")]),
]


def dashboard() -> dict[str, object]:
    panels = []
    for i, (title, unit, queries) in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "prometheus"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "prometheus"}}
                        for j, (expr, legend) in enumerate(queries)],
        })
    return {"uid": "tierd", "title": "tierd", "schemaVersion": 39, "version": 1,
            "refresh": "10s", "time": {"from": "now-30m", "to": "now"}, "tags": ["tierd"],
            "panels": panels}


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
