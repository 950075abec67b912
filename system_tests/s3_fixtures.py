"""A real S3 endpoint for tests: a moto server process, and a fault-injecting proxy.

* ``MotoServer`` runs ``python -m moto.server`` on 127.0.0.1 and a free port
  and speaks real HTTP; nothing is mocked in-process.
* ``FaultProxy`` is a small threaded HTTP proxy in front of it. Each request
  is forwarded on its own upstream connection (and answered with
  ``Connection: close``), unless an injected ``FaultRule`` matches it: then
  it is answered 500, its connection reset mid-body, or its response body
  truncated, cut off or corrupted. Point a client's endpoint at
  ``proxy.endpoint_url`` to put it behind the proxy.

Pytest fixtures (import them into a conftest.py to use them):
``moto_server`` (session), ``s3_bucket`` (a fresh bucket per test),
``fault_proxy`` (per test), ``aws_test_env`` (fake credentials in the
environment, so boto3's standard chain finds them and nothing real).

Only loopback addresses are used.
"""

from __future__ import annotations

import enum
import http.client
import os
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest

from system_tests.harness import free_port  # noqa: F401 - tests import it from here
from system_tests.http_process import LOOPBACK, HttpServerProcess

REGION = "us-east-1"

# Credentials moto accepts; the env also blocks the real chain (profiles, IMDS).
TEST_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}

# Upstream calls from the proxy: generous, moto on loopback answers in ms.
PROXY_UPSTREAM_TIMEOUT_S = 30.0
# How often the proxy's accept loop checks for shutdown: short, so stopping
# the proxy at the end of each test is quick.
PROXY_POLL_INTERVAL_S = 0.05
# How much of a request body the RESET fault reads before resetting, so the
# client is mid-upload when the connection dies.
RESET_AFTER_BYTES = 64 * 1024

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "expect", "content-length",
})

INJECTED_ERROR_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                       b"<Message>fault injected by the test proxy</Message></Error>")


def s3_client(endpoint_url: str, **config: Any) -> Any:
    """A boto3 S3 client for tests, with the fake credentials given explicitly."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=REGION,
        aws_access_key_id=TEST_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        config=botocore.config.Config(**config))


def list_keys(client: Any, bucket: str, prefix: str = "") -> list[str]:
    """Every object key under ``prefix`` (all pages)."""
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return keys


def list_uploads(client: Any, bucket: str, prefix: str = "") -> list[str]:
    """Keys of the multipart uploads still open under ``prefix``."""
    reply = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [upload["Key"] for upload in reply.get("Uploads", [])]


def broker_s3_settings(endpoint_url: str, bucket: str, prefix: str = "") -> dict[str, str]:
    """Broker config entries that select the S3 RSM against this endpoint."""
    return {
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.bucket": bucket,
        "rsm.config.prefix": prefix,
        "rsm.config.region": REGION,
        "rsm.config.endpoint.url": endpoint_url,
    }


# -- moto server -------------------------------------------------------------


class MotoServer(HttpServerProcess):
    """A ``python -m moto.server`` process on loopback. Not thread-safe."""

    name = "moto server"

    def __init__(self, log_path: Path) -> None:
        super().__init__(log_path)
        self._client: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)]

    def _env(self) -> dict[str, str]:
        return {**os.environ, **TEST_AWS_ENV}

    def stop(self) -> None:
        """Terminate the process (kill if it lingers). Idempotent."""
        self._client = None
        super().stop()

    def client(self) -> Any:
        """A shared boto3 client for this server (clients are thread-safe)."""
        if self._client is None:
            self._client = s3_client(self.endpoint_url)
        return self._client

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        name = name or f"tierd-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name


# -- fault-injecting proxy ---------------------------------------------------


class Fault(enum.Enum):
    """What the proxy does to a matching request."""

    ERROR_500 = "error_500"  # read the request, answer 500 InternalError, forward nothing
    RESET = "reset"  # read part of the request body, then reset the connection (RST)
    SHORT_BODY = "short_body"  # forward; return half the body with a matching Content-Length
    CUT_BODY = "cut_body"  # forward; promise the whole body, send half, close
    CORRUPT_BODY = "corrupt_body"  # forward; flip one byte in the middle of the body


@dataclass
class FaultRule:
    """Matches requests by method, key suffix and query substring (all optional).

    ``times`` None means until cleared; ``hits`` counts the requests faulted.
    """

    fault: Fault
    method: str | None = None
    key_suffix: str | None = None
    query: str | None = None
    times: int | None = None
    hits: int = 0

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return ((self.method is None or self.method == method)
                and (self.key_suffix is None or path.endswith(self.key_suffix))
                and (self.query is None or self.query in query))


class FaultProxy:
    """HTTP proxy on loopback in front of an upstream S3 endpoint.

    Concurrency: serves each connection on its own thread; ``inject`` and
    ``clear`` may be called from the test thread at any time.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.requests: list[tuple[str, str]] = []  # (method, path?query) seen
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((LOOPBACK, 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        args=(PROXY_POLL_INTERVAL_S,), daemon=True,
                                        name="s3-fault-proxy")

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def inject(self, fault: Fault, *, method: str | None = None, key_suffix: str | None = None,
               query: str | None = None, times: int | None = None) -> FaultRule:
        """Apply ``fault`` to matching requests from now on."""
        rule = FaultRule(fault, method, key_suffix, query, times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule: the proxy forwards everything again."""
        with self._lock:
            self._rules.clear()

    def count(self, method: str, query: str = "") -> int:
        """How many requests with ``method`` (and ``query`` in the target) were seen."""
        with self._lock:
            return sum(1 for m, target in self.requests if m == method and query in target)

    def match(self, method: str, path: str, query: str) -> Fault | None:
        """Record the request; the fault to apply, if a rule matches."""
        with self._lock:
            self.requests.append((method, f"{path}?{query}"))
            for rule in self._rules:
                if rule.matches(method, path, query):
                    rule.hits += 1
                    return rule.fault
        return None


def _make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        owner = proxy

    return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output quiet

    def _handle(self) -> None:
        path, _, query = self.path.partition("?")
        fault = self.owner.match(self.command, path, query)
        if fault is Fault.RESET:
            self._read_body(limit=RESET_AFTER_BYTES)
            self._reset()
            return
        body = self._read_body()
        if fault is Fault.ERROR_500:
            self._reply(500, [("Content-Type", "application/xml")], INJECTED_ERROR_BODY)
            return
        status, headers, payload = self._forward(body)
        if fault is Fault.SHORT_BODY:
            payload = payload[: len(payload) // 2]
        elif fault is Fault.CORRUPT_BODY and payload:
            middle = len(payload) // 2
            payload = payload[:middle] + bytes([payload[middle] ^ 0xFF]) + payload[middle + 1:]
        elif fault is Fault.CUT_BODY:
            self._reply(status, headers, payload[: len(payload) // 2], length=len(payload))
            return
        self._reply(status, headers, payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _read_body(self, limit: int | None = None) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if limit is not None:
            length = min(length, limit)
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(LOOPBACK, self.owner.upstream_port,
                                          timeout=PROXY_UPSTREAM_TIMEOUT_S)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    conn.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            payload = response.read()
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            if self.command == "HEAD":
                headers.append(("Content-Length", response.getheader("Content-Length", "0")))
            return response.status, headers, payload
        finally:
            conn.close()

    def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes,
               length: int | None = None) -> None:
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(payload) if length is None else length))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.close_connection = True

    def _reset(self) -> None:
        """Close with SO_LINGER 0: the peer sees a TCP reset, not a clean close."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


# -- pytest fixtures -----------------------------------------------------------


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto server for the session (tests isolate by bucket)."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> str:
    """A fresh, empty bucket."""
    return moto_server.create_bucket()


@pytest.fixture
def fault_proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the session's moto server."""
    proxy = FaultProxy(moto_server.port).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def aws_test_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Fake credentials in the environment for boto3's standard chain."""
    for name, value in TEST_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(TEST_AWS_ENV)
