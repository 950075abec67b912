"""TLS and SASL on a real broker with real clients (issue 12).

One broker for the module, with four listeners:
- PLAINTEXT (the harness's; used to create the first SCRAM user, as an
  operator would on an internal listener),
- SSL with ``ssl.client.auth=required`` (mutual TLS),
- SASL_PLAINTEXT and SASL_SSL offering SCRAM-SHA-512 and PLAIN (PLAIN users
  from the JAAS config, SCRAM users through AlterUserScramCredentials).
Certificates come from a CA generated at test time (``system_tests.certs``).

Every client (Java, librdkafka through confluent-kafka and kcat,
kafka-python, aiokafka) produces and consumes over each protocol. Wrong
passwords, unknown users, unoffered mechanisms, requests before
authentication, and expired, untrusted or missing client certificates are
refused with Kafka's error codes, a log line that holds no secret, and a
metric; connections that never finish TLS or SASL are closed. Fetches over
TLS never use sendfile and return the same bytes. Certificates reload
without a restart. A fuzzer mutating handshake frames over TLS never
crashes the broker.
"""

from __future__ import annotations

import random
import shutil
import socket
import ssl
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from protocol.errors import ErrorCode
from system_tests._proc import TierdProc, encode_request, scrape, start_tierd, wait_for
from system_tests.admin import create_topic
from system_tests.certs import Pki, make_pki
from system_tests.clients import DRIVERS
from system_tests.clients.base import ClientSecurity, librdkafka_options
from system_tests.harness import free_port
from system_tests.messages import CONSTANT_HEADERS, OutMessage
from system_tests.raw_secure import Raw

ALICE_PASSWORD = "alice-Secret-1"
BOB_PASSWORD = "bob-Secret-2"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              f'user_bob="{BOB_PASSWORD}";')
SETUP_TIMEOUT_MS = 2000
FAILED_AUTH_DELAY_MS = 300


class SecureBroker:
    def __init__(self, broker: TierdProc, pki: Pki, ports: dict[str, int]) -> None:
        self.broker = broker
        self.pki = pki
        self.ports = ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def security(self, listener: str, mechanism: str | None = None) -> ClientSecurity:
        pki = self.pki
        if listener == "SSL":
            return ClientSecurity("SSL", ca_file=pki.ca_pem, cert_file=pki.alice_cert_pem,
                                  key_file=pki.alice_key_pem, keystore_pem=pki.alice_pem)
        user, password = (("bob", BOB_PASSWORD) if mechanism == "PLAIN"
                          else ("alice", ALICE_PASSWORD))
        return ClientSecurity(listener, ca_file=pki.ca_pem if listener == "SASL_SSL" else None,
                              mechanism=mechanism, username=user, password=password)


def _overrides(pki: Pki, ports: dict[str, int], **extra: str) -> dict[str, str]:
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "tierd.connection.setup.timeout.ms": str(SETUP_TIMEOUT_MS),
        "connection.failed.authentication.delay.ms": str(FAILED_AUTH_DELAY_MS),
        **extra,
    }


def _upsert(bootstrap: str, user: str, password: str, iterations: int = 4096,
            config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations),
        password.encode())])
    for future in futures.values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def secure(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> SecureBroker:
    workdir = tmp_path_factory.mktemp("secure")
    pki = make_pki(workdir / "pki")
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port(),
             "SASL_SSL": free_port()}
    broker = start_tierd(request, workdir / "broker", _overrides(pki, ports),
                         port=ports["PLAINTEXT"])
    _upsert(broker.bootstrap, "alice", ALICE_PASSWORD)
    return SecureBroker(broker, pki, ports)


def _refused(bootstrap: str, options: dict[str, str]) -> str:
    """What librdkafka reports when it cannot get in (its errors, joined):
    list_topics itself only says the transport failed."""
    errors: list[str] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, **options, "log_level": "0",
                         "error_cb": lambda err: errors.append(str(err))})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(0.5)  # serves error_cb
    return " | ".join(errors)


def _failed(broker: TierdProc, **labels: str) -> float:
    return scrape(broker.metrics_url).total("tierd_failed_authentication_total", **labels)


# -- every client over every protocol ------------------------------------------------------

COMBINATIONS = [("SSL", None), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
                ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")]


@pytest.mark.parametrize("client", ["java", "confluent", "kcat", "kafka-python", "aiokafka"])
@pytest.mark.parametrize("listener, mechanism", COMBINATIONS,
                         ids=[f"{lst}-{m or 'mtls'}" for lst, m in COMBINATIONS])
def test_client_produces_and_consumes(secure: SecureBroker, topic: str, client: str,
                                      listener: str, mechanism: str | None) -> None:
    create_topic(secure.broker.bootstrap, topic, 2)
    driver = DRIVERS[client]
    security = secure.security(listener, mechanism)
    messages = [OutMessage(n % 2, f"k{n}".encode(), f"{client}-{listener}-{n}".encode() * 20,
                           CONSTANT_HEADERS) for n in range(30)]
    deliveries = driver.produce(secure.bootstrap(listener), topic, messages,
                                compression="lz4", security=security)
    assert len(deliveries) == 30
    records = driver.consume(secure.bootstrap(listener), topic, {0: 0, 1: 0},
                             security=security)
    assert sorted(r.value for r in records) == sorted(m.value for m in messages)


# -- refused authentication -----------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_bad_credentials_get_kafkas_errors_and_no_access(secure: SecureBroker,
                                                         listener: str) -> None:
    broker, port = secure.broker, secure.ports[listener]
    pki = secure.pki if listener == "SASL_SSL" else None
    before = _failed(broker, listener=listener)
    log_start = len(broker.log_text())

    # Wrong password (PLAIN), then the connection is closed after Kafka's delay.
    raw = Raw(port, pki)
    hs = raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert hs.error_code == 0 and set(hs.mechanisms) == {"SCRAM-SHA-512", "PLAIN"}
    started = time.monotonic()
    auth = raw.call(SaslAuthenticateRequest[2](auth_bytes=b"\x00bob\x00not-bobs-password"), 2,
                    SaslAuthenticateResponse)
    assert auth.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert time.monotonic() - started >= FAILED_AUTH_DELAY_MS / 1000 * 0.9
    assert raw.closed_within(5)
    raw.close()

    # Unknown SCRAM user: refused at the first message, the same way.
    raw = Raw(port, pki)
    raw.call(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"), 1, SaslHandshakeResponse)
    auth = raw.call(SaslAuthenticateRequest[2](auth_bytes=b"n,,n=mallory,r=abcdefgh"), 2,
                    SaslAuthenticateResponse)
    assert auth.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "invalid credentials" in auth.error_message
    assert raw.closed_within(5)
    raw.close()

    # A mechanism the listener does not offer.
    raw = Raw(port, pki)
    hs = raw.call(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse)
    assert hs.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert set(hs.mechanisms) == {"SCRAM-SHA-512", "PLAIN"}
    assert raw.closed_within(5)
    raw.close()

    # Anything but ApiVersions / SASL before authenticating closes the connection.
    raw = Raw(port, pki)
    versions = raw.call(ApiVersionsRequest[3](client_software_name="t",
                                              client_software_version="1"), 3,
                        ApiVersionsResponse)
    assert versions.error_code == 0
    raw.sock.sendall(encode_request(MetadataRequest[9](topics=None,
                                                       allow_auto_topic_creation=False), 9, 99))
    assert raw.closed_within(5)
    raw.close()

    # A real client with a wrong password gets an authentication error.
    wrong = ClientSecurity(listener, ca_file=secure.pki.ca_pem if pki else None,
                           mechanism="SCRAM-SHA-512", username="alice", password="wrong")
    assert "Authentication failed" in _refused(secure.bootstrap(listener),
                                               librdkafka_options(wrong))

    assert _failed(broker, listener=listener) >= before + 4
    log = broker.log_text(log_start)
    assert "authentication failed" in log and "user=bob" in log and "user=mallory" in log
    for secret in ("not-bobs-password", BOB_PASSWORD, ALICE_PASSWORD):
        assert secret not in log


@pytest.mark.parametrize("cert, reason", [("expired", "certificate_expired"),
                                          ("rogue", "certificate_untrusted_issuer"),
                                          (None, None)])
def test_bad_client_certificates_are_refused(secure: SecureBroker, cert: str | None,
                                             reason: str | None) -> None:
    pki = secure.pki
    labels = {"reason": reason} if reason else {}
    before = _failed(secure.broker, listener="SSL", mechanism="TLS", **labels)
    ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
    if cert is not None:
        ctx.load_cert_chain(str(getattr(pki, f"{cert}_pem")))
    refused = False
    try:
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
            with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                # TLS 1.3: the server checks the certificate after the client
                # finished its side; the refusal arrives on the first read.
                tls.sendall(encode_request(ApiVersionsRequest[0](), 0, 1))
                refused = tls.recv(4) == b""
    except (ssl.SSLError, ConnectionError):
        refused = True
    assert refused
    wait_for(lambda: _failed(secure.broker, listener="SSL", mechanism="TLS", **labels)
             > before, 10, "the refused certificate to be counted")

    # A real client with that certificate cannot produce either.
    if cert is not None:
        bad = ClientSecurity("SSL", ca_file=pki.ca_pem,
                             cert_file=getattr(pki, f"{cert}_cert_pem"),
                             key_file=getattr(pki, f"{cert}_key_pem"))
        _refused(secure.bootstrap("SSL"), librdkafka_options(bad))


def test_untrusted_broker_certificate_is_refused_by_clients(secure: SecureBroker) -> None:
    untrusting = ClientSecurity("SASL_SSL", ca_file=secure.pki.rogue_ca_pem,
                                mechanism="SCRAM-SHA-512", username="alice",
                                password=ALICE_PASSWORD)
    assert "certificate verify failed" in _refused(secure.bootstrap("SASL_SSL"),
                                                   librdkafka_options(untrusting))


def test_connection_that_never_finishes_setup_is_closed(secure: SecureBroker) -> None:
    before = scrape(secure.broker.metrics_url).total("tierd_connection_setup_timeouts_total")
    # Silent after connecting (no TLS ClientHello).
    silent = socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=10)
    # Stalls after the SASL handshake, before authenticating.
    stalled = Raw(secure.ports["SASL_PLAINTEXT"])
    stalled.call(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"), 1, SaslHandshakeResponse)
    started = time.monotonic()
    silent.settimeout(SETUP_TIMEOUT_MS / 1000 + 10)
    assert silent.recv(1) == b""
    assert stalled.closed_within(SETUP_TIMEOUT_MS / 1000 + 10)
    assert time.monotonic() - started < SETUP_TIMEOUT_MS / 1000 + 8
    silent.close()
    stalled.close()
    wait_for(lambda: scrape(secure.broker.metrics_url).total(
        "tierd_connection_setup_timeouts_total") >= before + 2, 10, "setup timeouts counted")


def test_tls_fetch_uses_no_sendfile_and_returns_the_same_bytes(secure: SecureBroker,
                                                               topic: str) -> None:
    create_topic(secure.broker.bootstrap, topic, 1)
    driver = DRIVERS["kafka-python"]
    rng = random.Random(3)
    messages = [OutMessage(0, None, rng.randbytes(rng.randrange(1, 4000))) for _ in range(300)]
    driver.produce(secure.broker.bootstrap, topic, messages, compression="none")
    metrics = secure.broker.metrics_url
    before = scrape(metrics).total("tierd_fetch_sendfile_bytes_total")
    tls = driver.consume(secure.bootstrap("SASL_SSL"), topic, {0: 0},
                         security=secure.security("SASL_SSL", "SCRAM-SHA-512"))
    assert scrape(metrics).total("tierd_fetch_sendfile_bytes_total") == before
    plain = driver.consume(secure.broker.bootstrap, topic, {0: 0})
    assert scrape(metrics).total("tierd_fetch_sendfile_bytes_total") > before
    assert [(r.offset, r.value) for r in tls] == [(r.offset, r.value) for r in plain]
    assert [r.value for r in tls] == [m.value for m in messages]


def test_scram_credentials_are_managed_through_the_admin_api(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    broker = start_tierd(request, tmp_path / "broker", _overrides(pki, ports),
                         port=ports["PLAINTEXT"])
    _upsert(broker.bootstrap, "alice", ALICE_PASSWORD)
    as_alice = librdkafka_options(ClientSecurity("SASL_SSL", ca_file=pki.ca_pem,
                                                 mechanism="SCRAM-SHA-512", username="alice",
                                                 password=ALICE_PASSWORD))
    bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **as_alice})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=30)
    [info] = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 4096)

    # Kafka's checks: too few iterations, unknown users.
    with pytest.raises(KafkaException, match="(?i)iterations"):
        _upsert(bootstrap, "carol", "carol-pw", iterations=100, config=as_alice)
    with pytest.raises(KafkaException, match="(?i)does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=30)

    # A new user logs in; once deleted, she cannot.
    _upsert(bootstrap, "carol", "carol-pw", config=as_alice)
    as_carol = librdkafka_options(ClientSecurity("SASL_SSL", ca_file=pki.ca_pem,
                                                 mechanism="SCRAM-SHA-512", username="carol",
                                                 password="carol-pw"))
    AdminClient({"bootstrap.servers": bootstrap, **as_carol}).list_topics(timeout=15)
    for future in admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "carol", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result(timeout=30)
    assert "Authentication failed" in _refused(bootstrap, as_carol)

    # Credentials survive a restart (kept in the log directory, hashed).
    broker.restart()
    AdminClient({"bootstrap.servers": bootstrap, **as_alice}).list_topics(timeout=15)
    stored = (broker.data_dir / "tierd-scram-credentials.json").read_text()
    assert "alice" in stored and ALICE_PASSWORD not in stored and "carol" not in stored


def _served_serial(port: int, ca: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    from cryptography import x509
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_certificates_reload_without_restart(request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    first, second = make_pki(tmp_path / "one"), make_pki(tmp_path / "two")
    keystore = tmp_path / "keystore.pem"
    truststore = tmp_path / "truststore.pem"
    shutil.copy(first.server_pem, keystore)
    # Clients trust both CAs so that each served certificate verifies.
    truststore.write_bytes(first.ca_pem.read_bytes() + second.ca_pem.read_bytes())
    ports = {"PLAINTEXT": free_port(), "SSL": free_port()}
    broker = start_tierd(request, tmp_path / "broker", {
        "listeners": f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SSL://127.0.0.1:{ports['SSL']}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)},
        port=ports["PLAINTEXT"])
    original = _served_serial(ports["SSL"], truststore)

    # Garbage in the keystore file: logged and counted, the old certificate stays.
    keystore.write_text("not a certificate\n")
    wait_for(lambda: scrape(broker.metrics_url).total("tierd_tls_reload_errors_total") >= 1
             or _served_serial(ports["SSL"], truststore) != original, 20,
             "the broken keystore to be noticed")
    assert _served_serial(ports["SSL"], truststore) == original

    # A new key and certificate: served to new connections, no restart.
    shutil.copy(second.server_pem, keystore)
    wait_for(lambda: _served_serial(ports["SSL"], truststore) != original, 20,
             "the new certificate to be served")
    assert "TLS key files reloaded" in broker.log_text()
    assert broker.is_running()


def test_pkcs12_keystore_and_encrypted_pem_key(request: pytest.FixtureRequest,
                                               tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "EXTRA": free_port()}
    broker = start_tierd(request, tmp_path / "broker", {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,EXTRA:SSL",
        "listener.name.ssl.ssl.keystore.type": "PKCS12",
        "listener.name.ssl.ssl.keystore.location": str(pki.server_p12),
        "listener.name.ssl.ssl.keystore.password": pki.keystore_password,
        "listener.name.ssl.ssl.truststore.type": "PKCS12",
        "listener.name.ssl.ssl.truststore.location": str(pki.truststore_p12),
        "listener.name.ssl.ssl.truststore.password": pki.truststore_password,
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.extra.ssl.keystore.type": "PEM",
        "listener.name.extra.ssl.keystore.location": str(pki.server_key_encrypted_pem),
        "listener.name.extra.ssl.key.password": pki.server_key_password,
    }, port=ports["PLAINTEXT"])
    driver = DRIVERS["confluent"]
    topic = "pkcs12-topic"
    create_topic(broker.bootstrap, topic, 1)
    mtls = ClientSecurity("SSL", ca_file=pki.ca_pem, cert_file=pki.alice_cert_pem,
                          key_file=pki.alice_key_pem)
    driver.produce(f"127.0.0.1:{ports['SSL']}", topic, [OutMessage(0, None, b"p12")],
                   security=mtls)
    got = driver.consume(f"127.0.0.1:{ports['EXTRA']}", topic, {0: 0},
                         security=ClientSecurity("SSL", ca_file=pki.ca_pem))
    assert [r.value for r in got] == [b"p12"]
    # What the broker wrote (the harness logs its command line, overrides included).
    written = "\n".join(line for line in broker.log_text().splitlines()
                        if not line.startswith("===== start"))
    for secret in (pki.keystore_password, pki.truststore_password, pki.server_key_password):
        assert secret not in written


def test_fuzzed_handshake_frames_over_tls_never_crash_the_broker(secure: SecureBroker) -> None:
    """Mutated SaslHandshake / SaslAuthenticate / ApiVersions frames (and raw
    SASL tokens after a v0 handshake) over TLS to SASL_SSL."""
    rng = random.Random(int(time.time()))
    pki, port = secure.pki, secure.ports["SASL_SSL"]
    seeds = [
        encode_request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"), 1, 1),
        encode_request(SaslHandshakeRequest[0](mechanism="PLAIN"), 0, 1),
        encode_request(SaslAuthenticateRequest[2](auth_bytes=b"n,,n=alice,r=abcdefghijkl"), 2, 2),
        encode_request(SaslAuthenticateRequest[0](auth_bytes=b"\x00bob\x00x"), 0, 2),
        encode_request(ApiVersionsRequest[3](client_software_name="f",
                                             client_software_version="1"), 3, 1),
    ]
    handshake = seeds[0]
    for n in range(120):
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(4)
            if kind == 0 and len(frame) > 4:
                i = rng.randrange(4, len(frame))
                frame[i] ^= 1 << rng.randrange(8)
            elif kind == 1 and len(frame) > 4:
                del frame[rng.randrange(4, len(frame)):]
            elif kind == 2:
                frame += rng.randbytes(rng.randrange(1, 64))
            else:
                i = rng.randrange(4, max(5, len(frame)))
                frame[i:i] = rng.randbytes(rng.randrange(1, 8))
        if rng.random() < 0.7:  # keep the size prefix honest most of the time
            frame[:4] = struct.pack(">i", len(frame) - 4)
        try:
            raw = Raw(port, pki)
            if n % 3 == 0:
                raw.sock.sendall(handshake)
            raw.sock.sendall(bytes(frame))
            raw.closed_within(0.2)
            raw.close()
        except (OSError, ssl.SSLError):
            pass
    assert secure.broker.is_running()
    snap = scrape(secure.broker.metrics_url)
    assert snap.total("tierd_protocol_errors_total", reason="handler_error") == 0
    assert snap.total("tierd_protocol_errors_total", reason="connection_error") == 0
    # And it still serves an authenticated client.
    AdminClient({"bootstrap.servers": secure.bootstrap("SASL_SSL"),
                 **librdkafka_options(secure.security("SASL_SSL", "SCRAM-SHA-512"))}
                ).list_topics(timeout=15)
