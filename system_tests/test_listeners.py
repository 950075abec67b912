"""Named listeners on one broker (issue 12's listener model).

A broker with three PLAINTEXT-protocol listeners: INTERNAL on 127.0.0.1,
EXTERNAL on 127.0.0.2 (another loopback address), and HIDDEN, bound but not
in advertised.listeners. Metadata, DescribeCluster and FindCoordinator
answer each client with the endpoints of the listener it came through, as
Kafka does; a client of the unadvertised listener gets no brokers and
LISTENER_NOT_FOUND for partitions whose leader is alive. Real clients work
through EXTERNAL end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataResponse

from protocol.errors import ErrorCode
from system_tests._proc import RawClient, metadata_request, start_tierd
from system_tests.admin import create_topic
from system_tests.harness import free_port

METADATA_VERSION = 12
FIND_COORDINATOR_VERSION = 3
OTHER_LOOPBACK = "127.0.0.2"


def _metadata(host: str, port: int, topic: str) -> object:
    with RawClient(host, port) as client:
        return client.request(metadata_request([topic], METADATA_VERSION), METADATA_VERSION,
                              MetadataResponse)


def test_each_listener_advertises_its_own_endpoint(
        request: pytest.FixtureRequest, tmp_path: Path, topic: str) -> None:
    internal, external, hidden = free_port(), free_port(), free_port()
    broker = start_tierd(request, tmp_path / "broker", port=internal, overrides={
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://{OTHER_LOOPBACK}:{external},"
                     f"HIDDEN://127.0.0.1:{hidden}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,"
                                          "HIDDEN:PLAINTEXT",
        "advertised.listeners": f"INTERNAL://127.0.0.1:0,EXTERNAL://{OTHER_LOOPBACK}:{external}",
        "inter.broker.listener.name": "INTERNAL",
    })
    create_topic(broker.bootstrap, topic, 2)

    # Each listener's clients are told that listener's address (port 0 in
    # advertised.listeners is the port the listener bound).
    for host, port in (("127.0.0.1", internal), (OTHER_LOOPBACK, external)):
        resp = _metadata(host, port, topic)
        assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, host, port)]
        assert [p.error_code for p in resp.topics[0].partitions] == [0, 0]

    # The unadvertised listener: no brokers, and the live leader is not
    # reachable on it.
    resp = _metadata("127.0.0.1", hidden, topic)
    assert resp.brokers == []
    assert {(p.error_code, p.leader_id) for p in resp.topics[0].partitions} == {
        (ErrorCode.LISTENER_NOT_FOUND, -1)}

    # FindCoordinator names the coordinator on the asking listener.
    with RawClient(OTHER_LOOPBACK, external) as client:
        req = FindCoordinatorRequest[FIND_COORDINATOR_VERSION](key=f"{topic}-group", key_type=0)
        found = client.request(req, FIND_COORDINATOR_VERSION, FindCoordinatorResponse)
    assert (found.error_code, found.host, found.port) == (0, OTHER_LOOPBACK, external)

    # A real client bootstrapped on EXTERNAL produces, joins a group and consumes.
    bootstrap = f"{OTHER_LOOPBACK}:{external}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for n in range(20):
        producer.send(topic, value=f"v{n}".encode(), partition=n % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    try:
        values = set()
        for record in consumer:
            values.add(record.value)
            if len(values) == 20:
                break
        consumer.commit()
    finally:
        consumer.close()
    assert values == {f"v{n}".encode() for n in range(20)}
    assert f"EXTERNAL://{OTHER_LOOPBACK}:{external}" in broker.log_text()


@pytest.mark.parametrize("overrides, message", [
    ({"listeners": "PLAINTEXT://127.0.0.1:{p},CUSTOM://127.0.0.1:{q}"},
     "listener CUSTOM has no security protocol"),
    ({"advertised.listeners": "OTHER://127.0.0.1:{q}",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"},
     "OTHER is not one of the listeners"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol"),
])
def test_inconsistent_listener_config_is_refused_at_start(
        tmp_path: Path, overrides: dict[str, str], message: str) -> None:
    import subprocess
    import sys

    from system_tests.harness import REPO_ROOT

    p, q = free_port(), free_port()
    argv = [sys.executable, "-m", "broker", "--override", f"log.dirs={tmp_path}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{p}"]
    for key, value in overrides.items():
        argv += ["--override", f"{key}={value.format(p=p, q=q)}"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr
