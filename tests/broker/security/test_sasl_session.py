"""A connection's SASL side in process: the steps it reports to the
connection, the session's end (KIP-368), and what closes the connection."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker.closing import CloseConnection
from broker.metrics import BrokerMetrics
from broker.security import ListenerSecurity
from broker.security.sasl import SaslSettings
from broker.security.sasl_session import SaslSession, Step
from config.listeners import Listener
from protocol import api, outbound
from protocol.errors import ErrorCode

REAUTH_S = 60.0
DELAY_S = 0.1


def session(reauth_s: float = REAUTH_S) -> SaslSession:
    security = ListenerSecurity(Listener("SASL", "SASL_PLAINTEXT", "127.0.0.1", 0),
                                None, SaslSettings(("PLAIN",), {"bob": "pw", "eve": "pw"}),
                                setup_timeout_s=10, failed_auth_delay_s=DELAY_S,
                                idle_timeout_s=600, reauth_s=reauth_s)
    return SaslSession(security, BrokerMetrics(), "127.0.0.1:5555", "SASL")


def frame(cls: Any, version: int, **fields: Any) -> tuple[api.RequestHeader, bytes]:
    raw = outbound.encode_request(cls, version, 7, "test", cls[version](**fields))[4:]
    return api.parse_header(raw), raw


async def step(s: SaslSession, cls: Any, resp_cls: Any, version: int, **fields: Any
               ) -> tuple[Any, Step]:
    header, raw = frame(cls, version, **fields)
    answer, result = await s.answer(header, raw)
    return outbound.decode_response(resp_cls, version, answer[4:])[1], result


async def login(s: SaslSession, user: str = "bob", password: str = "pw") -> tuple[Any, Step]:
    hs, result = await step(s, SaslHandshakeRequest, SaslHandshakeResponse, 1,
                            mechanism="PLAIN")
    assert (hs.error_code, result) == (0, Step.CONTINUE)
    return await step(s, SaslAuthenticateRequest, SaslAuthenticateResponse, 2,
                      auth_bytes=f"\0{user}\0{password}".encode())


async def test_handshake_then_authenticate_starts_a_session_with_an_end(autojump_clock: Any
                                                                        ) -> None:
    s = session()
    assert not s.expires()
    resp, result = await login(s)
    assert (resp.error_code, result) == (0, Step.DONE)
    assert resp.session_lifetime_ms == int(REAUTH_S * 1000)
    assert s.principal == "User:bob"
    assert s.expires() and not s.expired()
    await trio.sleep(REAUTH_S)
    assert s.expired()


async def test_without_reauth_the_session_never_ends() -> None:
    s = session(reauth_s=0)
    resp, result = await login(s)
    assert (result, resp.session_lifetime_ms) == (Step.DONE, 0)
    assert not s.expires()


async def test_wrong_password_fails_after_the_delay(autojump_clock: Any) -> None:
    s = session()
    started = trio.current_time()
    resp, result = await login(s, password="nope")
    assert result is Step.FAILED
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert trio.current_time() - started == pytest.approx(DELAY_S)
    assert s.principal is None


async def test_unsupported_mechanism_is_answered_then_fails(autojump_clock: Any) -> None:
    resp, result = await step(session(), SaslHandshakeRequest, SaslHandshakeResponse, 1,
                              mechanism="GSSAPI")
    assert (resp.error_code, result) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, Step.FAILED)


async def test_reauthentication_keeps_the_principal(autojump_clock: Any) -> None:
    s = session()
    await login(s)
    s.start_reauth(1)
    resp, result = await login(s)
    assert (resp.error_code, result) == (0, Step.DONE)
    s.start_reauth(1)
    resp, result = await login(s, user="eve")
    assert result is Step.FAILED
    assert "cannot change the principal" in resp.error_message
    assert s.principal == "User:bob"


async def test_reauthentication_needs_handshake_v1() -> None:
    s = session()
    await login(s)
    with pytest.raises(CloseConnection):
        s.start_reauth(0)


async def test_requests_out_of_sasl_order_close() -> None:
    header, raw = frame(SaslAuthenticateRequest, 2, auth_bytes=b"\0bob\0pw")
    with pytest.raises(CloseConnection):
        await session().answer(header, raw)


async def test_bare_tokens_after_handshake_v0(autojump_clock: Any) -> None:
    s = session()
    hs, result = await step(s, SaslHandshakeRequest, SaslHandshakeResponse, 0,
                            mechanism="PLAIN")
    assert (hs.error_code, result) == (0, Step.CONTINUE)
    assert s.raw_tokens
    assert await s.raw_token(b"\0bob\0pw") == (struct.pack(">i", 0), Step.DONE)


async def test_a_bad_bare_token_has_no_answer(autojump_clock: Any) -> None:
    s = session()
    await step(s, SaslHandshakeRequest, SaslHandshakeResponse, 0, mechanism="PLAIN")
    assert await s.raw_token(b"\0bob\0nope") == (None, Step.FAILED)
