"""A throwaway PKI for TLS tests, generated at test time with `cryptography`.

`make_pki(directory)` writes the files below into `directory` and returns
their paths as a `Pki`. All keys are EC P-256 and all signatures ECDSA with
SHA-256, which Java 17, librdkafka (OpenSSL) and Python's ssl all accept;
generation takes a few tens of milliseconds, so calling it once per test
module (or even per test) is fine.

Validity is from one hour ago (tolerates clock skew between processes) to two
days ahead, except for the deliberately expired client certificate.

Files (attribute name: file name - contents):

Certificate authority
  ca_pem: ca.pem - the CA certificate, CN=tierd-test-ca. Trust this on both
      sides (broker ``ssl.truststore.type=PEM``/``ssl.truststore.location``,
      clients' ``ssl.ca.location``/``ssl_cafile``).
  ca_key_pem: ca.key.pem - the CA's private key (PKCS8, unencrypted), for
      tests that want to sign more certificates.

Broker
  server_cert_pem: server.crt.pem - the server certificate followed by the CA
      certificate (the chain), alone. Subject CN=localhost, SubjectAltName
      IP 127.0.0.1, IP 127.0.0.2, DNS localhost; EKU serverAuth and clientAuth
      (so a broker can also present it to another broker under mutual TLS).
  server_key_pem: server.key.pem - the server private key (PKCS8, unencrypted).
  server_pem: server.pem - key then chain in one file, for
      ``ssl.keystore.type=PEM`` + ``ssl.keystore.location``.
  server_key_encrypted_pem: server-encrypted.pem - as server_pem, but the key
      is encrypted (PKCS8, BestAvailableEncryption) with
      `server_key_password`: for ``ssl.key.password``.
  server_p12: server.p12 - PKCS12 keystore with the key, the server
      certificate and the CA certificate, protected by `keystore_password`:
      for ``ssl.keystore.type=PKCS12`` + ``ssl.keystore.password``.
  truststore_p12: truststore.p12 - PKCS12 holding only the CA certificate
      (no key), protected by `truststore_password`: for
      ``ssl.truststore.type=PKCS12`` + ``ssl.truststore.password``.

Clients (all with EKU clientAuth)
  alice_cert_pem / alice_key_pem / alice_pem: alice.crt.pem, alice.key.pem,
      alice.pem - a valid client certificate, subject
      ``CN=alice,OU=eng,O=tierd-tests`` (RFC 4514 order, as Kafka's
      principal builder prints it), signed by the CA; the unencrypted PKCS8
      key; and key-then-certificate in one file (Java's PEM keystore,
      ``ssl.keystore.type=PEM``).
  expired_cert_pem / expired_key_pem / expired_pem: expired.*.pem - a client
      certificate, CN=expired, signed by the CA, whose validity ended
      yesterday: a broker requiring client auth must reject it.
  rogue_cert_pem / rogue_key_pem / rogue_pem: rogue.*.pem - a client
      certificate, CN=rogue, signed by `rogue_ca_pem` (rogue-ca.pem,
      CN=tierd-rogue-ca), a CA the broker does not trust: must be rejected.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Fixed passwords: the PKI is regenerated per test run and never leaves /tmp.
SERVER_KEY_PASSWORD = "server-key-secret"
KEYSTORE_PASSWORD = "keystore-secret"
TRUSTSTORE_PASSWORD = "truststore-secret"

# Validity window of every certificate except the expired one.
NOT_BEFORE_SLACK = datetime.timedelta(hours=1)
LIFETIME = datetime.timedelta(days=2)

CA_NAME = "tierd-test-ca"
ROGUE_CA_NAME = "tierd-rogue-ca"

# Addresses the server certificate is valid for: tests bind brokers on these.
SERVER_IPS = ("127.0.0.1", "127.0.0.2")
SERVER_DNS = ("localhost",)

# Alice's subject, RFC 4514 (most specific first). Kafka's default principal
# builder reports it as "User:CN=alice,OU=eng,O=tierd-tests".
ALICE_SUBJECT = "CN=alice,OU=eng,O=tierd-tests"

_CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH

# X.509 Name attribute order is least specific first; RFC 4514 strings (and
# Kafka principals) print it reversed, i.e. CN first.
_NAME_ORDER = (("O", NameOID.ORGANIZATION_NAME), ("OU", NameOID.ORGANIZATIONAL_UNIT_NAME),
               ("CN", NameOID.COMMON_NAME))  # fmt: skip


@dataclass(frozen=True)
class Pki:
    """Paths of the files `make_pki` wrote, plus the passwords protecting some.

    See the module docstring for what each file holds.
    """

    directory: Path
    ca_pem: Path
    ca_key_pem: Path
    server_cert_pem: Path
    server_key_pem: Path
    server_pem: Path
    server_key_encrypted_pem: Path
    server_p12: Path
    truststore_p12: Path
    alice_cert_pem: Path
    alice_key_pem: Path
    alice_pem: Path
    expired_cert_pem: Path
    expired_key_pem: Path
    expired_pem: Path
    rogue_ca_pem: Path
    rogue_cert_pem: Path
    rogue_key_pem: Path
    rogue_pem: Path
    server_key_password: str = SERVER_KEY_PASSWORD
    keystore_password: str = KEYSTORE_PASSWORD
    truststore_password: str = TRUSTSTORE_PASSWORD
    alice_subject: str = ALICE_SUBJECT


@dataclass(frozen=True)
class _Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def make_pki(directory: Path) -> Pki:
    """Generate the test CA, broker and client credentials into `directory`.

    The directory is created if missing; existing files of the same names are
    overwritten. Every call makes fresh keys.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid_from, valid_to = now - NOT_BEFORE_SLACK, now + LIFETIME

    ca = _make_ca(CA_NAME, valid_from, valid_to)
    rogue_ca = _make_ca(ROGUE_CA_NAME, valid_from, valid_to)

    server = _issue(
        ca,
        _name(CN="localhost", O="tierd-tests"),
        valid_from,
        valid_to,
        eku=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        san=[
            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS),
            *(x509.DNSName(name) for name in SERVER_DNS),
        ],
    )
    alice = _issue(ca, _name(CN="alice", OU="eng", O="tierd-tests"), valid_from, valid_to, eku=[_CLIENT_AUTH])
    expired = _issue(
        ca,
        _name(CN="expired", O="tierd-tests"),
        now - datetime.timedelta(days=3),
        now - datetime.timedelta(days=1),
        eku=[_CLIENT_AUTH],
    )
    rogue = _issue(rogue_ca, _name(CN="rogue", O="tierd-tests"), valid_from, valid_to, eku=[_CLIENT_AUTH])

    ca_pem = _cert_pem(ca.cert)
    server_chain = _cert_pem(server.cert) + ca_pem
    server_key = _key_pem(server.key)
    server_key_encrypted = _key_pem(server.key, SERVER_KEY_PASSWORD)

    def write(name: str, data: bytes, *, secret: bool = False) -> Path:
        path = directory / name
        path.write_bytes(data)
        if secret:
            path.chmod(0o600)
        return path

    def client_files(stem: str, issued: _Issued) -> tuple[Path, Path, Path]:
        cert, key = _cert_pem(issued.cert), _key_pem(issued.key)
        return (
            write(f"{stem}.crt.pem", cert),
            write(f"{stem}.key.pem", key, secret=True),
            write(f"{stem}.pem", key + cert, secret=True),
        )

    alice_files = client_files("alice", alice)
    expired_files = client_files("expired", expired)
    rogue_files = client_files("rogue", rogue)
    return Pki(
        directory=directory,
        ca_pem=write("ca.pem", ca_pem),
        ca_key_pem=write("ca.key.pem", _key_pem(ca.key), secret=True),
        server_cert_pem=write("server.crt.pem", server_chain),
        server_key_pem=write("server.key.pem", server_key, secret=True),
        server_pem=write("server.pem", server_key + server_chain, secret=True),
        server_key_encrypted_pem=write(
            "server-encrypted.pem", server_key_encrypted + server_chain, secret=True
        ),
        server_p12=write(
            "server.p12",
            pkcs12.serialize_key_and_certificates(
                b"server",
                server.key,
                server.cert,
                [ca.cert],
                serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
            ),
            secret=True,
        ),
        truststore_p12=write(
            "truststore.p12",
            pkcs12.serialize_key_and_certificates(
                b"tierd-test-ca",
                None,
                None,
                [ca.cert],
                serialization.BestAvailableEncryption(TRUSTSTORE_PASSWORD.encode()),
            ),
        ),
        alice_cert_pem=alice_files[0],
        alice_key_pem=alice_files[1],
        alice_pem=alice_files[2],
        expired_cert_pem=expired_files[0],
        expired_key_pem=expired_files[1],
        expired_pem=expired_files[2],
        rogue_ca_pem=write("rogue-ca.pem", _cert_pem(rogue_ca.cert)),
        rogue_cert_pem=rogue_files[0],
        rogue_key_pem=rogue_files[1],
        rogue_pem=rogue_files[2],
    )


def _name(**parts: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, parts[key]) for key, oid in _NAME_ORDER if key in parts])


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _make_ca(common_name: str, valid_from: datetime.datetime, valid_to: datetime.datetime) -> _Issued:
    key = _new_key()
    name = _name(CN=common_name, O="tierd-tests")
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Issued(key, cert)


def _issue(
    issuer: _Issued,
    subject: x509.Name,
    valid_from: datetime.datetime,
    valid_to: datetime.datetime,
    *,
    eku: list[x509.ObjectIdentifier],
    san: list[x509.GeneralName] | None = None,
) -> _Issued:
    key = _new_key()
    issuer_ski = issuer.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski), critical=False
        )
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return _Issued(key, builder.sign(issuer.key, hashes.SHA256()))


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password.encode())
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
