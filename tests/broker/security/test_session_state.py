"""The session transition table: every allowed move, every other one refused,
and the paths a connection takes through it."""

from __future__ import annotations

import itertools

import pytest

from broker.security.session_state import (
    SASL_EXCHANGE,
    TRANSITIONS,
    IllegalTransition,
    S,
    SessionMachine,
    SessionState,
)

ALLOWED = sorted(((a, b) for a, tos in TRANSITIONS.items() for b in tos),
                 key=lambda m: (m[0].value, m[1].value))
REFUSED = [(a, b) for a, b in itertools.product(SessionState, SessionState)
           if b not in TRANSITIONS[a]]


def machine_in(state: SessionState) -> SessionMachine:
    m = SessionMachine()
    m.state = state
    return m


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(SessionState)


def test_a_connection_starts_unauthenticated() -> None:
    assert SessionMachine().state is S.UNAUTHENTICATED


@pytest.mark.parametrize(("left", "to"), ALLOWED, ids=lambda s: s.value)
def test_allowed_move(left: SessionState, to: SessionState) -> None:
    m = machine_in(left)
    assert m.move(to) is left
    assert m.state is to


@pytest.mark.parametrize(("left", "to"), REFUSED, ids=lambda s: s.value)
def test_illegal_move_raises_and_stays(left: SessionState, to: SessionState) -> None:
    m = machine_in(left)
    with pytest.raises(IllegalTransition, match=f"{left.value} -> {to.value}"):
        m.move(to)
    assert m.state is left


def test_expired_and_closing_are_final() -> None:
    assert TRANSITIONS[S.EXPIRED] == frozenset()
    assert TRANSITIONS[S.CLOSING] == frozenset()


def test_only_an_authenticated_session_expires_or_reauthenticates() -> None:
    assert [a for a, tos in TRANSITIONS.items() if S.EXPIRED in tos] == [S.AUTHENTICATED]
    assert [a for a, tos in TRANSITIONS.items() if S.REAUTHENTICATING in tos] == [
        S.AUTHENTICATED]


def test_no_way_back_to_setup_once_authenticated() -> None:
    """Reachable from AUTHENTICATED: never the setup states (the setup
    deadline is gone for good once a session is authenticated)."""
    seen, todo = set(), [S.AUTHENTICATED]
    while todo:
        state = todo.pop()
        if state not in seen:
            seen.add(state)
            todo.extend(TRANSITIONS[state])
    assert seen == {S.AUTHENTICATED, S.REAUTHENTICATING, S.EXPIRED, S.CLOSING}


@pytest.mark.parametrize("path", [
    # PLAINTEXT
    [S.AUTHENTICATED],
    # SSL
    [S.TLS_HANDSHAKE, S.AUTHENTICATED],
    # SSL, handshake failed or no principal rule for the certificate
    [S.TLS_HANDSHAKE, S.CLOSING],
    # SASL_PLAINTEXT, then KIP-368: re-authenticated twice, then expired
    [S.AUTHENTICATING, S.AUTHENTICATED, S.REAUTHENTICATING, S.AUTHENTICATED,
     S.REAUTHENTICATING, S.AUTHENTICATED, S.EXPIRED],
    # SASL_SSL, wrong password
    [S.TLS_HANDSHAKE, S.AUTHENTICATING, S.CLOSING],
    # re-authentication as another principal
    [S.AUTHENTICATING, S.AUTHENTICATED, S.REAUTHENTICATING, S.CLOSING],
], ids=["plaintext", "ssl", "ssl-refused", "sasl-reauth-expired", "sasl-ssl-failed",
        "reauth-failed"])
def test_connection_paths(path: list[SessionState]) -> None:
    m = SessionMachine()
    for state in path:
        m.move(state)
    assert m.state is path[-1]


def test_frames_are_sasl_exchange_only_while_authenticating() -> None:
    assert SASL_EXCHANGE == {S.AUTHENTICATING, S.REAUTHENTICATING}
