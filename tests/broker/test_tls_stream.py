"""The server's TLS stream against trio's own TLS client, over memory streams."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.security.tls import build_server_context, principal_of
from broker.security.tls_stream import SEND_SLICE_BYTES, TlsStream
from tests.broker.test_security import _cert, _settings


def _pair(tmp_path: Path, client_cert: bool = True, trusted: bool = True
          ) -> tuple[TlsStream, trio.SSLStream[Any]]:
    server, _ = _cert(tmp_path, "server", "localhost")
    client, _ = _cert(tmp_path, "client", "alice")
    other, _ = _cert(tmp_path, "other", "mallory")
    server_ctx = build_server_context(_settings(
        keystore_location=str(server), truststore_location=str(client if trusted else other),
        client_auth="required" if client_cert else "none"))
    client_ctx = ssl.create_default_context(cafile=str(server))
    if client_cert:
        client_ctx.load_cert_chain(str(client))
    a, b = trio.testing.memory_stream_pair()
    return (TlsStream(a, server_ctx),  # type: ignore[arg-type]
            trio.SSLStream(b, client_ctx, server_hostname="localhost"))


async def _handshake(srv: TlsStream, cli: trio.SSLStream[Any]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(srv.do_handshake)
        nursery.start_soon(cli.do_handshake)


async def test_bulk_data_both_ways_is_byte_identical(tmp_path: Path) -> None:
    srv, cli = _pair(tmp_path)
    await _handshake(srv, cli)
    assert principal_of(srv) == "User:CN=alice,O=Org\\, Inc,C=DE"
    up = os.urandom(3 * 1024 * 1024 + 17)
    down = os.urandom(2 * SEND_SLICE_BYTES + 5)

    async def client() -> None:
        for start in range(0, len(up), 70001):  # odd sizes across records
            await cli.send_all(up[start:start + 70001])
        got = bytearray()
        while len(got) < len(down):
            got += await cli.receive_some()
        assert bytes(got) == down
        await cli.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        received = bytearray()
        while len(received) < len(up):
            chunk = await srv.receive_some()
            assert chunk
            received += chunk
        assert bytes(received) == up
        await srv.send_all(down)
        assert await srv.receive_some() == b""  # the client's close_notify
    await srv.aclose()
    await srv.aclose()  # twice is harmless


async def test_an_untrusted_client_certificate_fails_the_handshake(tmp_path: Path) -> None:
    srv, cli = _pair(tmp_path, trusted=False)
    failures: list[BaseException] = []

    async def client() -> None:
        try:
            await cli.do_handshake()
            await cli.receive_some()  # TLS 1.3: the alert comes after the client's Finished
        except trio.BrokenResourceError as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        with pytest.raises(trio.BrokenResourceError) as caught:
            await srv.do_handshake()
        await srv.aclose()
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
    assert failures


async def test_a_peer_gone_mid_handshake_is_a_broken_stream(tmp_path: Path) -> None:
    srv, cli = _pair(tmp_path)
    await cli.transport_stream.aclose()
    with pytest.raises(trio.BrokenResourceError):
        await srv.do_handshake()
