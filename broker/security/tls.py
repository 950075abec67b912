"""TLS for SSL and SASL_SSL listeners: the server context, its reload, and the
principal of a client certificate.

Theory of operation: ``ServerTls`` builds one ``ssl.SSLContext`` per TLS
listener from that listener's ``ssl.*`` keys (``listener.name.<l>.`` first)
when the broker starts; a bad keystore, truststore or setting stops the start
with a ``ConfigError`` naming the key. Keystores are PEM (a file with key and
chain, or Kafka's inline ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``)
or PKCS12 (read with ``cryptography``); truststores likewise.

Reload without restart: every new connection asks ``context()``, which at
most once per ``RELOAD_CHECK_S`` compares the keystore and truststore files'
modification times and sizes with those it loaded; if they changed, it builds
a new context. A new context that fails to build is logged and counted, and
the old one stays in use (connections keep working on the old certificate).
Open connections keep the context they were accepted with. A dynamic config
change of the listener's keystore or truststore (``reconfigure``) switches to
the new files the same way.

Principal: ``ssl.principal.mapping.rules`` DEFAULT, as Kafka's: the client
certificate's subject as an RFC 2253 string (``User:CN=alice,OU=eng,O=Org``);
``User:ANONYMOUS`` without a client certificate.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from broker.security.principal_rules import PrincipalMapper
from config import BrokerConfig
from config.defs import ConfigError
from config.listeners import Listener

log = structlog.get_logger(__name__)

# How often (at most) a new connection checks the key files for changes.
RELOAD_CHECK_S = 1.0

ANONYMOUS = "User:ANONYMOUS"

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One listener's ssl.* keys."""

    keystore_type: str
    keystore_location: str | None
    keystore_password: str | None
    key_password: str | None
    keystore_key: str | None
    keystore_chain: str | None
    truststore_type: str
    truststore_location: str | None
    truststore_password: str | None
    truststore_certificates: str | None
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    principal_rules: str

    @classmethod
    def of(cls, config: BrokerConfig, listener: str) -> TlsSettings:
        def get(key: str) -> Any:
            return config.for_listener(listener, key)
        return cls(get("ssl.keystore.type"), get("ssl.keystore.location"),
                   get("ssl.keystore.password"), get("ssl.key.password"),
                   get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"),
                   get("ssl.truststore.type"), get("ssl.truststore.location"),
                   get("ssl.truststore.password"), get("ssl.truststore.certificates"),
                   get("ssl.client.auth"), tuple(get("ssl.enabled.protocols")),
                   tuple(get("ssl.cipher.suites") or ()), get("ssl.principal.mapping.rules"))

    def files(self) -> list[str]:
        return [f for f in (self.keystore_location, self.truststore_location) if f]


def _file_state(paths: list[str]) -> tuple[tuple[str, float, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime, st.st_size))
        except OSError:
            out.append((path, -1.0, -1))
    return tuple(out)


@contextmanager
def _pem_files(*contents: bytes | None) -> Any:
    """Private temporary files holding ``contents`` (None stays None)."""
    with tempfile.TemporaryDirectory(prefix="tierd-tls-") as tmp:
        os.chmod(tmp, 0o700)
        paths: list[str | None] = []
        for n, data in enumerate(contents):
            if data is None:
                paths.append(None)
                continue
            path = Path(tmp) / f"{n}.pem"
            path.write_bytes(data)
            paths.append(str(path))
        yield paths


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(key, path, f"cannot read: {exc.strerror}") from None


def _pkcs12(key: str, path: str, password: str | None) -> Any:
    try:
        return pkcs12.load_key_and_certificates(
            _read(key, path), password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(key, path, f"not a readable PKCS12 store (wrong password?): {exc}") \
            from None


def _refuse_jks(key: str, value: str) -> None:
    if value == "JKS":
        raise ConfigError(key, value, "Java keystores (JKS) cannot be read by tierd: use PEM "
                                      "or PKCS12 (keytool -importkeystore -deststoretype "
                                      "PKCS12 converts one)")


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if s.keystore_key or s.keystore_chain:
        if s.keystore_type != "PEM" or not (s.keystore_key and s.keystore_chain):
            raise ConfigError("ssl.keystore.key", "[hidden]",
                              "inline keys need ssl.keystore.type=PEM and both "
                              "ssl.keystore.key and ssl.keystore.certificate.chain")
        with _pem_files(s.keystore_chain.encode(), s.keystore_key.encode()) as (chain, key):
            _load_chain(ctx, chain, key, s.key_password or s.keystore_password)
        return
    if not s.keystore_location:
        raise ConfigError("ssl.keystore.location", None,
                          "a TLS listener needs a keystore (its key and certificate)")
    _refuse_jks("ssl.keystore.type", s.keystore_type)
    if s.keystore_type == "PEM":
        _load_chain(ctx, s.keystore_location, None, s.key_password or s.keystore_password)
        return
    key, cert, extra = _pkcs12("ssl.keystore.location", s.keystore_location,
                               s.keystore_password)
    if key is None or cert is None:
        raise ConfigError("ssl.keystore.location", s.keystore_location,
                          "the PKCS12 store holds no private key and certificate")
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *(extra or [])])
    with _pem_files(chain, pem_key) as (chain_path, key_path):
        _load_chain(ctx, chain_path, key_path, None)


def _load_chain(ctx: ssl.SSLContext, chain: str, key: str | None, password: str | None) -> None:
    try:
        ctx.load_cert_chain(chain, key, password=password)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError("ssl.keystore.location", chain if key is None else "[inline]",
                          f"cannot load the key and certificate chain "
                          f"(wrong ssl.key.password?): {exc}") from None


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings) -> bool:
    """Load trusted CAs; False if none are configured."""
    try:
        if s.truststore_certificates:
            ctx.load_verify_locations(cadata=s.truststore_certificates)
            return True
        if not s.truststore_location:
            return False
        _refuse_jks("ssl.truststore.type", s.truststore_type)
        if s.truststore_type == "PEM":
            ctx.load_verify_locations(cafile=s.truststore_location)
            return True
        _, cert, extra = _pkcs12("ssl.truststore.location", s.truststore_location,
                                 s.truststore_password)
        certs = [c for c in [cert, *(extra or [])] if c is not None]
        if not certs:
            raise ConfigError("ssl.truststore.location", s.truststore_location,
                              "the PKCS12 store holds no certificate")
        ctx.load_verify_locations(cadata="".join(
            c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
        return True
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError("ssl.truststore.location", s.truststore_location or "[inline]",
                          f"cannot load trusted certificates: {exc}") from None


def _protocol_bounds(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    versions = [_VERSIONS[v] for v in s.enabled_protocols if v in _VERSIONS]
    if not versions:
        raise ConfigError("ssl.enabled.protocols", ",".join(s.enabled_protocols),
                          f"none of {list(_VERSIONS)}")
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)


def principal_mapper(s: TlsSettings) -> PrincipalMapper:
    """The listener's ``ssl.principal.mapping.rules``.

    Raises:
        ConfigError: a rule that cannot be parsed.
    """
    try:
        return PrincipalMapper(s.principal_rules)
    except ValueError as exc:
        raise ConfigError("ssl.principal.mapping.rules", s.principal_rules, str(exc)) from None


def build_server_context(s: TlsSettings) -> ssl.SSLContext:
    """The SSLContext of one listener.

    Raises:
        ConfigError: unreadable or inconsistent TLS settings.
    """
    principal_mapper(s)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocol_bounds(ctx, s)
    if s.cipher_suites:
        try:
            ctx.set_ciphers(":".join(s.cipher_suites))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites", ",".join(s.cipher_suites),
                              "no usable cipher suite (OpenSSL names expected)") from None
    _load_keystore(ctx, s)
    has_trust = _load_truststore(ctx, s)
    if s.client_auth != "none" and not has_trust:
        raise ConfigError("ssl.client.auth", s.client_auth,
                          "checking client certificates needs a truststore")
    ctx.verify_mode = _CLIENT_AUTH[s.client_auth]
    return ctx


def load_client_side(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    """Fill a client context (a broker connecting to another): trust the
    listener's truststore and present its keystore, if one is configured.

    Raises:
        ConfigError: unreadable settings, or no truststore to check the peer by.
    """
    _protocol_bounds(ctx, s)
    if s.keystore_location or s.keystore_key:
        _load_keystore(ctx, s)
    if not _load_truststore(ctx, s):
        raise ConfigError("ssl.truststore.location", None,
                          "a broker connecting over TLS needs a truststore to check the "
                          "other broker's certificate")


class ServerTls:
    """One TLS listener's context, rebuilt when its key files change."""

    def __init__(self, config: BrokerConfig, listener: Listener,
                 on_reload_error: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.listener = listener.name
        self._settings = TlsSettings.of(config, listener.name)
        self._context = build_server_context(self._settings)
        self.mapper = principal_mapper(self._settings)
        self._state = _file_state(self._settings.files())
        self._checked = clock()
        self._clock = clock
        self._on_reload_error = on_reload_error

    def context(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked >= RELOAD_CHECK_S:
            self._checked = now
            state = _file_state(self._settings.files())
            if state != self._state:
                self._reload(state)
        return self._context

    def reconfigure(self, config: BrokerConfig) -> None:
        """Use the listener's keystore and truststore settings in ``config`` (a
        dynamic config changed them) for new connections.

        Raises:
            ConfigError: the new settings cannot be loaded (the old ones stay).
        """
        settings = TlsSettings.of(config, self.listener)
        if settings == self._settings:
            return
        self._context = build_server_context(settings)
        self._settings = settings
        self.mapper = principal_mapper(settings)
        self._state = _file_state(settings.files())
        log.info("TLS settings of the listener reconfigured", listener=self.listener)

    def _reload(self, state: tuple[tuple[str, float, int], ...]) -> None:
        try:
            self._context = build_server_context(self._settings)
        except ConfigError as exc:
            log.error("TLS key files changed and cannot be loaded; keeping the previous ones",
                      listener=self.listener, error=str(exc))
            self._on_reload_error()
            return
        finally:
            self._state = state
        log.info("TLS key files reloaded", listener=self.listener)


def principal_of(ssl_object: Any, mapper: PrincipalMapper | None = None) -> str:
    """Kafka's principal of a TLS peer: its certificate subject (RFC 2253),
    mapped by ``ssl.principal.mapping.rules``; ANONYMOUS without a certificate.

    Raises:
        NoMatchingRule: no mapping rule applies to the subject.
    """
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + (mapper.name(subject) if mapper is not None else subject)
