"""SCRAM, PLAIN and JAAS parsing, and TLS principals, without a network."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path

import pytest
import trio
import trio.testing
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.security.principal_rules import NoMatchingRule, PrincipalMapper
from broker.security.sasl import SaslAuthenticator, SaslFailure, SaslSettings, parse_jaas
from broker.security.scram import (
    AuthenticationFailed,
    LocalCredentialStore,
    ScramClient,
    ScramCredential,
    ScramServer,
)
from broker.security.tls import TlsSettings, build_server_context
from config.defs import ConfigError


class Store:
    def __init__(self, creds: dict[tuple[str, str], ScramCredential]) -> None:
        self.creds = creds

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


def test_scram_client_matches_rfc7677_example() -> None:
    # RFC 7677 section 3: user "user", password "pencil".
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(AuthenticationFailed):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_server_accepts_the_right_proof_only(mechanism: str) -> None:
    cred = ScramCredential.from_password(mechanism, "s3cret")
    store = Store({("ali,ce=", mechanism): cred})
    server, client = ScramServer(mechanism, store), ScramClient(mechanism, "ali,ce=", "s3cret")
    client.verify(await server.respond(client.final(await server.respond(client.first()))))
    assert server.complete and server.user == "ali,ce="

    server, client = ScramServer(mechanism, store), ScramClient(mechanism, "ali,ce=", "wrong")
    first = await server.respond(client.first())
    with pytest.raises(AuthenticationFailed, match="invalid credentials") as failed:
        await server.respond(client.final(first))
    assert "wrong" not in str(failed.value) and not server.complete

    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        await ScramServer(mechanism, store).respond(b"n,,n=bob,r=abc")


@pytest.mark.parametrize("token", [b"", b"\xff\xfe", b"p=tls-unique,,n=a,r=b", b"n,,r=b,n=a",
                                   b"n,,n=a", b"n,a=other,n=a,r=b", b"n,,n=a,r=b,tokenauth=true",
                                   b"n,,n=a=41,r=b"])
async def test_scram_server_refuses_malformed_first_messages(token: bytes) -> None:
    store = Store({("a", "SCRAM-SHA-512"): ScramCredential.from_password("SCRAM-SHA-512", "p")})
    with pytest.raises(AuthenticationFailed):
        await ScramServer("SCRAM-SHA-512", store).respond(token)


async def test_scram_server_refuses_a_replayed_or_altered_final_message() -> None:
    mech = "SCRAM-SHA-512"
    store = Store({("a", mech): ScramCredential.from_password(mech, "p")})
    server, client = ScramServer(mech, store), ScramClient(mech, "a", "p")
    final = client.final(await server.respond(client.first()))
    other = ScramServer(mech, store)
    await other.respond(ScramClient(mech, "a", "p").first())
    with pytest.raises(AuthenticationFailed, match="nonce"):
        await other.respond(final)  # another exchange's nonce
    with pytest.raises(AuthenticationFailed):
        await server.respond(final.replace(b"c=biws", b"c=eSws"))


async def test_scram_server_accepts_old_librdkafkas_repeated_client_nonce() -> None:
    # Older librdkafka (2.0.2, Debian's kcat) sends r=<client nonce><combined nonce>;
    # Kafka accepts a final nonce that ends with the combined one, so do we.
    import hashlib
    import hmac

    mech = "SCRAM-SHA-256"
    store = Store({("a", mech): ScramCredential.from_password(mech, "p")})
    server = ScramServer(mech, store)
    first = (await server.respond(b"n,,n=a,r=cnonce")).decode()
    attrs = dict(part.split("=", 1) for part in first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", b"p", base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))
    without_proof = f"c=biws,r=cnonce{attrs['r']}"
    auth = f"n=a,r=cnonce,{first},{without_proof}".encode()
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
    proof = base64.b64encode(bytes(x ^ y for x, y in zip(client_key, signature, strict=True)))
    await server.respond(without_proof.encode() + b",p=" + proof)
    assert server.complete


def test_credential_text_round_trip_is_kafkas_form() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", iterations=8192, salt=b"salt")
    text = cred.to_text()
    assert text.startswith("salt=c2FsdA==,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == cred


async def test_local_store_persists_privately(tmp_path: Path) -> None:
    store = LocalCredentialStore(str(tmp_path))
    cred = ScramCredential.from_password("SCRAM-SHA-512", "correct-horse")
    await store.alter([("alice", "SCRAM-SHA-512", cred)], [])
    again = LocalCredentialStore(str(tmp_path))
    assert await again.get("alice", "SCRAM-SHA-512") == cred
    path = tmp_path / "tierd-scram-credentials.json"
    assert path.stat().st_mode & 0o077 == 0
    assert "correct-horse" not in path.read_text()
    await again.alter([], [("alice", "SCRAM-SHA-512")])
    assert await LocalCredentialStore(str(tmp_path)).users() == {}


def test_jaas_options() -> None:
    module, options = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="a \\"quoted\\" pw" user_admin="x" user_bob="y";')
    assert module.endswith("PlainLoginModule")
    assert options == {"username": "admin", "password": 'a "quoted" pw', "user_admin": "x",
                       "user_bob": "y"}
    with pytest.raises(ValueError):
        parse_jaas('username="a"')


async def test_plain_and_handshake_rules() -> None:
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    settings = SaslSettings(("PLAIN",), {"bob": "pw"}, None)
    auth = SaslAuthenticator(settings)
    with pytest.raises(SaslFailure) as refused:
        auth.handshake(1, SaslHandshakeRequest[1](mechanism="GSSAPI"), SaslHandshakeResponse[1])
    assert refused.value.response.error_code == 33 and refused.value.response.mechanisms == [
        "PLAIN"]
    auth.handshake(1, SaslHandshakeRequest[1](mechanism="plain"), SaslHandshakeResponse[1])
    with pytest.raises(AuthenticationFailed):
        await auth.exchange(b"\x00bob\x00nope")
    auth = SaslAuthenticator(settings)
    auth.handshake(0, SaslHandshakeRequest[0](mechanism="PLAIN"), SaslHandshakeResponse[0])
    assert auth.raw_tokens
    for bad in (b"bob\x00pw", b"eve\x00bob\x00pw", b"\x00nobody\x00pw", b"\x00bob\x00"):
        with pytest.raises(AuthenticationFailed):
            await _plain(settings, bad)
    assert await auth.exchange(b"bob\x00bob\x00pw") == b"" and auth.principal == "User:bob"


async def _plain(settings: SaslSettings, token: bytes) -> None:
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    auth = SaslAuthenticator(settings)
    auth.handshake(1, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1])
    await auth.exchange(token)


# -- TLS ------------------------------------------------------------------------------


def _cert(tmp: Path, name: str, cn: str) -> tuple[Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org, Inc"),
                         x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .sign(key, hashes.SHA256()))
    path = tmp / f"{name}.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
                     + cert.public_bytes(serialization.Encoding.PEM))
    return path, key


def _settings(**changes: object) -> TlsSettings:
    base = dict(keystore_type="PEM", keystore_location=None, keystore_password=None,
                key_password=None, keystore_key=None, keystore_chain=None,
                truststore_type="PEM", truststore_location=None, truststore_password=None,
                truststore_certificates=None, client_auth="none",
                enabled_protocols=("TLSv1.2", "TLSv1.3"), cipher_suites=(),
                principal_rules="DEFAULT")
    base.update(changes)
    return TlsSettings(**base)  # type: ignore[arg-type]


def test_tls_context_checks(tmp_path: Path) -> None:
    server, _ = _cert(tmp_path, "server", "localhost")
    ctx = build_server_context(_settings(keystore_location=str(server)))
    assert ctx.verify_mode == ssl.CERT_NONE and ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="JKS"):
        build_server_context(_settings(keystore_type="JKS", keystore_location=str(server)))
    with pytest.raises(ConfigError, match="needs a truststore"):
        build_server_context(_settings(keystore_location=str(server), client_auth="required"))
    with pytest.raises(ConfigError, match="needs a keystore"):
        build_server_context(_settings())
    with pytest.raises(ConfigError, match="cannot read"):
        build_server_context(_settings(keystore_type="PKCS12",
                                       keystore_location=str(tmp_path / "missing.p12")))
    with pytest.raises(ConfigError, match="invalid rule"):
        build_server_context(_settings(keystore_location=str(server),
                                       principal_rules="RULE:^CN=(.*)$/$1"))
    ctx = build_server_context(_settings(keystore_location=str(server),
                                         truststore_location=str(server),
                                         client_auth="requested",
                                         enabled_protocols=("TLSv1.3",)))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3


async def test_principal_is_the_client_certificate_subject(tmp_path: Path) -> None:
    from broker.security.tls import principal_of

    server, _ = _cert(tmp_path, "server", "localhost")
    client, _ = _cert(tmp_path, "client", "alice")
    server_ctx = build_server_context(_settings(keystore_location=str(server),
                                                truststore_location=str(client),
                                                client_auth="required"))
    client_ctx = ssl.create_default_context(cafile=str(server))
    client_ctx.load_cert_chain(str(client))
    a, b = trio.testing.memory_stream_pair()
    srv = trio.SSLStream(a, server_ctx, server_side=True)
    cli = trio.SSLStream(b, client_ctx, server_hostname="localhost")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(srv.do_handshake)
        nursery.start_soon(cli.do_handshake)
    assert principal_of(srv) == "User:CN=alice,O=Org\\, Inc,C=DE"
    assert principal_of(None) == "User:ANONYMOUS"
    mapper = PrincipalMapper(r"RULE:^CN=bob,.*$/bob/,RULE:^CN=(.*?),O=(.*?),C=.*$/$1@$2/L")
    assert principal_of(srv, mapper) == "User:alice@org\\, inc"
    with pytest.raises(NoMatchingRule):
        principal_of(srv, PrincipalMapper("RULE:^CN=bob,.*$/bob/"))


# Kafka's documented example rules and names (KIP-371).
KAFKA_RULES = (r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
               r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
               r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")


@pytest.mark.parametrize("dn, name", [
    ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
    ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
    ("CN=kafka1,O=Apache", "KAFKA1"),
    ("OU=no-common-name", "OU=no-common-name"),
])
def test_principal_mapping_rules(dn: str, name: str) -> None:
    assert PrincipalMapper(KAFKA_RULES).name(dn) == name


@pytest.mark.parametrize("rules", ["RULE:abc", "NOPE", "RULE:^CN=(.*$/$1/", "RULE:x/y/Q", ""])
def test_bad_principal_mapping_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        PrincipalMapper(rules)


# -- connection limits ----------------------------------------------------------------


def test_connection_limits_count_per_ip_listener_and_broker() -> None:
    from broker.security.limits import ConnectionLimits
    from config import BrokerConfig

    config = BrokerConfig.from_mapping({
        "listeners": "PLAINTEXT://127.0.0.1:1,EXT://127.0.0.1:2",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXT:PLAINTEXT",
        "max.connections": "3", "max.connections.per.ip": "2",
        "max.connections.per.ip.overrides": "10.0.0.9:10",
        "listener.name.ext.max.connections": "5"})
    limits = ConnectionLimits(config, clock=lambda: 0.0)
    assert limits.admit("EXT", "10.0.0.1") is None
    assert limits.admit("EXT", "10.0.0.1") is None
    assert limits.admit("EXT", "10.0.0.1") == "max_connections_per_ip"
    assert limits.admit("EXT", "10.0.0.9") is None
    assert limits.admit("EXT", "10.0.0.9") == "max_connections"  # broker-wide 3
    # The inter-broker listener (PLAINTEXT) is neither limited nor counted.
    assert limits.admit("PLAINTEXT", "10.0.0.9") is None
    assert limits.total == 3
    limits.release("EXT", "10.0.0.1")
    assert limits.admit("EXT", "10.0.0.9") is None
    limits.release("PLAINTEXT", "10.0.0.9")
    assert limits.total == 3 and limits.by_ip["10.0.0.9"] == 2


def test_creation_rate_bucket_delays_past_the_burst() -> None:
    from broker.security.limits import _Rate

    now = [0.0]
    rate = _Rate(4, lambda: now[0])
    assert [rate.delay() for _ in range(4)] == [0.0, 0.0, 0.0, 0.0]
    assert rate.delay() == pytest.approx(0.25)
    assert rate.delay() == pytest.approx(0.5)
    now[0] = 10.0
    assert rate.delay() == 0.0


def test_ip_overrides_are_checked() -> None:
    from config import BrokerConfig

    with pytest.raises(ConfigError, match="ip:count"):
        BrokerConfig.from_mapping({"max.connections.per.ip.overrides": "10.0.0.1"})


# -- client quotas --------------------------------------------------------------------


def test_quota_precedence_is_kafkas() -> None:
    from broker.security.quotas import ClientQuotas, entity

    q = ClientQuotas(clock=lambda: 0.0)
    key = "producer_byte_rate"
    layers = [entity(client=None), entity(client="c"), entity(None), entity(None, None),
              entity(None, "c"), entity("u"), entity("u", None), entity("u", "c")]
    entries: dict = {}
    # Adding each more specific layer makes it the one that applies.
    for n, layer in enumerate(layers):
        entries[layer] = {key: float(n + 1)}
        q.set_entries(entries)
        assert q.quota("u", "c", key) == (layer, float(n + 1))
    # Other users and clients fall back to the defaults.
    assert q.quota("v", "d", key) == (entity(None, None), 4.0)
    assert q.quota("v", "c", key) == (entity(None, "c"), 5.0)


def test_quota_throttle_time_follows_kafkas_formula() -> None:
    from broker.security.quotas import ClientQuotas, entity

    now = [0.0]
    q = ClientQuotas(windows=11, window_s=1.0, clock=lambda: now[0])
    q.set_entries({entity(client="c"): {"producer_byte_rate": 1000.0}})
    # 10 s at exactly the quota: never throttled.
    for second in range(10):
        now[0] = float(second)
        assert q.record("u", "c", "producer_byte_rate", 1000) == 0.0
    # Double the rate for the window: (2000 - 1000) / 1000 x 11 s, capped at 11 s.
    now[0] = 10.0
    throttle = q.record("u", "c", "producer_byte_rate", 11_000)
    assert 0 < throttle <= 11_000
    assert q.record("x", "other", "producer_byte_rate", 10**9) == 0.0  # no quota applies
