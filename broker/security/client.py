"""How this broker secures its own connections to other brokers: the
inter-broker listener's security protocol, from the client side.

Theory of operation: ``replication.peer.Peer`` opens a TCP connection and
hands it to the connector built here (built once at start and passed to
whatever builds peers), which returns the stream to use:
- SSL / SASL_SSL: a TLS handshake trusting the inter-broker listener's
  truststore, presenting its keystore (a broker's certificate serves both
  ways, as in Kafka), checking the peer's host name unless
  ``ssl.endpoint.identification.algorithm`` is empty;
- SASL_PLAINTEXT / SASL_SSL: SaslHandshake v1 then SaslAuthenticate v2 with
  ``sasl.mechanism.inter.broker.protocol``, the user name and password taken
  from the ``username`` / ``password`` options of that mechanism's JAAS
  config on the inter-broker listener (Kafka's convention).
A failure raises ``PeerSecurityError``; the peer treats it as any connection
failure (retried by its caller).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import trio
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker.security.sasl import jaas_for
from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from broker.security.scram import AuthenticationFailed, ScramClient
from broker.security.tls import TlsSettings, load_client_side
from config import BrokerConfig
from config.defs import ConfigError
from config.security import SASL_MECHANISMS
from protocol import outbound
from protocol.framing import FrameDecoder
from replication.peer import Connector

_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 2
_MAX_FRAME = 1 << 20


class PeerSecurityError(OSError):
    """The TLS handshake or SASL authentication with another broker failed."""


@dataclass(frozen=True, slots=True)
class _Credentials:
    mechanism: str
    username: str
    password: str


def build_peer_connector(config: BrokerConfig) -> Connector | None:
    """The connector for the inter-broker listener (None: plain TCP).

    Raises:
        ConfigError: TLS files unusable, or SASL without a mechanism or
            credentials.
    """
    listener = config.listeners.inter_broker_listener()
    tls_context = None
    if listener.uses_tls:
        settings = TlsSettings.of(config, listener.name)
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        load_client_side(tls_context, settings)
        check = config.for_listener(listener.name, "ssl.endpoint.identification.algorithm")
        tls_context.check_hostname = bool(check)
    credentials = None
    if listener.uses_sasl:
        mechanism = str(config.for_listener(listener.name,
                                            "sasl.mechanism.inter.broker.protocol")).upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError("sasl.mechanism.inter.broker.protocol", mechanism,
                              f"one of {', '.join(SASL_MECHANISMS)} is needed for the SASL "
                              f"inter-broker listener {listener.name}")
        options = jaas_for(config, listener.name, mechanism)
        if not options.get("username") or "password" not in options:
            raise ConfigError(f"listener.name.{listener.name.lower()}.{mechanism.lower()}"
                              ".sasl.jaas.config", "[hidden]",
                              "username and password options are needed for inter-broker "
                              "authentication")
        credentials = _Credentials(mechanism, options["username"], options["password"])
    if tls_context is None and credentials is None:
        return None

    async def connect(stream: trio.SocketStream, host: str) -> trio.abc.Stream:
        out: trio.abc.Stream = stream
        if tls_context is not None:
            tls = trio.SSLStream(stream, tls_context, server_hostname=host)
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                raise PeerSecurityError(f"TLS handshake with {host} failed: "
                                        f"{exc.__cause__}") from None
            out = tls
        if credentials is not None:
            await _authenticate(out, credentials)
        return out

    return connect


class _Exchange:
    """Requests and responses on a connection before the peer takes it over."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(_MAX_FRAME)
        self.correlation = 0

    async def call(self, request_cls: object, response_cls: object, version: int,
                   body: object) -> object:
        self.correlation += 1
        await self.stream.send_all(outbound.encode_request(request_cls, version,
                                                           self.correlation, "tierd-sasl",
                                                           body))
        while (frame := self.decoder.next_frame()) is None:
            data = await self.stream.receive_some(65536)
            if not data:
                raise PeerSecurityError("connection closed during SASL authentication")
            self.decoder.feed(data)
        _, response = outbound.decode_response(response_cls, version, frame)
        return response


async def _authenticate(stream: trio.abc.Stream, cred: _Credentials) -> None:
    ex = _Exchange(stream)
    hs = await ex.call(SaslHandshakeRequest, SaslHandshakeResponse, _HANDSHAKE_VERSION,
                       SaslHandshakeRequest[_HANDSHAKE_VERSION](mechanism=cred.mechanism))
    if hs.error_code:  # type: ignore[attr-defined]
        raise PeerSecurityError(f"SaslHandshake refused {cred.mechanism} "
                                f"(error {hs.error_code})")  # type: ignore[attr-defined]

    async def send(token: bytes) -> bytes:
        resp = await ex.call(SaslAuthenticateRequest, SaslAuthenticateResponse,
                             _AUTHENTICATE_VERSION,
                             SaslAuthenticateRequest[_AUTHENTICATE_VERSION](auth_bytes=token))
        if resp.error_code:  # type: ignore[attr-defined]
            raise PeerSecurityError(f"SASL authentication as {cred.username!r} failed: "
                                    f"{resp.error_message}")  # type: ignore[attr-defined]
        return bytes(resp.auth_bytes or b"")  # type: ignore[attr-defined]

    if cred.mechanism == "PLAIN":
        await send(b"\x00" + cred.username.encode() + b"\x00" + cred.password.encode())
        return
    assert cred.mechanism in SCRAM_MECHANISMS
    client = ScramClient(cred.mechanism, cred.username, cred.password)
    try:
        server_first = await send(client.first())
        client.verify(await send(client.final(server_first)))
    except AuthenticationFailed as exc:
        raise PeerSecurityError(str(exc)) from None
