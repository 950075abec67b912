"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: the handshake and
authentication of one connection, Kafka's way.

Theory of operation: a connection on a SASL listener must authenticate before
anything else. Until it has, it may send ApiVersions and SaslHandshake; any
other request closes the connection (Kafka: "Unexpected Kafka request of
type ... during SASL handshake"). SaslHandshake names the mechanism:
- v1 (every current client): the SASL tokens then travel in
  SaslAuthenticate requests (v0-2);
- v0 (old clients): the tokens then travel as bare size-prefixed frames,
  answered the same way.
A mechanism the listener does not offer is answered UNSUPPORTED_SASL_MECHANISM
with the offered list, and the connection is closed.

Mechanisms: PLAIN (RFC 4616) checks ``user_<name>="<password>"`` entries of
the listener's JAAS config (``listener.name.<l>.plain.sasl.jaas.config``, else
``sasl.jaas.config``), as Kafka's PlainLoginModule; SCRAM-SHA-256 and
SCRAM-SHA-512 check the credential store (``scram``). The principal is
``User:<name>``.

Failure: the response carries SASL_AUTHENTICATION_FAILED and a message that
never holds a secret; it is sent after connection.failed.authentication.delay.ms,
then the connection is closed. The failure is logged (user name, mechanism,
reason) and counted. Authentication not finished within
tierd.connection.setup.timeout.ms closes the connection too (``server``).
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, field
from typing import Any

from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from broker.security.scram import AuthenticationFailed, CredentialStore, ScramServer
from config import BrokerConfig
from config.defs import ConfigError
from config.listeners import Listener
from config.security import SASL_MECHANISMS
from protocol.errors import ErrorCode

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of a one-module JAAS config string.

    Raises:
        ValueError: not ``<class> required|optional|... key="value" ...;``.
    """
    body = text.strip().rstrip(";").strip()
    parts = body.split(None, 2)
    if len(parts) < 2 or parts[1] not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError("expected '<LoginModule class> required key=\"value\" ...;'")
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(parts[2]
                                                                          if len(parts) > 2
                                                                          else "")}
    return parts[0], options


def jaas_for(config: BrokerConfig, listener: str, mechanism: str) -> dict[str, str]:
    """The JAAS options of ``mechanism`` on ``listener`` (Kafka's lookup order:
    listener.name.<l>.<mechanism>.sasl.jaas.config, then sasl.jaas.config).

    Raises:
        ConfigError: the JAAS text does not parse.
    """
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.values.get(key)
    if text is None:
        key, text = "sasl.jaas.config", config.values.get("sasl.jaas.config")
    if not text:
        return {}
    try:
        return parse_jaas(str(text))[1]
    except ValueError as exc:
        raise ConfigError(key, "[hidden]", str(exc)) from None


@dataclass(slots=True)
class SaslSettings:
    """One SASL listener's mechanisms and what they check against."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    store: CredentialStore | None = None

    @classmethod
    def of(cls, config: BrokerConfig, listener: Listener,
           store: CredentialStore | None) -> SaslSettings:
        """Raises:
            ConfigError: a mechanism tierd does not offer, or bad JAAS text.
        """
        mechanisms = tuple(m.upper() for m in config.for_listener(
            listener.name, "sasl.enabled.mechanisms"))
        for m in mechanisms:
            if m not in SASL_MECHANISMS:
                raise ConfigError("sasl.enabled.mechanisms", ",".join(mechanisms),
                                  f"{m} is not supported (tierd offers "
                                  f"{', '.join(SASL_MECHANISMS)})")
        if not mechanisms:
            raise ConfigError("sasl.enabled.mechanisms", "", "a SASL listener needs mechanisms")
        plain: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            options = jaas_for(config, listener.name, "PLAIN")
            plain = {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}
        return cls(mechanisms, plain, store)


class SaslFailure(Exception):
    """Authentication failed: answer ``response`` (after the delay) and close."""

    def __init__(self, response: Any, reason: str, user: str | None, mechanism: str) -> None:
        super().__init__(reason)
        self.response = response
        self.reason = reason
        self.user = user
        self.mechanism = mechanism


class SaslAuthenticator:
    """One connection's SASL state: handshake, exchange, done."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: bare token frames follow
        self.principal: str | None = None
        self._scram: ScramServer | None = None
        self._claimed: str | None = None

    @property
    def complete(self) -> bool:
        return self.principal is not None

    @property
    def handshaken(self) -> bool:
        return self.mechanism is not None

    def handshake(self, version: int, request: Any, resp_cls: Any) -> Any:
        """The SaslHandshake answer.

        Raises:
            SaslFailure: a mechanism not offered, or a second handshake.
        """
        offered = list(self.settings.mechanisms)
        mechanism = str(request.mechanism).upper()
        if self.mechanism is not None:
            raise SaslFailure(resp_cls(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                       mechanisms=offered),
                              "second SaslHandshake", None, mechanism)
        if mechanism not in offered:
            raise SaslFailure(resp_cls(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                       mechanisms=offered),
                              "unsupported mechanism", None, mechanism[:40])
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism in SCRAM_MECHANISMS:
            if self.settings.store is None:  # pragma: no cover - built with a store
                raise AssertionError("SCRAM without a credential store")
            self._scram = ScramServer(mechanism, self.settings.store)
        return resp_cls(error_code=0, mechanisms=offered)

    async def exchange(self, token: bytes) -> bytes:
        """The answer to one SASL token; ``complete`` once authenticated.

        Raises:
            AuthenticationFailed: wrong credentials or a malformed token.
        """
        if self.mechanism is None:
            raise AuthenticationFailed("SaslAuthenticate before SaslHandshake")
        if self.mechanism == "PLAIN":
            user = self._plain(token)
            self.principal = f"User:{user}"
            return b""
        assert self._scram is not None
        answer = await self._scram.respond(token)
        if self._scram.complete:
            self.principal = f"User:{self._scram.user}"
        return answer

    @property
    def user(self) -> str | None:
        """The user name the client claimed so far (for logs)."""
        if self._scram is not None:
            return self._scram.claimed
        return self._claimed

    def _plain(self, token: bytes) -> str:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8") from None
        self._claimed = user[:200]
        if not user or not password:
            raise AuthenticationFailed("PLAIN token without user name or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("the authorization id must be the user name")
        expected = self.settings.plain_users.get(user)
        # Compare even for an unknown user, so timing does not tell users apart.
        ok = hmac.compare_digest((expected or "\x00" + password).encode(), password.encode())
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        return user
