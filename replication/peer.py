"""A client connection from this broker to another one (controller requests,
replica fetches, transaction markers).

Theory of operation: one TCP connection, one request in flight at a time
(the caller that needs parallelism opens more peers), so a response is
simply the next frame. Framing and codecs are ``protocol.framing`` and
``protocol.client``; this module only moves bytes. The connection is opened
lazily and dropped on any error; the next request reconnects.

Error handling: every failure (refused, reset, timeout, a frame that does
not decode, a correlation id that does not match) raises ``PeerError``,
which callers treat as retriable: they back off and try again, or pick
another broker after a metadata change. Nothing here retries by itself.

Bounds: a response frame larger than ``max_response_bytes`` closes the
connection (PeerError) before its body is buffered.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

from protocol import outbound as client
from protocol.framing import FrameDecoder, FrameTooLarge

log = structlog.get_logger(__name__)

# How much to read from the socket per receive.
_RECEIVE_BYTES = 256 * 1024
# Largest response accepted: replica.fetch.response.max.bytes plus headroom.
DEFAULT_MAX_RESPONSE_BYTES = 128 * 1024 * 1024


# How connections to other brokers are secured (the inter-broker listener's
# TLS and SASL; ``broker.security.client`` builds one): given the TCP stream and
# the peer's host name, the stream to speak Kafka on. None: plain TCP.
Connector = Callable[[trio.SocketStream, str], Awaitable[trio.abc.Stream]]


class PeerError(Exception):
    """The request did not get a usable response (always retriable)."""


class Peer:
    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 connect_timeout_ms: int = 10_000, request_timeout_ms: int = 30_000,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 connector: Connector | None = None) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connector = connector
        self.connect_timeout = connect_timeout_ms / 1000
        self.request_timeout = request_timeout_ms / 1000
        self._max_response = max_response_bytes
        self._stream: trio.abc.Stream | None = None
        self._decoder = FrameDecoder(max_response_bytes)
        self._correlation = itertools.count(1)
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"Peer({self.node_id}@{self.host}:{self.port})"

    async def request(self, request_cls: Any, response_cls: Any, version: int,
                      body: Any, timeout_s: float | None = None) -> Any:
        """Send one request and return the decoded response body.

        Raises:
            PeerError: on any connection, timeout or decoding failure.
        """
        async with self._lock:
            correlation_id = next(self._correlation) & 0x7FFFFFFF
            frame = client.encode_request(request_cls, version, correlation_id, self.client_id,
                                          body)
            timeout = self.request_timeout if timeout_s is None else timeout_s
            try:
                with trio.fail_after(timeout):
                    stream = await self._connect()
                    await stream.send_all(frame)
                    raw = await self._next_frame(stream)
                got, response = client.decode_response(response_cls, version, raw)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                    trio.TooSlowError, FrameTooLarge, client.ProtocolError) as exc:
                await self.close()
                raise PeerError(f"{self}: {type(exc).__name__}: {exc}") from None
            except trio.Cancelled:
                # The answer may still come: the next request on this stream
                # would read it as its own. Drop the connection.
                await self.close()
                raise
            if got != correlation_id:
                await self.close()
                raise PeerError(f"{self}: correlation id {got}, expected {correlation_id}")
            return response

    async def _connect(self) -> trio.abc.Stream:
        if self._stream is None:
            with trio.fail_after(self.connect_timeout):
                tcp = await trio.open_tcp_stream(self.host, self.port)
                try:
                    self._stream = (tcp if self.connector is None
                                    else await self.connector(tcp, self.host))
                except BaseException:
                    await tcp.aclose()
                    raise
            self._decoder = FrameDecoder(self._max_response)
        return self._stream

    async def _next_frame(self, stream: trio.abc.Stream) -> bytes:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            data = await stream.receive_some(_RECEIVE_BYTES)
            if not data:
                raise trio.BrokenResourceError("connection closed by peer")
            self._decoder.feed(data)

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()


class PeerPool:
    """One connection per other broker, for one kind of traffic (its client id).

    Looks endpoints up in the metadata cache each time, so a broker that came
    back on another address gets a new connection; requests to one broker go
    one at a time over its connection (``Peer``'s lock).
    """

    def __init__(self, metadata: Any, client_id: str, request_timeout_ms: int,
                 connector: Connector | None = None) -> None:
        self.metadata = metadata
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connector = connector
        self._peers: dict[int, Peer] = {}
        self._stale: list[Peer] = []

    def get(self, node_id: int) -> Peer | None:
        """The connection to ``node_id``, or None while its endpoint is unknown."""
        endpoint = self.metadata.broker(node_id)
        if endpoint is None:
            return None
        peer = self._peers.get(node_id)
        if peer is None or (peer.host, peer.port) != (endpoint.host, endpoint.port):
            if peer is not None:
                self._stale.append(peer)
            peer = Peer(node_id, endpoint.host, endpoint.port, self.client_id,
                        request_timeout_ms=self.request_timeout_ms, connector=self.connector)
            self._peers[node_id] = peer
        return peer

    async def close(self) -> None:
        peers, self._peers, self._stale = [*self._peers.values(), *self._stale], {}, []
        for peer in peers:
            await peer.close()
