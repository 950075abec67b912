"""The trio TCP server: one task per connection, requests answered in order.

Theory of operation: Kafka clients pipeline requests on a connection and
match responses by order (and correlation id). Like Kafka's broker, we
handle one request of a connection at a time, so responses go out in
request order. A connection reads what the socket has, decodes every
complete frame, handles each, and writes their responses with one send.

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
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog
import trio

from broker import loop_monitor, zero_copy
from broker.context import BrokerContext, Session
from broker.deferred import Deferred
from broker.handlers import HANDLERS
from broker.security import ListenerSecurity, throttling
from broker.security.guards import authorize_and_handle
from broker.security.principal_rules import NoMatchingRule
from broker.security.sasl import SaslAuthenticator, SaslFailure
from broker.security.scram import AuthenticationFailed
from broker.security.tls import ANONYMOUS, ServerTls, principal_of
from broker.security.tls_stream import TlsStream, failure_reason
from config.security import SASL_MECHANISMS
from protocol import api
from protocol.errors import ErrorCode
from protocol.framing import FrameDecoder, FrameTooLarge
from storage.log.file_slice import ShortFileSlice

log = structlog.get_logger(__name__)

# How much to ask the socket for per receive: large enough for a typical
# produce batch in one call, small enough not to matter per connection.
RECEIVE_BYTES = 256 * 1024


# Failure reasons counted as themselves; any other is "invalid_credentials"
# (messages may carry user input and must not become label values).
_BOUNDED_REASONS = frozenset({"unsupported mechanism", "second SaslHandshake"})


class CloseConnection(Exception):
    """Stop serving this connection (after logging why)."""


class Later:
    """An answer still to come in a connection's queue of answers (see
    ``broker.deferred``): ``await finish()`` gives its encoded parts."""

    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], Awaitable[bytes | list[zero_copy.Part] | None]]
                 ) -> None:
        self.finish = finish


# What handling one request gives the connection to send.
Answer = bytes | list[zero_copy.Part] | Later | None


class Connection:
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
        # Until TLS and SASL are done, the connection lives under this deadline.
        self.setup_scope = trio.CancelScope()
        self.sasl = (SaslAuthenticator(security.sasl)
                     if security is not None and security.sasl is not None else None)
        # Set by a failed authentication: answer, then close.
        self.close_after_send = False
        # A client over its quota is not read from until then (KIP-219).
        self.mute_until = 0.0
        # KIP-368: when the authenticated session ends (trio time; inf: never),
        # and a re-authentication under way.
        self.session_ends = math.inf
        self.reauth: SaslAuthenticator | None = None

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
                        await self._tls_handshake(self.security.tls)
                if self.sasl is None:
                    self._setup_done()
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

    def _setup_done(self) -> None:
        """TLS and authentication are finished: no setup deadline any more."""
        self.setup_scope.deadline = math.inf

    async def _tls_handshake(self, tls: ServerTls) -> None:
        stream = TlsStream(self.socket_stream, tls.context())
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            reason = failure_reason(exc.__cause__)
            log.warning("TLS handshake failed", peer=self.peer, listener=self.listener,
                        reason=reason)
            self.ctx.metrics.failed_authentications.labels(self.listener, "TLS", reason).inc()
            raise CloseConnection("tls_handshake") from None
        self.stream = stream
        try:
            principal = principal_of(stream, tls.mapper)
        except NoMatchingRule as exc:
            log.warning("TLS client refused", peer=self.peer, listener=self.listener,
                        reason=str(exc))
            self.ctx.metrics.failed_authentications.labels(
                self.listener, "TLS", "no_matching_principal_rule").inc()
            raise CloseConnection("tls_principal") from None
        self.session = replace(self.session, principal=principal)
        if principal != ANONYMOUS:
            self.ctx.metrics.authentications.labels(self.listener, "TLS").inc()
            log.debug("TLS client authenticated", peer=self.peer, principal=principal)

    async def _loop(self) -> None:
        idle_s = self.security.idle_timeout_s if self.security is not None else math.inf
        drained = True  # the decoder holds no complete frame we stopped before
        while True:
            if self.mute_until > trio.current_time():
                # Over a quota: neither read nor handle until the throttle ends
                # (pipelined requests already read wait too, as in Kafka).
                await trio.sleep_until(self.mute_until)
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
                    if self.close_after_send or self.mute_until > trio.current_time():
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
            if self.close_after_send:
                raise CloseConnection("authentication_failed")

    async def _send(self, out: list[zero_copy.Part | Later]) -> None:
        """Send the answers in order; what is ready before an answer still to
        come goes out first, then that one once it is ready, and so on."""
        ready: list[zero_copy.Part] = []
        for i, item in enumerate(out):
            if not isinstance(item, Later):
                ready.append(item)
                continue
            if ready:
                await self._send_parts(ready)
                ready = []
            try:
                answer = await item.finish()
            except BaseException:
                zero_copy.close_parts(out[i + 1:])
                raise
            if isinstance(answer, list):
                ready.extend(answer)
            elif answer is not None:
                ready.append(answer)
        if ready:
            await self._send_parts(ready)

    async def _send_parts(self, parts: list[zero_copy.Part]) -> None:
        try:
            from_files = await zero_copy.send_parts(self.stream, parts)
        except ShortFileSlice as exc:
            self._reject("short_file_slice", str(exc))
        if from_files:
            self.ctx.metrics.sendfile_bytes.inc(from_files)

    def _reject(self, reason: str, detail: str, **fields: Any) -> None:
        log.warning("closing connection", peer=self.peer, reason=reason, detail=detail, **fields)
        self.ctx.metrics.protocol_errors.labels(reason).inc()
        raise CloseConnection(reason)

    async def _handle(self, frame: bytes) -> Answer:
        sasl = self.reauth or self.sasl
        if sasl is not None and not sasl.complete:
            return await self._authenticate(frame, sasl)
        if self.session_ends < math.inf:
            return await self._handle_in_session(frame)
        return await self._handle_request(frame)

    async def _handle_in_session(self, frame: bytes) -> Answer:
        """KIP-368: a SaslHandshake starts a re-authentication; anything else
        after the session's end closes the connection."""
        assert self.security is not None and self.security.sasl is not None
        key, version = struct.unpack_from(">hh", frame) if len(frame) >= 4 else (-1, -1)
        if key == api.SASL_HANDSHAKE_KEY:
            if version < 1:
                self._reject("sasl_state", "re-authentication needs SaslHandshake v1 or later",
                             listener=self.listener)
            self.reauth = SaslAuthenticator(self.security.sasl)
            return await self._authenticate(frame, self.reauth)
        if trio.current_time() >= self.session_ends:
            log.info("closing connection", peer=self.peer, listener=self.listener,
                     reason="session_expired", principal=self.session.principal,
                     detail="not re-authenticated within connections.max.reauth.ms")
            self.ctx.metrics.expired_sessions.labels(self.listener).inc()
            raise CloseConnection("session_expired")
        return await self._handle_request(frame)

    async def _exchange(self, sasl: SaslAuthenticator, token: bytes) -> bytes:
        """One SASL token's answer; a re-authentication must keep the
        connection's principal and mechanism (as in Kafka).

        Raises:
            AuthenticationFailed: wrong credentials, or another principal.
        """
        answer = await sasl.exchange(token)
        if sasl.complete and sasl is self.reauth and self.sasl is not None and (
                sasl.principal != self.session.principal
                or sasl.mechanism != self.sasl.mechanism):
            raise AuthenticationFailed("re-authentication cannot change the principal or "
                                       "mechanism")
        return answer

    # -- SASL ------------------------------------------------------------------------

    async def _authenticate(self, frame: bytes, sasl: SaslAuthenticator) -> Answer:
        """A frame of a connection that has not authenticated yet (see
        ``broker.security.sasl`` for what is allowed)."""
        if sasl.raw_tokens:
            try:
                answer = await self._exchange(sasl, frame)
            except AuthenticationFailed as exc:
                # SaslHandshake v0 has no way to carry an error: close.
                await self._auth_failed(sasl, str(exc))
                raise CloseConnection("authentication_failed") from None
            if sasl.complete:
                self._authenticated(sasl)
            return struct.pack(">i", len(answer)) + answer
        header = self._header(frame)
        if isinstance(header, bytes):
            return header
        key, version = header.api_key, header.api_version
        if key == api.API_VERSIONS_KEY:
            return await self._handle_request(frame, header)
        allowed = ((key == api.SASL_HANDSHAKE_KEY and not sasl.handshaken)
                   or (key == api.SASL_AUTHENTICATE_KEY and sasl.handshaken))
        if not allowed:
            self._reject("sasl_state", "unexpected Kafka request during SASL authentication",
                         api_key=key, api_version=version, listener=self.listener)
        try:
            request = api.decode_body(header, frame)
        except api.InvalidRequest as exc:
            self._reject("invalid_request", str(exc), api_key=key, api_version=version)
        spec = api.SUPPORTED[key]
        self.ctx.metrics.requests.labels(spec.name, str(version)).inc()
        if key == api.SASL_HANDSHAKE_KEY:
            try:
                response = sasl.handshake(version, request, spec.response[version])
            except SaslFailure as failure:
                self.ctx.metrics.error(spec.name, failure.response.error_code)
                await self._auth_failed(sasl, failure.reason, failure.mechanism)
                self.close_after_send = True
                response = failure.response
            return api.encode_response(header, response)
        resp_cls = spec.response[version]
        try:
            token = await self._exchange(sasl, request.auth_bytes or b"")
        except AuthenticationFailed as exc:
            self.ctx.metrics.error(spec.name, ErrorCode.SASL_AUTHENTICATION_FAILED)
            await self._auth_failed(sasl, str(exc))
            self.close_after_send = True
            return api.encode_response(header, resp_cls(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                auth_bytes=b"", session_lifetime_ms=0))
        lifetime_ms = 0
        if sasl.complete:
            self._authenticated(sasl)
            assert self.security is not None
            lifetime_ms = int(self.security.reauth_s * 1000)
        return api.encode_response(header, resp_cls(error_code=0, error_message=None,
                                                    auth_bytes=token,
                                                    session_lifetime_ms=lifetime_ms))

    async def _auth_failed(self, sasl: SaslAuthenticator, reason: str,
                           mechanism: str | None = None) -> None:
        """Log and count a failed authentication, then wait Kafka's delay."""
        mechanism = mechanism or sasl.mechanism or "-"
        log.warning("authentication failed", peer=self.peer, listener=self.listener,
                    mechanism=mechanism, user=sasl.user, reason=reason)
        label = reason if reason in _BOUNDED_REASONS else "invalid_credentials"
        self.ctx.metrics.failed_authentications.labels(
            self.listener, mechanism if mechanism in SASL_MECHANISMS else "-", label).inc()
        assert self.security is not None
        await trio.sleep(self.security.failed_auth_delay_s)

    def _authenticated(self, sasl: SaslAuthenticator) -> None:
        assert sasl.principal is not None and sasl.mechanism is not None
        assert self.security is not None
        if self.security.reauth_s > 0:
            self.session_ends = trio.current_time() + self.security.reauth_s
        if sasl is self.reauth:
            self.sasl, self.reauth = sasl, None
            self.ctx.metrics.reauthentications.labels(self.listener, sasl.mechanism).inc()
            log.debug("client re-authenticated", peer=self.peer, listener=self.listener,
                      principal=sasl.principal)
            return
        self.session = replace(self.session, principal=sasl.principal)
        self._setup_done()
        self.ctx.metrics.authentications.labels(self.listener, sasl.mechanism).inc()
        log.debug("client authenticated", peer=self.peer, listener=self.listener,
                  mechanism=sasl.mechanism, principal=sasl.principal)

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
            if not self._quotas_apply():
                return Later(lambda: self._answer(header, spec, request, len(frame), started,
                                                  response.finish()))
            # A throttled client is muted before its next request is read
            # (KIP-219): with quotas the answer is awaited here, in turn.
            return await self._answer(header, spec, request, len(frame), started,
                                      response.finish())
        return await self._answer(header, spec, request, len(frame), started, None, response)

    def _quotas_apply(self) -> bool:
        return self.ctx.quotas is not None and bool(self.ctx.quotas.quotas.entries)

    async def _answer(self, header: api.RequestHeader, spec: Any, request: Any, size: int,
                      started: float, pending: Awaitable[Any] | None,
                      response: Any = None) -> bytes | list[zero_copy.Part] | None:
        """A handler's response (awaited first if still to come), throttled by
        quotas and encoded; the request counted in the metrics."""
        try:
            if pending is not None:
                response = await pending
            if response is not None and self._quotas_apply():
                throttle_ms = throttling.apply(self.ctx, self.session, header, request,
                                               response, size, time.perf_counter() - started)
                if throttle_ms > 0:
                    self.mute_until = max(self.mute_until,
                                          trio.current_time() + throttle_ms / 1000)
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
