"""Dynamic broker configs on one tierd (``kafka-configs --entity-type brokers``):
the Java 4.3 Admin's incrementalAlterConfigs and describeConfigs with synonyms,
the values surviving a restart, their live effect (retention of a topic that
follows the broker default, the per-IP connection limit, a listener's
keystore for new TLS connections), the refusals with
Kafka's error codes, and ``tierd admin configs``.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.producer import ProduceResponse

from system_tests import javatool
from system_tests._proc import (
    EARLIEST,
    RawClient,
    TierdProc,
    list_offsets,
    produce_request,
    start_tierd,
    wait_for,
)
from system_tests.admin import create_topic
from system_tests.admin.tool import ok, run_admin
from system_tests.certs import make_pki
from system_tests.harness import free_port
from tests.helpers import batch

# The harness's broker.id.
NODE = "0"
INVALID_CONFIG = 40
INVALID_REQUEST = 42
BROKER = 4
# Retention runs this often, so a lowered default shows within a few checks.
RETENTION_CHECK_MS = 200
SEGMENT_BYTES = 1024
WAIT_S = 30.0


@pytest.fixture
def tierd(request: pytest.FixtureRequest, tmp_path: Path) -> TierdProc:
    return start_tierd(request, tmp_path, {
        "log.segment.bytes": str(SEGMENT_BYTES),
        "log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
        "log.segment.delete.delay.ms": "0", "log.retention.bytes": "-1"},
        name="tierd-dynamic-configs")


def admin(broker: TierdProc, *args: str, check: bool = True) -> dict[str, Any]:
    return javatool.run(["admin", "--bootstrap", broker.bootstrap, *args], check=check)


def describe(broker: TierdProc, *args: str) -> dict[str, Any]:
    return dict(admin(broker, "broker-configs-describe", *args)["configs"])


def raw(broker: TierdProc) -> RawClient:
    host, port = broker.bootstrap.rsplit(":", 1)
    return RawClient(host, int(port))


def alter_raw(broker: TierdProc, name: str, ops: list[tuple[str, int, str | None]],
              validate_only: bool = False) -> Any:
    req = IncrementalAlterConfigsRequest[1](
        resources=[(BROKER, name, ops)], validate_only=validate_only)
    with raw(broker) as client:
        [result] = client.request(req, 1, IncrementalAlterConfigsResponse[1]).responses
    return result


def test_java_admin_alters_and_describes_with_sources_and_synonyms(tierd: TierdProc) -> None:
    admin(tierd, "broker-configs-alter", "--default", "--set", "log.retention.bytes=5000000",
          "--set", "log.cleaner.threads=2")
    admin(tierd, "broker-configs-alter", "--broker", NODE, "--set",
          "log.retention.bytes=4000000")
    configs = describe(tierd, "--broker", NODE, "--key", "log.retention.bytes",
                       "--key", "log.cleaner.threads", "--key", "log.dirs",
                       "--key", "log.retention.ms")
    assert configs["log.retention.bytes"] == {
        "value": "4000000", "source": "DYNAMIC_BROKER_CONFIG", "read_only": False,
        "sensitive": False, "synonyms": [
            ["log.retention.bytes", "4000000", "DYNAMIC_BROKER_CONFIG"],
            ["log.retention.bytes", "5000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
            ["log.retention.bytes", "-1", "STATIC_BROKER_CONFIG"],
            ["log.retention.bytes", "-1", "DEFAULT_CONFIG"]]}
    assert configs["log.cleaner.threads"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert configs["log.dirs"]["read_only"] is True
    assert configs["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.retention.ms"]["synonyms"] == [
        ["log.retention.hours", "168", "DEFAULT_CONFIG"]]
    default = describe(tierd, "--default")
    assert set(default) == {"log.retention.bytes", "log.cleaner.threads"}
    assert default["log.retention.bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"

    # validate_only stores nothing; DELETE falls back to the next layer.
    admin(tierd, "broker-configs-alter", "--broker", NODE, "--set", "log.retention.bytes=1",
          "--validate-only")
    assert describe(tierd, "--broker", NODE, "--key", "log.retention.bytes")[
        "log.retention.bytes"]["value"] == "4000000"
    admin(tierd, "broker-configs-alter", "--broker", NODE, "--delete", "log.retention.bytes")
    after = describe(tierd, "--broker", NODE, "--key", "log.retention.bytes")
    assert after["log.retention.bytes"]["value"] == "5000000"
    assert after["log.retention.bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"


def test_dynamic_values_survive_a_restart(tierd: TierdProc, topic: str) -> None:
    create_topic(tierd.bootstrap, topic)
    admin(tierd, "broker-configs-alter", "--broker", NODE, "--set", "log.retention.bytes=777777",
          "--append", "log.cleanup.policy=compact")
    tierd.restart()
    configs = describe(tierd, "--broker", NODE, "--key", "log.retention.bytes",
                       "--key", "log.cleanup.policy")
    assert configs["log.retention.bytes"]["value"] == "777777"
    assert configs["log.retention.bytes"]["source"] == "DYNAMIC_BROKER_CONFIG"
    assert configs["log.cleanup.policy"]["value"] == "delete,compact"
    # The topic without its own value follows the dynamic broker value.
    topic_configs = admin(tierd, "describe-configs", "--topic", topic)["configs"]
    assert topic_configs["retention.bytes"]["value"] == "777777"
    assert topic_configs["retention.bytes"]["source"] == "DYNAMIC_BROKER_CONFIG"


def _segments_of(client: RawClient, topic: str, count: int) -> None:
    for i in range(count):
        values = [f"{i}-{j}".encode() * 40 for j in range(8)]
        now = int(time.time() * 1000)  # not old enough for time retention
        resp = client.request(produce_request(topic, 0, bytes(batch(values, timestamp=now))), 9,
                              ProduceResponse[9])
        assert resp.responses[0].partition_responses[0].error_code == 0


def test_lowered_retention_default_deletes_segments_of_topics_that_follow_it(
        tierd: TierdProc) -> None:
    follows, own = f"follows-{uuid.uuid4().hex[:6]}", f"own-{uuid.uuid4().hex[:6]}"
    create_topic(tierd.bootstrap, follows)
    create_topic(tierd.bootstrap, own, configs={"retention.bytes": "-1"})
    with raw(tierd) as client:
        for t in (follows, own):
            _segments_of(client, t, 12)
        assert list_offsets(client, follows, {0: EARLIEST}) == {0: 0}
    admin(tierd, "broker-configs-alter", "--default", "--set",
          f"log.retention.bytes={3 * SEGMENT_BYTES}")

    def trimmed() -> bool:
        with raw(tierd) as client:
            return list_offsets(client, follows, {0: EARLIEST})[0] > 0
    wait_for(trimmed, WAIT_S, "retention to delete segments after the default was lowered")
    with raw(tierd) as client:
        assert list_offsets(client, own, {0: EARLIEST}) == {0: 0}


def _served(client: RawClient) -> bool:
    req = DescribeConfigsRequest[4](resources=[(BROKER, NODE, ["max.connections.per.ip"])],
                                    include_synonyms=False, include_documentation=False)
    [result] = client.request(req, 4, DescribeConfigsResponse[4]).results
    return result.error_code == 0


def test_max_connections_per_ip_refuses_new_connections_live(tierd: TierdProc) -> None:
    with raw(tierd) as first, raw(tierd) as second:
        assert _served(first) and _served(second)
        result = alter_raw(tierd, NODE, [("max.connections.per.ip", 0, "2")])
        assert result.error_code == 0, result
        with raw(tierd) as third:
            closed, _ = third.wait_closed(WAIT_S)
            assert closed, "a connection over max.connections.per.ip was kept open"
        req = IncrementalAlterConfigsRequest[1](
            resources=[(BROKER, NODE, [("max.connections.per.ip", 1, None)])],
            validate_only=False)
        [result] = first.request(req, 1, IncrementalAlterConfigsResponse[1]).responses
        assert result.error_code == 0, result
        with raw(tierd) as third:
            assert _served(third)


def test_refusals_carry_kafkas_error_codes(tierd: TierdProc) -> None:
    failed = admin(tierd, "broker-configs-alter", "--broker", NODE, "--set", "log.dirs=/tmp/x",
                   check=False)
    assert failed["error"]["class"] == "InvalidRequestException", failed
    assert "Cannot update these configs dynamically: log.dirs" in failed["error"]["message"]
    for ops, code, words in (
            ([("zookeeper.connect", 0, "zk:2181")], INVALID_REQUEST, "dynamically"),
            ([("remote.log.reader.threads", 0, "4")], INVALID_REQUEST, "running broker"),
            ([("ssl.keystore.location", 0, "/k")], INVALID_REQUEST, "per-listener"),
            ([("no.such.config", 0, "1")], INVALID_CONFIG, "unknown"),
            ([("log.retention.bytes", 0, "many")], INVALID_CONFIG, "log.retention.bytes"),
            ([("log.cleaner.threads", 0, "9")], INVALID_CONFIG, "double"),
            ([("log.retention.bytes", 2, "1")], INVALID_CONFIG, "list")):
        result = alter_raw(tierd, NODE, ops)
        assert (result.error_code, words in (result.error_message or "")) == (code, True), \
            (ops, result)
    assert alter_raw(tierd, "2", [("log.retention.bytes", 0, "1")]).error_code == \
        INVALID_REQUEST
    req = DescribeConfigsRequest[4](resources=[(BROKER, "2", None)], include_synonyms=True,
                                    include_documentation=False)
    with raw(tierd) as client:
        [result] = client.request(req, 4, DescribeConfigsResponse[4]).results
    assert result.error_code == INVALID_REQUEST
    assert describe(tierd, "--default") == {}


def test_tierd_admin_configs(tierd: TierdProc) -> None:
    ok(tierd.bootstrap, "configs", "alter", "--entity-type", "brokers", "--entity-default",
       "--add-config", "log.retention.bytes=123456,max.connections=1000")
    shown = ok(tierd.bootstrap, "--json", "configs", "describe", "--entity-type", "brokers",
               "--entity-name", NODE).json()
    assert {r["name"]: (r["value"], r["source"]) for r in shown} == {
        "log.retention.bytes": ("123456", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        "max.connections": ("1000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    ok(tierd.bootstrap, "configs", "alter", "--entity-type", "brokers", "--entity-default",
       "--delete-config", "max.connections")
    shown = ok(tierd.bootstrap, "--json", "configs", "describe", "--entity-type", "brokers",
               "--entity-default").json()
    assert [r["name"] for r in shown] == ["log.retention.bytes"]
    refused = run_admin(tierd.bootstrap, "configs", "alter", "--entity-type", "brokers",
                        "--entity-name", NODE, "--add-config", "broker.id=5")
    assert refused.returncode == 1
    assert "INVALID_REQUEST" in refused.stderr and "broker.id" in refused.stderr


def test_tierd_admin_configs_of_a_topic(tierd: TierdProc, topic: str) -> None:
    create_topic(tierd.bootstrap, topic)
    ok(tierd.bootstrap, "configs", "alter", "--entity-type", "topics", "--entity-name", topic,
       "--add-config", "retention.ms=86400000")
    shown = ok(tierd.bootstrap, "--json", "configs", "describe", "--entity-type", "topics",
               "--entity-name", topic).json()
    assert [(r["name"], r["value"], r["source"]) for r in shown] == [
        ("retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG")]
    refused = run_admin(tierd.bootstrap, "configs", "alter", "--entity-type", "topics",
                        "--entity-name", topic, "--add-config", "no.such.key=1")
    assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr, refused.stderr


def _served_serial(port: int, ca: Path) -> int:
    from cryptography import x509

    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_listener_keystore_is_switched_for_new_connections(request: pytest.FixtureRequest,
                                                           tmp_path: Path) -> None:
    first, second = make_pki(tmp_path / "one"), make_pki(tmp_path / "two")
    truststore = tmp_path / "truststore.pem"
    truststore.write_bytes(first.ca_pem.read_bytes() + second.ca_pem.read_bytes())
    ports = {"PLAINTEXT": free_port(), "SSL": free_port()}
    broker = start_tierd(request, tmp_path / "broker", {
        "listeners": f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SSL://127.0.0.1:{ports['SSL']}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(first.server_pem)},
        port=ports["PLAINTEXT"], name="tierd-dynamic-tls")
    original = _served_serial(ports["SSL"], truststore)
    key = "listener.name.ssl.ssl.keystore.location"

    broken = tmp_path / "broken.pem"
    broken.write_text("not a certificate\n")
    result = alter_raw(broker, NODE, [(key, 0, str(broken))])
    assert result.error_code == INVALID_CONFIG, result
    assert alter_raw(broker, "", [(key, 0, str(second.server_pem))]).error_code == \
        INVALID_REQUEST
    assert _served_serial(ports["SSL"], truststore) == original

    admin(broker, "broker-configs-alter", "--broker", NODE, "--set",
          f"{key}={second.server_pem}")
    assert _served_serial(ports["SSL"], truststore) != original
    described = describe(broker, "--broker", NODE, "--key", key)[key]
    assert (described["value"], described["source"]) == (str(second.server_pem),
                                                         "DYNAMIC_BROKER_CONFIG")


def test_alter_configs_replaces_the_whole_entry(tierd: TierdProc) -> None:
    result = alter_raw(tierd, "", [("log.retention.bytes", 0, "1000000"),
                                   ("max.connections", 0, "500")])
    assert result.error_code == 0, result
    req = AlterConfigsRequest[1](resources=[(BROKER, "", [("log.cleaner.backoff.ms", "20000")])],
                                 validate_only=False)
    with raw(tierd) as client:
        [result] = client.request(req, 1, AlterConfigsResponse[1]).responses
    assert result.error_code == 0, result
    default = describe(tierd, "--default")
    assert {k: v["value"] for k, v in default.items()} == {"log.cleaner.backoff.ms": "20000"}
