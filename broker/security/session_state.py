"""Where one client connection stands in authentication: a transition table.

Theory of operation: a connection is accepted UNAUTHENTICATED. A listener
with TLS (SSL, SASL_SSL) first runs the TLS handshake (TLS_HANDSHAKE); a
listener with SASL (SASL_PLAINTEXT, SASL_SSL) then takes only ApiVersions,
SaslHandshake and SaslAuthenticate (AUTHENTICATING); PLAINTEXT and SSL
connections are AUTHENTICATED as soon as they are set up. Until a connection
first reaches AUTHENTICATED it lives under
``tierd.connection.setup.timeout.ms``.

With ``connections.max.reauth.ms`` (KIP-368) an authenticated SASL session
has an end: a SaslHandshake before it starts a re-authentication
(REAUTHENTICATING; back to AUTHENTICATED, with a new end, once it succeeds);
any other request after it finds the session EXPIRED, and the connection is
closed. A TLS handshake or an authentication that fails moves to CLOSING:
the answer the protocol has for it (if any) is sent, then the connection is
closed. EXPIRED and CLOSING are final.

What is not a state here: closes for bad input (a malformed frame, an
unsupported version, a request out of SASL order) and timeouts (setup, idle)
end the connection in whatever state it is in (``broker.server``).
"""

from __future__ import annotations

import enum


class SessionState(enum.Enum):
    UNAUTHENTICATED = "unauthenticated"
    TLS_HANDSHAKE = "tls_handshake"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATING = "reauthenticating"
    EXPIRED = "expired"
    CLOSING = "closing"


class IllegalTransition(RuntimeError):
    """A move the table does not allow (our bug, never the client's)."""


S = SessionState
TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    S.UNAUTHENTICATED: frozenset({S.TLS_HANDSHAKE, S.AUTHENTICATING, S.AUTHENTICATED}),
    S.TLS_HANDSHAKE: frozenset({S.AUTHENTICATING, S.AUTHENTICATED, S.CLOSING}),
    S.AUTHENTICATING: frozenset({S.AUTHENTICATED, S.CLOSING}),
    S.AUTHENTICATED: frozenset({S.REAUTHENTICATING, S.EXPIRED}),
    S.REAUTHENTICATING: frozenset({S.AUTHENTICATED, S.CLOSING}),
    S.EXPIRED: frozenset(),
    S.CLOSING: frozenset(),
}

# The states in which frames are SASL tokens or requests of the SASL exchange.
SASL_EXCHANGE = frozenset({S.AUTHENTICATING, S.REAUTHENTICATING})


class SessionMachine:
    """One connection's ``SessionState``; ``move`` checks ``TRANSITIONS``."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = S.UNAUTHENTICATED

    def move(self, to: SessionState) -> SessionState:
        """Go to ``to``; returns the state left.

        Raises:
            IllegalTransition: ``TRANSITIONS`` has no such move.
        """
        left = self.state
        if to not in TRANSITIONS[left]:
            raise IllegalTransition(f"session: {left.value} -> {to.value}")
        self.state = to
        return left
