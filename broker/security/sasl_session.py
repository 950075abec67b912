"""One connection's SASL authentication and its KIP-368 re-authentications.

Theory of operation: ``broker.server``'s ``Connection`` keeps where the
session stands (``session_state``) and hands this object the frames of the
SASL exchange; each call returns the encoded answer and a ``Step`` (more to
come, done, or failed) that the connection turns into a transition.
``broker.security.sasl`` checks the handshake and the tokens; this module
adds what a connection needs around them:
- which authenticator the frames are for: the first one, or the one of a
  re-authentication under way (``reauth``), which must keep the principal
  and mechanism of the session (as in Kafka);
- when the session ends (``ends``, trio time; ``connections.max.reauth.ms``
  after each success, never when it is 0) and the lifetime SaslAuthenticate
  tells the client;
- the log lines and metrics of each success and failure, and Kafka's delay
  (``connection.failed.authentication.delay.ms``) before a failure is
  answered.

Error handling: a request out of SASL order or one that does not decode
closes the connection (``broker.closing.reject``); wrong credentials are a
``Step.FAILED`` answer, never an exception.
"""

from __future__ import annotations

import enum
import math
import struct

import structlog
import trio

from broker.closing import reject
from broker.metrics import BrokerMetrics
from broker.security import ListenerSecurity
from broker.security.sasl import SaslAuthenticator, SaslFailure
from broker.security.scram import AuthenticationFailed
from config.security import SASL_MECHANISMS
from protocol import api
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

# Failure reasons counted as themselves; any other is "invalid_credentials"
# (messages may carry user input and must not become label values).
_BOUNDED_REASONS = frozenset({"unsupported mechanism", "second SaslHandshake"})


class Step(enum.Enum):
    CONTINUE = "continue"  # more of the exchange to come
    DONE = "done"  # authenticated, or re-authenticated
    FAILED = "failed"  # send the answer (if any), then close


class SaslSession:
    """The SASL side of one connection on a SASL listener."""

    def __init__(self, security: ListenerSecurity, metrics: BrokerMetrics, peer: str,
                 listener: str) -> None:
        assert security.sasl is not None
        self.security = security
        self.metrics = metrics
        self.peer = peer
        self.listener = listener
        # The session's authenticator (the first authentication's, until it is done).
        self.current = SaslAuthenticator(security.sasl)
        self.reauth: SaslAuthenticator | None = None
        self.ends = math.inf

    @property
    def principal(self) -> str | None:
        """Who the session authenticated as (None until it has)."""
        return self.current.principal

    @property
    def raw_tokens(self) -> bool:
        """Whether frames are bare SASL tokens (after SaslHandshake v0)."""
        return (self.reauth or self.current).raw_tokens

    def expires(self) -> bool:
        """Whether the session has an end (KIP-368 on, and authenticated)."""
        return self.ends < math.inf

    def expired(self) -> bool:
        return trio.current_time() >= self.ends

    def start_reauth(self, version: int) -> None:
        """A SaslHandshake of ``version`` on an authenticated connection.

        Raises:
            CloseConnection: SaslHandshake v0 (re-authentication needs v1+).
        """
        if version < 1:
            reject(self.metrics, self.peer, "sasl_state",
                   "re-authentication needs SaslHandshake v1 or later", listener=self.listener)
        assert self.security.sasl is not None
        self.reauth = SaslAuthenticator(self.security.sasl)

    async def raw_token(self, frame: bytes) -> tuple[bytes | None, Step]:
        """The answer to a bare token frame (None: the failure has none)."""
        sasl = self.reauth or self.current
        try:
            answer = await self._exchange(sasl, frame)
        except AuthenticationFailed as exc:
            # SaslHandshake v0 has no way to carry an error: close.
            await self._failed(sasl, str(exc))
            return None, Step.FAILED
        step = self._done(sasl) if sasl.complete else Step.CONTINUE
        return struct.pack(">i", len(answer)) + answer, step

    async def answer(self, header: api.RequestHeader, frame: bytes) -> tuple[bytes, Step]:
        """The answer to a SaslHandshake or SaslAuthenticate request.

        Raises:
            CloseConnection: another request, or one that does not decode.
        """
        sasl = self.reauth or self.current
        key, version = header.api_key, header.api_version
        allowed = ((key == api.SASL_HANDSHAKE_KEY and not sasl.handshaken)
                   or (key == api.SASL_AUTHENTICATE_KEY and sasl.handshaken))
        if not allowed:
            reject(self.metrics, self.peer, "sasl_state",
                   "unexpected Kafka request during SASL authentication",
                   api_key=key, api_version=version, listener=self.listener)
        try:
            request = api.decode_body(header, frame)
        except api.InvalidRequest as exc:
            reject(self.metrics, self.peer, "invalid_request", str(exc), api_key=key,
                   api_version=version)
        spec = api.SUPPORTED[key]
        self.metrics.requests.labels(spec.name, str(version)).inc()
        if key == api.SASL_HANDSHAKE_KEY:
            try:
                response = sasl.handshake(version, request, spec.response[version])
            except SaslFailure as failure:
                self.metrics.error(spec.name, failure.response.error_code)
                await self._failed(sasl, failure.reason, failure.mechanism)
                return api.encode_response(header, failure.response), Step.FAILED
            return api.encode_response(header, response), Step.CONTINUE
        resp_cls = spec.response[version]
        try:
            token = await self._exchange(sasl, request.auth_bytes or b"")
        except AuthenticationFailed as exc:
            self.metrics.error(spec.name, ErrorCode.SASL_AUTHENTICATION_FAILED)
            await self._failed(sasl, str(exc))
            return api.encode_response(header, resp_cls(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                auth_bytes=b"", session_lifetime_ms=0)), Step.FAILED
        step, lifetime_ms = Step.CONTINUE, 0
        if sasl.complete:
            step = self._done(sasl)
            lifetime_ms = int(self.security.reauth_s * 1000)
        return api.encode_response(header, resp_cls(error_code=0, error_message=None,
                                                    auth_bytes=token,
                                                    session_lifetime_ms=lifetime_ms)), step

    async def _exchange(self, sasl: SaslAuthenticator, token: bytes) -> bytes:
        """One SASL token's answer; a re-authentication must keep the
        session's principal and mechanism (as in Kafka).

        Raises:
            AuthenticationFailed: wrong credentials, or another principal.
        """
        answer = await sasl.exchange(token)
        if sasl.complete and sasl is self.reauth and (
                sasl.principal != self.current.principal
                or sasl.mechanism != self.current.mechanism):
            raise AuthenticationFailed("re-authentication cannot change the principal or "
                                       "mechanism")
        return answer

    async def _failed(self, sasl: SaslAuthenticator, reason: str,
                      mechanism: str | None = None) -> None:
        """Log and count a failed authentication, then wait Kafka's delay."""
        mechanism = mechanism or sasl.mechanism or "-"
        log.warning("authentication failed", peer=self.peer, listener=self.listener,
                    mechanism=mechanism, user=sasl.user, reason=reason)
        label = reason if reason in _BOUNDED_REASONS else "invalid_credentials"
        self.metrics.failed_authentications.labels(
            self.listener, mechanism if mechanism in SASL_MECHANISMS else "-", label).inc()
        await trio.sleep(self.security.failed_auth_delay_s)

    def _done(self, sasl: SaslAuthenticator) -> Step:
        """``sasl`` succeeded: the session (re)starts, logged and counted."""
        assert sasl.principal is not None and sasl.mechanism is not None
        if self.security.reauth_s > 0:
            self.ends = trio.current_time() + self.security.reauth_s
        if sasl is self.reauth:
            self.current, self.reauth = sasl, None
            self.metrics.reauthentications.labels(self.listener, sasl.mechanism).inc()
            log.debug("client re-authenticated", peer=self.peer, listener=self.listener,
                      principal=sasl.principal)
            return Step.DONE
        self.metrics.authentications.labels(self.listener, sasl.mechanism).inc()
        log.debug("client authenticated", peer=self.peer, listener=self.listener,
                  mechanism=sasl.mechanism, principal=sasl.principal)
        return Step.DONE
