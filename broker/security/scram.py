"""SCRAM (RFC 5802, RFC 7677): credentials, their stores, and the server side
of one exchange.

Credentials: as Kafka keeps them, never the password: a random salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"), written in Kafka's text form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``. Clients
that set a credential (AlterUserScramCredentials) send the salt and the
salted password; the broker derives the two keys and keeps only them.

Stores: in cluster mode ZooKeeper's ``/config/users/<name>`` (Kafka's node,
one config entry per mechanism), read at every authentication so a change
made through any broker applies at once; on a single node a JSON file in the
log directory (``tierd-scram-credentials.json``, mode 0600, written
atomically with fsync).

Exchange: ``ScramServer`` is fed the client's two messages and answers
server-first and server-final. Unknown users and wrong proofs fail the same
way (no user enumeration); every failure raises ``AuthenticationFailed``
with a message that names no secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from replication.zk_configs import ZkConfigs
from replication.zookeeper import ZkClient
from storage.log import checkpoint

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's mechanism ids in Describe/AlterUserScramCredentials.
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
CREDENTIALS_FILE = "tierd-scram-credentials.json"


class AuthenticationFailed(Exception):
    """The client did not authenticate; the message is safe to log and send."""


class InvalidCredential(ValueError):
    """A credential that cannot be stored (AlterUserScramCredentials)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes,
                             iterations: int) -> ScramCredential:
        digest = MECHANISMS[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        return cls(salt, hashlib.new(digest, client_key).digest(),
                   hmac.digest(salted_password, b"Server Key", digest), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Raises:
            ValueError: not Kafka's credential form.
        """
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))


class CredentialStore(Protocol):
    async def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    async def users(self) -> dict[str, dict[str, ScramCredential]]: ...

    async def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]],
                    deletions: Iterable[tuple[str, str]]) -> None: ...


def _parse_entries(entries: dict[str, Any]) -> dict[str, ScramCredential]:
    out = {}
    for mechanism, text in entries.items():
        if mechanism in MECHANISMS:
            try:
                out[mechanism] = ScramCredential.from_text(str(text))
            except (ValueError, KeyError):
                continue  # unreadable: as if absent (authentication fails)
    return out


class LocalCredentialStore:
    """Credentials of a single-node broker, in a file of its log directory."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, CREDENTIALS_FILE)
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = trio.Lock()
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self._users = {u: _parse_entries(m) for u, m in data.get("users", {}).items()}
        except FileNotFoundError:
            pass

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    async def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(m) for u, m in self._users.items() if m}

    async def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]],
                    deletions: Iterable[tuple[str, str]]) -> None:
        async with self._lock:
            users = {u: dict(m) for u, m in self._users.items()}
            for user, mechanism in deletions:
                users.get(user, {}).pop(mechanism, None)
            for user, mechanism, credential in upserts:
                users.setdefault(user, {})[mechanism] = credential
            users = {u: m for u, m in users.items() if m}
            text = json.dumps({"version": 1, "users": {
                u: {mech: c.to_text() for mech, c in m.items()} for u, m in users.items()}},
                indent=1, sort_keys=True)
            await trio.to_thread.run_sync(_write_private, self.path, text)
            self._users = users


def _write_private(path: str, text: str) -> None:
    old = os.umask(0o077)
    try:
        checkpoint.atomic_write(path, text, True)
    finally:
        os.umask(old)


class ZkCredentialStore:
    """Credentials in ZooKeeper (``/config/users/<name>``), as Kafka keeps them."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.configs = ZkConfigs(zk)

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return _parse_entries(await self.configs.get_user_config(user)).get(mechanism)

    async def users(self) -> dict[str, dict[str, ScramCredential]]:
        out = {}
        for user in await self.configs.get_users():
            found = _parse_entries(await self.configs.get_user_config(user))
            if found:
                out[user] = found
        return out

    async def alter(self, upserts: Iterable[tuple[str, str, ScramCredential]],
                    deletions: Iterable[tuple[str, str]]) -> None:
        changes: dict[str, list[tuple[str, ScramCredential | None]]] = {}
        for user, mechanism in deletions:
            changes.setdefault(user, []).append((mechanism, None))
        for user, mechanism, upsert in upserts:
            changes.setdefault(user, []).append((mechanism, upsert))
        for user, items in changes.items():
            config = await self.configs.get_user_config(user)
            for mechanism, change in items:
                if change is None:
                    config.pop(mechanism, None)
                else:
                    config[mechanism] = change.to_text()
            await self.configs.set_user_config(user, config)


# -- the exchange -----------------------------------------------------------------------


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed("malformed SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _saslname(text: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is invalid."""
    out = text.replace("=2C", ",").replace("=3D", "=")
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("invalid user name encoding")
    return out


class ScramServer:
    """The server side of one SCRAM exchange (two client messages)."""

    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.store = store
        self.user: str | None = None
        # The user name the client claimed (for logs), known or not.
        self.claimed: str | None = None
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    @property
    def complete(self) -> bool:
        return self._state == "done"

    async def respond(self, token: bytes) -> bytes:
        """The answer to the client's next message.

        Raises:
            AuthenticationFailed: malformed message, unknown user, wrong proof.
        """
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from None
        if self._state == "first":
            return await self._first(message)
        if self._state == "final":
            return self._final(message)
        raise AuthenticationFailed("unexpected SCRAM message after the exchange ended")

    async def _first(self, message: str) -> bytes:
        # gs2-header: "n,," / "y,," / "n,a=<authzid>," then client-first-bare.
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and
                                                           not parts[1].startswith("a=")):
            raise AuthenticationFailed("malformed SCRAM client-first message "
                                       "(channel binding is not supported)")
        self._gs2 = f"{parts[0]},{parts[1]},"
        bare = parts[2]
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("malformed SCRAM client-first message")
        user = _saslname(attrs[0][1])
        self.claimed = user[:200]
        authzid = _saslname(parts[1][2:]) if parts[1] else ""
        if authzid and authzid != user:
            raise AuthenticationFailed("the authorization id must be the user name")
        extensions = dict(attrs[2:])
        if extensions.get("tokenauth", "false").lower() == "true":
            raise AuthenticationFailed("delegation tokens are not supported")
        credential = await self.store.get(user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed(_invalid(self.mechanism))
        self.user = user
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_attr = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("malformed SCRAM client-final message")
        attrs = dict(_attributes(without_proof))
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM client-final message") from None
        # Kafka accepts a final nonce that ends with ours: older librdkafka
        # (2.0.2, Debian's kcat) sends its own nonce again in front of the combined one.
        if binding != self._gs2.encode() or not attrs.get("r", "").endswith(self._nonce):
            raise AuthenticationFailed("SCRAM nonce or channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self.digest)
        if len(proof) != len(signature):
            raise AuthenticationFailed(_invalid(self.mechanism))
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(),
                                   self._credential.stored_key):
            raise AuthenticationFailed(_invalid(self.mechanism))
        self._state = "done"
        verifier = hmac.digest(self._credential.server_key, auth_message, self.digest)
        return b"v=" + base64.b64encode(verifier)


def _invalid(mechanism: str) -> str:
    return (f"Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {mechanism}")


class ScramClient:
    """The client side of one SCRAM exchange (brokers authenticating to brokers)."""

    def __init__(self, mechanism: str, user: str, password: str,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.user = user
        self.password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """Raises:
            AuthenticationFailed: a server-first message that does not fit ours.
        """
        text = server_first.decode("utf-8", "replace")
        attrs = dict(_attributes(text))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or not salt or not iterations.isdigit():
            raise AuthenticationFailed("unexpected SCRAM server-first message")
        if not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
            raise AuthenticationFailed("SCRAM iteration count out of range")
        self._salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(),
                                           base64.b64decode(salt), int(iterations))
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = hmac.digest(self._salted, b"Client Key", self.digest)
        stored = hashlib.new(self.digest, client_key).digest()
        signature = hmac.digest(stored, self._auth_message, self.digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Raises:
            AuthenticationFailed: the server did not prove it knows the credential.
        """
        server_key = hmac.digest(self._salted, b"Server Key", self.digest)
        expected = b"v=" + base64.b64encode(hmac.digest(server_key, self._auth_message,
                                                        self.digest))
        if not hmac.compare_digest(expected, server_final):
            raise AuthenticationFailed("the server's SCRAM signature is wrong")
