"""A raw client connection for the security tests: plain or TLS (with
alice's client certificate when asked), speaking request frames, with SASL
PLAIN done by hand where a test needs it."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from system_tests._proc import encode_request, recv_exactly
from system_tests.certs import Pki


class Raw:
    def __init__(self, port: int, pki: Pki | None = None, *, client_cert: bool = False) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        if pki is not None:
            ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
            if client_cert:
                ctx.load_cert_chain(str(pki.alice_cert_pem), str(pki.alice_key_pem))
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self.correlation = 0

    def call(self, req: Any, version: int, resp_cls: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(req, version, self.correlation))
        (size,) = struct.unpack(">i", recv_exactly(self.sock, 4))
        return resp_cls[version].decode(recv_exactly(self.sock, size), version=version,
                                        header=True)

    def sasl_plain(self, user: str, password: str) -> Any:
        """SaslHandshake v1 (PLAIN) and SaslAuthenticate v2; returns the latter's answer."""
        hs = self.call(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert hs.error_code == 0, hs
        return self.call(SaslAuthenticateRequest[2](auth_bytes=f"\0{user}\0{password}".encode()),
                         2, SaslAuthenticateResponse)

    def closed_within(self, seconds: float) -> bool:
        self.sock.settimeout(seconds)
        try:
            while self.sock.recv(4096):
                pass
            return True
        except TimeoutError:
            return False
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        self.sock.close()
