"""The trio TCP server: one task per connection, requests answered in order.

Theory of operation: Kafka clients pipeline requests on a connection and
match responses by order (and correlation id). Like Kafka's broker, we
handle one request of a connection at a time, so responses go out in
request order. A connection reads what the socket has, decodes every
complete frame, handles each, and writes their responses with one send.

Before its requests, a connection goes through its listener's TLS and SASL
(and, with KIP-368, re-authenticates): where it stands is a transition table
(``broker.security.session_state``), and the work of each step is done by a
collaborator (``tls_accept``, ``sasl_session``; quota muting: ``muting``).

Bad input never reaches past its own connection: an oversized frame, an
undecodable header or body, or an unsupported API/version (other than
ApiVersions, which gets the v0 fallback answer) closes that connection with a
log line and a metric. A handler bug is logged with its traceback and closes
the connection too; the broker keeps serving everyone else.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, NoReturn

import structlog
import trio

from broker import loop_monitor, zero_copy
from broker.answers import Answer, Later, send_answers
from broker.closing import CloseConnection, reject
from broker.context import BrokerContext, Session
from broker.deferred import Deferred
from broker.handlers import HANDLERS
from broker.security import ListenerSecurity, tls_accept
from broker.security.guards import authorize_and_handle
from broker.security.muting import QuotaMute, quotas_apply
from broker.security.sasl_session import SaslSession, Step
from broker.security.session_state import SASL_EXCHANGE, S, SessionMachine, SessionState
from broker.security.tls import ServerTls
from protocol import api
from protocol.errors import ErrorCode
from protocol.framing import FrameDecoder, FrameTooLarge

log = structlog.get_logger(__name__)

# How much to ask the socket for per receive: large enough for a typical
# produce batch in one call, small enough not to matter per connection.
RECEIVE_BYTES = 256 * 1024


class Connection:
    """One client connection: set up (TLS, SASL) and served until it closes.

    Where the session stands is ``self.machine`` (``session_state``: every
    move checked against its table); TLS (``tls_accept``), SASL and KIP-368
    (``sasl_session``) and quota muting (``muting``) are collaborators it
    calls, each returning what happened for the connection to act on.
    """

    def __init__(self, ctx: BrokerContext, stream: trio.SocketStream,
                 security: ListenerSecurity | None = None) -> None:
        self.ctx = ctx
        self.socket_stream = stream
        self.stream: trio.abc.Stream = stream
        self.security = security
        listener = security.listener if security is not None else None
        self.listener = listener.name if listener is not None else "-"
        self.decoder = FrameDecoder(ctx.config["socket.request.max.bytes"])
        host = ""
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"
        client_host = "/" + self.peer.rpartition(":")[0]
        self.session = (Session(listener.name, listener.security_protocol, host=host,
                                client_host=client_host)
                        if listener is not None else Session(host=host, client_host=client_host))
        self.machine = SessionMachine()
        # Until the session is first AUTHENTICATED, the connection lives under this deadline.
        self.setup_scope = trio.CancelScope()
        self.sasl = (SaslSession(security, ctx.metrics, self.peer, self.listener)
                     if security is not None and security.sasl is not None else None)
        self.mute = QuotaMute()

    async def serve(self) -> None:
        ip = self.peer.rpartition(":")[0]
        limits = self.security.limits if self.security is not None else None
        if limits is None:
            await self._serve()
            return
        await limits.throttle(self.listener)
        refused = limits.admit(self.listener, ip)
        if refused is not None:
            log.warning("connection refused", peer=self.peer, listener=self.listener,
                        reason=refused)
            self.ctx.metrics.connections_refused.labels(self.listener, refused).inc()
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await self.stream.aclose()
            return
        try:
            await self._serve()
        finally:
            limits.release(self.listener, ip)

    async def _serve(self) -> None:
        metrics = self.ctx.metrics
        metrics.connections.inc()
        metrics.connections_total.inc()
        try:
            with self.setup_scope:
                if self.security is not None:
                    self.setup_scope.deadline = (trio.current_time()
                                                 + self.security.setup_timeout_s)
                    if self.security.tls is not None:
                        await self._tls(self.security.tls)
                self._move(S.AUTHENTICATING if self.sasl is not None else S.AUTHENTICATED)
                await self._loop()
            if self.setup_scope.cancelled_caught:
                log.warning("closing connection", peer=self.peer, listener=self.listener,
                            reason="setup_timeout",
                            detail="TLS handshake or authentication not finished in time")
                metrics.setup_timeouts.labels(self.listener).inc()
        except CloseConnection:
            pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:
            # Last line of defence: one connection's failure never reaches the
            # listener's nursery (which would stop the broker).
            log.exception("connection failed", peer=self.peer)
            metrics.protocol_errors.labels("connection_error").inc()
        finally:
            metrics.connections.dec()
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await self.stream.aclose()

    def _move(self, to: SessionState) -> SessionState:
        """Move the session (returns the state left); once AUTHENTICATED, no
        setup deadline any more."""
        left = self.machine.move(to)
        if to is S.AUTHENTICATED:
            self.setup_scope.deadline = math.inf
        return left

    async def _tls(self, tls: ServerTls) -> None:
        """The TLS handshake; the session takes the certificate's principal.

        Raises:
            CloseConnection: the handshake failed or the certificate maps to
                no principal (logged and counted by ``tls_accept``).
        """
        self._move(S.TLS_HANDSHAKE)
        try:
            # Closed as TLS from here on, even if its principal is refused.
            self.stream = await tls_accept.handshake(self.socket_stream, tls, self.ctx.metrics,
                                                     self.peer, self.listener)
            principal = tls_accept.principal(self.stream, tls, self.ctx.metrics, self.peer,
                                             self.listener)
        except tls_accept.TlsRefused as exc:
            self._move(S.CLOSING)
            raise CloseConnection(exc.reason) from None
        self.session = replace(self.session, principal=principal)

    async def _loop(self) -> None:
        idle_s = self.security.idle_timeout_s if self.security is not None else math.inf
        drained = True  # the decoder holds no complete frame we stopped before
        while True:
            # Over a quota: neither read nor handle until the throttle ends
            # (pipelined requests already read wait too, as in Kafka).
            await self.mute.wait()
            if drained:
                with trio.move_on_after(idle_s) as idle:
                    data = await self.stream.receive_some(RECEIVE_BYTES)
                if idle.cancelled_caught:
                    log.info("closing idle connection", peer=self.peer,
                             listener=self.listener, idle_s=idle_s)
                    self.ctx.metrics.idle_closed.labels(self.listener).inc()
                    return
                if not data:
                    return
                self.decoder.feed(data)
            # Answers in request order: encoded parts, or answers still to come
            # (``Later``: an acks=all produce waiting for its ISR).
            out: list[zero_copy.Part | Later] = []
            drained = False
            try:
                while True:
                    try:
                        frame = self.decoder.next_frame()
                    except FrameTooLarge as exc:
                        self._reject("frame_too_large", str(exc))
                    if frame is None:
                        drained = True
                        break
                    response = await self._handle(frame)
                    if isinstance(response, list):
                        out.extend(response)
                    elif isinstance(response, Later):
                        out.append(response)
                    elif response is not None:
                        out.append(response)
                    if self.machine.state is S.CLOSING or self.mute.active():
                        break
            except CloseConnection:
                # Requests before the bad one were handled (a produce may be
                # appended): answer them before closing, as Kafka does.
                if out:
                    with trio.move_on_after(5):
                        await self._send(out)
                raise
            except BaseException:
                zero_copy.close_parts(item for item in out if not isinstance(item, Later))
                raise
            if out:
                await self._send(out)
            if self.machine.state is S.CLOSING:
                raise CloseConnection("authentication_failed")

    async def _send(self, out: list[zero_copy.Part | Later]) -> None:
        await send_answers(self.stream, out, self.ctx.metrics, self.peer)

    def _reject(self, reason: str, detail: str, **fields: Any) -> NoReturn:
        reject(self.ctx.metrics, self.peer, reason, detail, **fields)

    async def _handle(self, frame: bytes) -> Answer:
        if self.machine.state in SASL_EXCHANGE:
            return await self._authenticate(frame)
        if self.sasl is not None and self.sasl.expires():
            return await self._handle_in_session(frame)
        return await self._handle_request(frame)

    async def _handle_in_session(self, frame: bytes) -> Answer:
        """KIP-368: a SaslHandshake starts a re-authentication; anything else
        after the session's end closes the connection."""
        assert self.sasl is not None
        key, version = struct.unpack_from(">hh", frame) if len(frame) >= 4 else (-1, -1)
        if key == api.SASL_HANDSHAKE_KEY:
            self.sasl.start_reauth(version)
            self._move(S.REAUTHENTICATING)
            return await self._authenticate(frame)
        if self.sasl.expired():
            self._move(S.EXPIRED)
            log.info("closing connection", peer=self.peer, listener=self.listener,
                     reason="session_expired", principal=self.session.principal,
                     detail="not re-authenticated within connections.max.reauth.ms")
            self.ctx.metrics.expired_sessions.labels(self.listener).inc()
            raise CloseConnection("session_expired")
        return await self._handle_request(frame)

    async def _authenticate(self, frame: bytes) -> Answer:
        """A frame of the SASL exchange (see ``broker.security.sasl`` for what
        is allowed); ApiVersions is served as at any time."""
        assert self.sasl is not None
        if self.sasl.raw_tokens:
            answer, step = await self.sasl.raw_token(frame)
        else:
            header = self._header(frame)
            if isinstance(header, bytes):
                return header
            if header.api_key == api.API_VERSIONS_KEY:
                return await self._handle_request(frame, header)
            answer, step = await self.sasl.answer(header, frame)
        if step is Step.FAILED:
            self._move(S.CLOSING)
            if answer is None:
                raise CloseConnection("authentication_failed")
        elif step is Step.DONE:
            if self._move(S.AUTHENTICATED) is S.AUTHENTICATING:
                assert self.sasl.principal is not None
                self.session = replace(self.session, principal=self.sasl.principal)
        return answer

    def _header(self, frame: bytes) -> api.RequestHeader | bytes:
        """The frame's request header, or the answer to an unsupported version
        (closes the connection on an undecodable header)."""
        try:
            return api.parse_header(frame)
        except api.UnsupportedVersion as exc:
            return self._unsupported(exc.header)
        except api.InvalidRequest as exc:
            self._reject("invalid_request", str(exc))
            raise AssertionError("unreachable") from None

    async def _handle_request(self, frame: bytes, header: api.RequestHeader | None = None
                              ) -> Answer:
        if header is None:
            parsed = self._header(frame)
            if isinstance(parsed, bytes):
                return parsed
            header = parsed
        loop_monitor.doing(f"{api.SUPPORTED[header.api_key].name}.v{header.api_version}")
        try:
            request = api.decode_body(header, frame)
        except api.InvalidRequest as exc:
            self._reject("invalid_request", str(exc), api_key=header.api_key,
                         api_version=header.api_version)
        spec = api.SUPPORTED[header.api_key]
        started = time.perf_counter()
        handler = HANDLERS[header.api_key]
        try:
            if self.ctx.acls is None:
                response = await handler(self.ctx, header, request, self.session)
            else:
                response = await authorize_and_handle(self.ctx, self.ctx.acls.authorizer,
                                                      header, request, self.session, handler)
        except BaseException as exc:
            self._handler_done(header, spec, started, exc)
            raise AssertionError("unreachable") from None
        if isinstance(response, Deferred):
            if not quotas_apply(self.ctx):
                return Later(lambda: self._answer(header, spec, request, len(frame), started,
                                                  response.finish()))
            # A throttled client is muted before its next request is read
            # (KIP-219): with quotas the answer is awaited here, in turn.
            return await self._answer(header, spec, request, len(frame), started,
                                      response.finish())
        return await self._answer(header, spec, request, len(frame), started, None, response)

    async def _answer(self, header: api.RequestHeader, spec: Any, request: Any, size: int,
                      started: float, pending: Awaitable[Any] | None,
                      response: Any = None) -> bytes | list[zero_copy.Part] | None:
        """A handler's response (awaited first if still to come), throttled by
        quotas and encoded; the request counted in the metrics."""
        try:
            if pending is not None:
                response = await pending
            if response is not None and quotas_apply(self.ctx):
                self.mute.record(self.ctx, self.session, header, request, response, size,
                                 time.perf_counter() - started)
            encoded: bytes | list[zero_copy.Part] | None
            if isinstance(response, api.WrappedResponse):
                encoded = response.encode(header, spec.is_flexible(header.api_version))
            else:
                encoded = None if response is None else api.encode_response(header, response)
        except BaseException as exc:
            self._handler_done(header, spec, started, exc)
            raise AssertionError("unreachable") from None
        self._handler_done(header, spec, started, None)
        return encoded

    def _handler_done(self, header: api.RequestHeader, spec: Any, started: float,
                      exc: BaseException | None) -> None:
        """Count the request; a handler's failure closes the connection
        (CloseConnection and cancellation pass through)."""
        metrics = self.ctx.metrics
        metrics.child(metrics.requests, spec.name, str(header.api_version)).inc()
        metrics.child(metrics.latency, spec.name).observe(time.perf_counter() - started)
        if exc is None:
            return
        if isinstance(exc, CloseConnection) or not isinstance(exc, Exception):
            raise exc
        log.exception("request handler failed", api=spec.name, version=header.api_version,
                      peer=self.peer, client_id=header.client_id, exc_info=exc)
        metrics.protocol_errors.labels("handler_error").inc()
        raise CloseConnection("handler_error") from None

    def _unsupported(self, header: api.RequestHeader) -> bytes:
        if header.api_key == api.API_VERSIONS_KEY:
            log.info("ApiVersions version unsupported; answering v0", peer=self.peer,
                     version=header.api_version)
            self.ctx.metrics.error("ApiVersions", ErrorCode.UNSUPPORTED_VERSION)
            return api.encode_api_versions_fallback(header.correlation_id,
                                                    ErrorCode.UNSUPPORTED_VERSION)
        self._reject("unsupported_version", "api key or version not supported",
                     api_key=header.api_key, api_version=header.api_version,
                     client_id=header.client_id)
        raise AssertionError("unreachable")


async def serve(ctx: BrokerContext, security: ListenerSecurity,
                task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Accept connections on one listener until cancelled."""

    async def handler(stream: trio.SocketStream) -> None:
        await Connection(ctx, stream, security).serve()

    listener = security.listener
    await trio.serve_tcp(handler, listener.port, host=listener.host, task_status=task_status)
