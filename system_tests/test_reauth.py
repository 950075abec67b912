"""SASL re-authentication (KIP-368, ``connections.max.reauth.ms``) on a real
broker (issue 12).

A client is told its session lifetime in SaslAuthenticate and must
authenticate again on the same connection before it ends: librdkafka does,
and keeps producing over one connection through several lifetimes. A client
that does not is disconnected at its first request after the end; a
re-authentication as another user is refused.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from protocol.errors import ErrorCode
from system_tests._proc import TierdProc, scrape, start_tierd
from system_tests.admin import create_topic
from system_tests.harness import free_port
from system_tests.raw_secure import Raw

LIFETIME_MS = 1500
USERS = {"alice": "alice-reauth-Secret", "bob": "bob-reauth-Secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[TierdProc, int]:
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    proc = start_tierd(request, tmp_path_factory.mktemp("reauth"), {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(LIFETIME_MS),
    }, port=ports["PLAINTEXT"])
    return proc, ports["SASL_PLAINTEXT"]


def authenticate(raw: Raw, user: str) -> Any:
    return raw.sasl_plain(user, USERS[user])


def metadata(raw: Raw) -> Any:
    return raw.call(MetadataRequest[9](topics=[], allow_auto_topic_creation=False), 9,
                    MetadataResponse)


def _metric(proc: TierdProc, name: str) -> float:
    return scrape(proc.metrics_url).total(name, listener="SASL_PLAINTEXT")


def test_librdkafka_reauthenticates_and_keeps_its_connection(broker: tuple[TierdProc, int],
                                                            topic: str) -> None:
    proc, port = broker
    create_topic(proc.bootstrap, topic, 1)
    before = _metric(proc, "tierd_reauthentications_total")
    connections = _metric(proc, "tierd_successful_authentication_total")
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": USERS["alice"],
                         "linger.ms": 0, "error_cb": lambda e: errors.append(str(e))})
    delivered = []
    started = time.monotonic()
    # Through at least three session lifetimes, a message every 50 ms.
    while time.monotonic() - started < 3.5 * LIFETIME_MS / 1000:
        producer.produce(topic, b"v", on_delivery=lambda err, m: delivered.append(err))
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert errors == []
    assert _metric(proc, "tierd_reauthentications_total") >= before + 2
    assert _metric(proc, "tierd_expired_sessions_total") == 0
    # The same connections throughout: librdkafka's bootstrap and broker ones,
    # not one more per lifetime.
    assert _metric(proc, "tierd_successful_authentication_total") - connections <= 2


def test_a_client_that_does_not_reauthenticate_is_disconnected(
        broker: tuple[TierdProc, int]) -> None:
    proc, port = broker
    raw = Raw(port)
    auth = authenticate(raw, "alice")
    assert auth.error_code == 0 and auth.session_lifetime_ms == LIFETIME_MS
    authenticated = time.monotonic()
    expired = _metric(proc, "tierd_expired_sessions_total")
    with pytest.raises((EOFError, ConnectionError)):
        while time.monotonic() - authenticated < 10:
            assert metadata(raw).brokers  # answered while the session lasts
            time.sleep(0.1)
    assert time.monotonic() - authenticated >= LIFETIME_MS / 1000 * 0.95
    raw.sock.close()
    assert _metric(proc, "tierd_expired_sessions_total") == expired + 1
    assert "session_expired" in proc.log_text()


def test_reauthentication_renews_the_session_and_keeps_the_principal(
        broker: tuple[TierdProc, int]) -> None:
    proc, port = broker
    raw = Raw(port)
    assert authenticate(raw, "alice").error_code == 0
    assert authenticate(raw, "alice").session_lifetime_ms == LIFETIME_MS  # on the same socket
    assert metadata(raw).brokers
    again = authenticate(raw, "bob")
    assert again.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "principal" in again.error_message
    with pytest.raises((EOFError, ConnectionError)):
        metadata(raw)
    raw.sock.close()
