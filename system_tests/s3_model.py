"""A slower, more realistic S3 for tests and benchmarks: a pacing proxy in front of moto.

moto on loopback answers in microseconds and streams at memory speed, so code
that reads a remote tier looks far faster against it than against AWS, where
a request waits tens of milliseconds for its first byte and one connection
carries tens of MB/s. ``S3ModelProxy`` sits between a client and a moto server
(``MotoServer`` in system_tests/s3_fixtures.py) and adds:

* a first-byte latency (default 30 ms): no response starts before that long
  after its request was fully received (moto's own time counts towards it);
* a bandwidth limit per connection (default 80 MB/s) on response bodies,
  which move in ``BODY_SLICE_BYTES`` slices paced on ``time.monotonic``;
* SlowDown bursts on demand: ``slow_down(n)`` answers the next ``n``
  requests, ``slow_down_for(s)`` every request for ``s`` seconds, with S3's
  503 SlowDown error instead of forwarding them;
* counters: requests by method, GETs, response body bytes sent, SlowDowns
  injected and client connections accepted (``stats()``, ``reset_stats()``).

Bodies stream both ways, one slice per connection in memory at most. Client
connections are kept alive (HTTP/1.1, as boto3 pools them); moto closes its
connection after every response, so each request goes upstream on a fresh
loopback connection, which costs microseconds. Request headers, Range
included, pass through untouched, so SigV4 signatures stay valid. Chunked
request bodies are forwarded chunked (HTTP trailers are dropped).

Limits: the latency is a constant floor, with no distribution or tail; uploads
are not paced; there is no bandwidth limit across connections (a NIC), no
connection or TLS set-up cost, and no request-rate limit of its own (503s come
only when asked for). Only 127.0.0.1 is used.

Concurrency: one thread per client connection. ``slow_down``,
``slow_down_for``, ``stats``, ``reset_stats`` and the ``first_byte_ms`` and
``bandwidth_bytes_per_s`` attributes may be used from any thread at any time;
a new latency or bandwidth applies to requests that start afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import multiprocessing
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import Any

from system_tests.s3_fixtures import (
    HOP_BY_HOP,
    LOOPBACK,
    PROXY_POLL_INTERVAL_S,
    PROXY_UPSTREAM_TIMEOUT_S,
)

# Typical AWS S3 figures for a GET from an EC2 instance in the same region.
DEFAULT_FIRST_BYTE_MS = 30.0
DEFAULT_BANDWIDTH_BYTES_PER_S = 80e6
# Bodies move in slices this big: the memory held per connection, and the
# pacing step (0.8 ms at 80 MB/s, well above time.sleep's resolution).
BODY_SLICE_BYTES = 64 * 1024
# How far behind schedule pacing may fall and still catch up: enough to make
# up for sleep overshoot, so the average rate holds, but a client or upstream
# that stalled longer gets no burst above the modelled rate afterwards.
PACING_SLACK_S = 0.005
# How long S3ModelProcess waits for its child to start, or to stop.
PROCESS_START_TIMEOUT_S = 30.0
# Longest chunk-size or trailer line accepted in a chunked request body.
MAX_CHUNK_LINE = 1024
# Statuses that never carry a body (RFC 9110 6.4.1), besides answers to HEAD.
BODILESS_STATUSES = frozenset({204, 304})

SLOW_DOWN_STATUS = 503
SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                  b"<Message>Please reduce your request rate.</Message></Error>")
BAD_GATEWAY_STATUS = 502
BAD_GATEWAY_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadGateway</Code>'
                    b"<Message>the S3 model proxy could not reach moto</Message></Error>")
BAD_REQUEST_STATUS = 400


@dataclass(frozen=True, slots=True)
class S3ModelStats:
    """A snapshot of the proxy's counters since start or the last ``reset_stats``.

    ``requests`` counts every request received by method, SlowDowns included;
    ``bytes_sent`` counts response body bytes written to clients (error bodies
    included, headers not).
    """

    requests: MappingProxyType[str, int]
    gets: int
    bytes_sent: int
    slow_downs: int
    connections: int

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


class S3ModelProxy:
    """HTTP proxy on loopback that makes a moto server behave more like S3.

    Args:
        upstream_port: the moto server's port on 127.0.0.1.
        first_byte_ms: minimum time from a request fully received to its
            response's first byte; 0 for none.
        bandwidth_bytes_per_s: response body rate per connection; None for
            unlimited.

    Raises:
        ValueError: a negative latency or a bandwidth that is not positive.
    """

    def __init__(self, upstream_port: int, first_byte_ms: float = DEFAULT_FIRST_BYTE_MS,
                 bandwidth_bytes_per_s: float | None = DEFAULT_BANDWIDTH_BYTES_PER_S) -> None:
        if first_byte_ms < 0:
            raise ValueError(f"first_byte_ms must be >= 0, not {first_byte_ms}")
        if bandwidth_bytes_per_s is not None and bandwidth_bytes_per_s <= 0:
            raise ValueError(f"bandwidth_bytes_per_s must be > 0 or None, not {bandwidth_bytes_per_s}")
        self.upstream_port = upstream_port
        self.first_byte_ms = first_byte_ms
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._bytes_sent = 0
        self._slow_downs = 0
        self._connections = 0
        self._slow_down_left = 0
        self._slow_down_until = 0.0
        self._open: set[socket.socket] = set()
        self._server = ThreadingHTTPServer((LOOPBACK, 0), _make_handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        args=(PROXY_POLL_INTERVAL_S,), daemon=True,
                                        name="s3-model-proxy")

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> S3ModelProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, and end the connections still open (idle keep-alives)."""
        if self._thread.is_alive():
            self._server.shutdown()  # waits for serve_forever, so only once started
        self._server.server_close()
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its thread

    def slow_down(self, count: int) -> None:
        """Answer the next ``count`` requests 503 SlowDown (added to any pending)."""
        with self._lock:
            self._slow_down_left += count

    def slow_down_for(self, seconds: float) -> None:
        """Answer every request 503 SlowDown for the next ``seconds``."""
        with self._lock:
            self._slow_down_until = max(self._slow_down_until, time.monotonic() + seconds)

    def stats(self) -> S3ModelStats:
        with self._lock:
            return S3ModelStats(MappingProxyType(dict(self._requests)), self._requests["GET"],
                                self._bytes_sent, self._slow_downs, self._connections)

    def reset_stats(self) -> None:
        """Zero the counters (pending SlowDowns stay)."""
        with self._lock:
            self._requests.clear()
            self._bytes_sent = self._slow_downs = self._connections = 0

    # -- called by the handler threads ---------------------------------------

    def _admit(self, method: str) -> bool:
        """Count the request; True if it is to be answered SlowDown."""
        with self._lock:
            self._requests[method] += 1
            throttle = self._slow_down_left > 0 or time.monotonic() < self._slow_down_until
            if self._slow_down_left > 0:
                self._slow_down_left -= 1
            if throttle:
                self._slow_downs += 1
            return throttle

    def _count_sent(self, size: int) -> None:
        with self._lock:
            self._bytes_sent += size

    def _opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections += 1
            self._open.add(sock)

    def _closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)


@contextmanager
def s3_model_proxy(upstream_port: int, *, first_byte_ms: float = DEFAULT_FIRST_BYTE_MS,
                   bandwidth_bytes_per_s: float | None = DEFAULT_BANDWIDTH_BYTES_PER_S
                   ) -> Iterator[S3ModelProxy]:
    """A started ``S3ModelProxy`` in front of ``upstream_port``, stopped on exit."""
    proxy = S3ModelProxy(upstream_port, first_byte_ms, bandwidth_bytes_per_s).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _make_handler(proxy: S3ModelProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ModelHandler):
        owner = proxy

    return Handler


class _BadRequestBody(Exception):
    """The client's request body is not valid HTTP/1.1 framing."""


class _ModelHandler(BaseHTTPRequestHandler):
    """One client connection: keep-alive, one request at a time."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, a keep-alive
    # peer's delayed ACK would add tens of ms per response.
    disable_nagle_algorithm = True
    owner: S3ModelProxy

    def setup(self) -> None:
        super().setup()
        self.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._closed(self.connection)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, http.client.HTTPException):
            # The client went away, or upstream broke off mid-response: nothing
            # sane is left to send on this connection.
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output quiet

    def _handle(self) -> None:
        try:
            if self.owner._admit(self.command):
                for _ in self._request_body():
                    pass  # drained, so the connection stays usable
                self._reply_small(SLOW_DOWN_STATUS, SLOW_DOWN_BODY, self._first_byte_due())
            else:
                self._proxy()
        except _BadRequestBody:
            self._reply_small(BAD_REQUEST_STATUS, b"", time.monotonic(), close=True)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _first_byte_due(self) -> float:
        return time.monotonic() + self.owner.first_byte_ms / 1000

    def _proxy(self) -> None:
        conn = http.client.HTTPConnection(LOOPBACK, self.owner.upstream_port,
                                          timeout=PROXY_UPSTREAM_TIMEOUT_S)
        try:
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        conn.putheader(name, value)
                self._forward_body(conn)
                due = self._first_byte_due()
                response = conn.getresponse()
            except (OSError, http.client.HTTPException):
                # Upstream failed; the client's body may be half read: close.
                self._reply_small(BAD_GATEWAY_STATUS, BAD_GATEWAY_BODY, time.monotonic(), close=True)
                return
            self._relay(response, due)
        finally:
            conn.close()

    def _forward_body(self, conn: http.client.HTTPConnection) -> None:
        """Send the request body upstream as it arrives (ends the headers too)."""
        if self._chunked_request():
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for data in self._request_body():
                conn.send(b"%x\r\n%b\r\n" % (len(data), data))
            conn.send(b"0\r\n\r\n")
            return
        length = self._content_length()
        if length or self.command in ("PUT", "POST"):
            conn.putheader("Content-Length", str(length))
        conn.endheaders()
        for data in self._request_body():
            conn.send(data)

    def _chunked_request(self) -> bool:
        return self.headers.get("Transfer-Encoding", "").lower() == "chunked"

    def _content_length(self) -> int:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            raise _BadRequestBody from exc
        if length < 0:
            raise _BadRequestBody
        return length

    def _request_body(self) -> Iterator[bytes]:
        """The request body, de-chunked, in slices of at most BODY_SLICE_BYTES."""
        if not self._chunked_request():
            yield from self._read_slices(self._content_length())
            return
        while True:
            try:
                size = int(self.rfile.readline(MAX_CHUNK_LINE).split(b";")[0].strip(), 16)
            except ValueError as exc:
                raise _BadRequestBody from exc
            if size == 0:
                break
            yield from self._read_slices(size)
            self.rfile.readline(MAX_CHUNK_LINE)  # the CRLF after the chunk's data
        while self.rfile.readline(MAX_CHUNK_LINE) not in (b"\r\n", b"\n", b""):
            pass  # trailers

    def _read_slices(self, length: int) -> Iterator[bytes]:
        left = length
        while left > 0:
            data = self.rfile.read(min(left, BODY_SLICE_BYTES))
            if not data:
                raise ConnectionResetError("client closed during the request body")
            left -= len(data)
            yield data

    def _relay(self, response: http.client.HTTPResponse, due: float) -> None:
        """Upstream's response to the client: headers at ``due``, then the paced body."""
        bodiless = self.command == "HEAD" or response.status in BODILESS_STATUSES
        length = response.length  # None: chunked or closed-delimited upstream
        _sleep_until(due)
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        if bodiless:
            upstream_length = response.getheader("Content-Length")
            if upstream_length is not None:
                self.send_header("Content-Length", upstream_length)
            self.end_headers()
            return
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        sent = self._paced_copy(response, chunked=length is None)
        if length is not None and sent < length:
            self.close_connection = True  # upstream cut the body short; so must we

    def _paced_copy(self, response: http.client.HTTPResponse, chunked: bool) -> int:
        """Copy the body slice by slice, each written once its time at the modelled
        rate has passed. Returns the body bytes written."""
        rate = self.owner.bandwidth_bytes_per_s
        sent = 0
        due = time.monotonic()
        while data := response.read(BODY_SLICE_BYTES):
            if rate is not None:
                due = max(due, time.monotonic() - PACING_SLACK_S) + len(data) / rate
                _sleep_until(due)
            self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
            sent += len(data)
            self.owner._count_sent(len(data))
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        return sent

    def _reply_small(self, status: int, body: bytes, due: float, close: bool = False) -> None:
        """A response of our own, not upstream's, whose first byte goes at ``due``."""
        _sleep_until(due)
        self.send_response_only(status)
        if body:
            self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            self.owner._count_sent(len(body))
        if close:
            self.close_connection = True


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class S3ModelProcess:
    """An ``S3ModelProxy`` in a process of its own, driven through a pipe.

    Benchmarks use it: in the benchmark's process the proxy's threads would
    wait for the GIL behind the consumer being measured, and the model would
    answer later and slower than it says. Offers the proxy's ``endpoint_url``,
    ``stats``, ``reset_stats``, ``slow_down`` and ``slow_down_for``. The child
    stops when ``stop`` is called or this process goes away (its end of the
    pipe closes). Not thread-safe.
    """

    def __init__(self, upstream_port: int, first_byte_ms: float = DEFAULT_FIRST_BYTE_MS,
                 bandwidth_bytes_per_s: float | None = DEFAULT_BANDWIDTH_BYTES_PER_S) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._process = ctx.Process(target=_serve_model, name="s3-model-proxy", daemon=True,
                                    args=(child_conn, upstream_port, first_byte_ms,
                                          bandwidth_bytes_per_s))
        self._process.start()
        child_conn.close()
        try:
            if not self._conn.poll(PROCESS_START_TIMEOUT_S):
                raise EOFError
            self.endpoint_url: str = self._conn.recv()
        except EOFError:
            self.stop()
            raise RuntimeError("the S3 model process did not start") from None

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None  # started in __init__
        return pid

    def stats(self) -> S3ModelStats:
        return self._call("stats")

    def reset_stats(self) -> None:
        self._call("reset_stats")

    def slow_down(self, count: int) -> None:
        self._call("slow_down", count)

    def slow_down_for(self, seconds: float) -> None:
        self._call("slow_down_for", seconds)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(("stop", None))
        self._process.join(PROCESS_START_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()

    def _call(self, name: str, arg: Any = None) -> Any:
        self._conn.send((name, arg))
        return self._conn.recv()


def _serve_model(conn: Any, upstream_port: int, first_byte_ms: float,
                 bandwidth_bytes_per_s: float | None) -> None:
    """The child of ``S3ModelProcess``: the proxy, and its commands from ``conn``."""
    proxy = S3ModelProxy(upstream_port, first_byte_ms, bandwidth_bytes_per_s).start()
    try:
        conn.send(proxy.endpoint_url)
        while True:
            try:
                name, arg = conn.recv()
            except EOFError:  # the parent went away
                return
            if name == "stop":
                return
            method = getattr(proxy, name)
            result = method() if arg is None else method(arg)
            if isinstance(result, S3ModelStats):  # its mapping proxy does not pickle
                result = dataclasses.replace(result, requests=dict(result.requests))
            conn.send(result)
    finally:
        proxy.stop()


@contextmanager
def s3_model_process(upstream_port: int, *, first_byte_ms: float = DEFAULT_FIRST_BYTE_MS,
                     bandwidth_bytes_per_s: float | None = DEFAULT_BANDWIDTH_BYTES_PER_S
                     ) -> Iterator[S3ModelProcess]:
    """A started ``S3ModelProcess`` in front of ``upstream_port``, stopped on exit."""
    model = S3ModelProcess(upstream_port, first_byte_ms, bandwidth_bytes_per_s)
    try:
        yield model
    finally:
        model.stop()
