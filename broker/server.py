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

import time
from typing import Any

import structlog
import trio

from broker import zero_copy
from broker.context import BrokerContext, Session, client_host, session
from broker.handlers import HANDLERS
from config.listeners import Listener
from protocol import api
from protocol.errors import ErrorCode
from protocol.framing import FrameDecoder, FrameTooLarge
from storage.log.file_slice import ShortFileSlice

log = structlog.get_logger(__name__)

# How much to ask the socket for per receive: large enough for a typical
# produce batch in one call, small enough not to matter per connection.
RECEIVE_BYTES = 256 * 1024


class CloseConnection(Exception):
    """Stop serving this connection (after logging why)."""


class Connection:
    def __init__(self, ctx: BrokerContext, stream: trio.SocketStream,
                 listener: Listener | None = None) -> None:
        self.ctx = ctx
        self.stream = stream
        self.session = (Session(listener.name, listener.security_protocol)
                        if listener is not None else Session())
        self.decoder = FrameDecoder(ctx.config["socket.request.max.bytes"])
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"

    async def serve(self) -> None:
        client_host.set("/" + self.peer.rpartition(":")[0])
        session.set(self.session)
        metrics = self.ctx.metrics
        metrics.connections.inc()
        metrics.connections_total.inc()
        try:
            await self._loop()
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

    async def _loop(self) -> None:
        while True:
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            self.decoder.feed(data)
            out: list[zero_copy.Part] = []
            try:
                while True:
                    try:
                        frame = self.decoder.next_frame()
                    except FrameTooLarge as exc:
                        self._reject("frame_too_large", str(exc))
                    if frame is None:
                        break
                    response = await self._handle(frame)
                    if isinstance(response, list):
                        out.extend(response)
                    elif response is not None:
                        out.append(response)
            except CloseConnection:
                # Requests before the bad one were handled (a produce may be
                # appended): answer them before closing, as Kafka does.
                if out:
                    with trio.move_on_after(5):
                        await self._send(out)
                raise
            except BaseException:
                zero_copy.close_parts(out)
                raise
            if out:
                await self._send(out)

    async def _send(self, parts: list[zero_copy.Part]) -> None:
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

    async def _handle(self, frame: bytes) -> bytes | list[zero_copy.Part] | None:
        try:
            header = api.parse_header(frame)
        except api.UnsupportedVersion as exc:
            return self._unsupported(exc.header)
        except api.InvalidRequest as exc:
            self._reject("invalid_request", str(exc))
        try:
            request = api.decode_body(header, frame)
        except api.InvalidRequest as exc:
            self._reject("invalid_request", str(exc), api_key=header.api_key,
                         api_version=header.api_version)
        spec = api.SUPPORTED[header.api_key]
        started = time.perf_counter()
        try:
            response = await HANDLERS[header.api_key](self.ctx, header, request)
            encoded: bytes | list[zero_copy.Part] | None
            if isinstance(response, zero_copy.SplicedResponse):
                encoded = response.encode(header, spec.is_flexible(header.api_version))
            else:
                encoded = None if response is None else api.encode_response(header, response)
        except CloseConnection:
            raise
        except Exception:
            log.exception("request handler failed", api=spec.name, version=header.api_version,
                          peer=self.peer, client_id=header.client_id)
            self.ctx.metrics.protocol_errors.labels("handler_error").inc()
            raise CloseConnection("handler_error") from None
        finally:
            self.ctx.metrics.requests.labels(spec.name, str(header.api_version)).inc()
            self.ctx.metrics.latency.labels(spec.name).observe(time.perf_counter() - started)
        return encoded

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


async def serve(ctx: BrokerContext, listener: Listener,
                task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Accept connections on ``listener`` until cancelled."""

    async def handler(stream: trio.SocketStream) -> None:
        await Connection(ctx, stream, listener).serve()

    await trio.serve_tcp(handler, listener.port, host=listener.host, task_status=task_status)
