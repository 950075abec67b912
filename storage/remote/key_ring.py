"""The key ring of remote segment encryption: the RSA key pairs that wrap
each segment's data key (the model of Aiven's tiered-storage plugin).

Theory of operation: every encrypted segment gets its own random AES-256
data key; the key is stored with the segment (in its codec manifest) wrapped
with the public key of the ring's *active* pair (RSA-OAEP, SHA-256), next to
that pair's id. Reading unwraps it with the private key of the id recorded,
so switching the active id (rotation) changes only new segments: the old ones
stay readable as long as their pair stays in the ring. A segment whose pair
left the ring, or whose pair was replaced by different keys under the same
id, fails to read with ``KeyRingError``: never with wrong bytes.

Settings (``rsm.config.`` prefix stripped)::

    encryption.key.pair.id=k2
    encryption.key.pairs=k1,k2
    encryption.key.pairs.k1.public.key.file=/etc/tierd/k1-public.pem
    encryption.key.pairs.k1.private.key.file=/etc/tierd/k1-private.pem
    ...

PEM files (PKCS#8 or traditional private keys, SubjectPublicKeyInfo public
keys), read once at start-up. A pair may lack its private key file on a
broker that only writes (wrapping needs only the public key), or its public
key file when it is kept for reading only.

Concurrency: immutable after construction; thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from config.defs import ConfigError
from storage.remote.segment_codec import CodecError

ACTIVE_KEY = "encryption.key.pair.id"
PAIRS_KEY = "encryption.key.pairs"
# Per-pair settings: encryption.key.pairs.<id>.public.key.file / .private.key.file.
PAIR_PREFIX = PAIRS_KEY + "."
PUBLIC_SUFFIX = ".public.key.file"
PRIVATE_SUFFIX = ".private.key.file"

# A data key is AES-256's key length.
DATA_KEY_BYTES = 32
# RSA below 2048 bits is broken by current guidance (NIST SP 800-131A).
MIN_RSA_BITS = 2048

_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(),
                     label=None)


class KeyRingError(CodecError):
    """A data key cannot be unwrapped: its key pair is not in the ring, lacks
    a private key, or is not the pair that wrapped it. Not retriable."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    key_id: str
    public: rsa.RSAPublicKey | None
    private: rsa.RSAPrivateKey | None


class KeyRing:
    """The configured key pairs and which one wraps new data keys."""

    def __init__(self, active_id: str, pairs: Mapping[str, KeyPair]) -> None:
        """Raises: ConfigError: the active pair is unknown or has no public key."""
        pair = pairs.get(active_id)
        if pair is None:
            raise ConfigError("rsm.config." + ACTIVE_KEY, active_id,
                              f"not one of rsm.config.{PAIRS_KEY} {sorted(pairs)}")
        if pair.public is None:
            raise ConfigError(f"rsm.config.{PAIR_PREFIX}{active_id}{PUBLIC_SUFFIX}", None,
                              "the active key pair needs a public key")
        self.active_id = active_id
        self._pairs = dict(pairs)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> KeyRing:
        """The ring the stripped ``rsm.config.*`` settings describe.

        Raises:
            ConfigError: a missing setting, an unreadable or non-RSA key file.
        """
        active = (settings.get(ACTIVE_KEY) or "").strip()
        if not active:
            raise ConfigError("rsm.config." + ACTIVE_KEY, None,
                              "required when rsm.config.encryption.enabled is true")
        ids = [i.strip() for i in (settings.get(PAIRS_KEY) or "").split(",") if i.strip()]
        if not ids:
            raise ConfigError("rsm.config." + PAIRS_KEY, None,
                              "required when rsm.config.encryption.enabled is true")
        pairs = {}
        for key_id in ids:
            public_file = settings.get(PAIR_PREFIX + key_id + PUBLIC_SUFFIX)
            private_file = settings.get(PAIR_PREFIX + key_id + PRIVATE_SUFFIX)
            if not public_file and not private_file:
                raise ConfigError(f"rsm.config.{PAIR_PREFIX}{key_id}{PUBLIC_SUFFIX}", None,
                                  f"key pair {key_id!r} has neither key file")
            public = _load(public_file, key_id + PUBLIC_SUFFIX, False) if public_file else None
            private = _load(private_file, key_id + PRIVATE_SUFFIX, True) if private_file else None
            assert public is None or isinstance(public, rsa.RSAPublicKey)
            assert private is None or isinstance(private, rsa.RSAPrivateKey)
            pairs[key_id] = KeyPair(key_id, public, private)
        return cls(active, pairs)

    def wrap(self, data_key: bytes) -> tuple[str, bytes]:
        """(active pair id, ``data_key`` encrypted with its public key)."""
        public = self._pairs[self.active_id].public
        assert public is not None  # checked in __init__
        return self.active_id, public.encrypt(data_key, _OAEP)

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        """The data key ``wrapped`` by pair ``key_id``.

        Raises:
            KeyRingError: the pair is not in the ring, has no private key, or
                did not wrap this key.
        """
        pair = self._pairs.get(key_id)
        if pair is None:
            raise KeyRingError(f"key pair {key_id!r} is not in rsm.config.{PAIRS_KEY} "
                               f"{sorted(self._pairs)}")
        if pair.private is None:
            raise KeyRingError(f"key pair {key_id!r} has no private key file configured")
        try:
            data_key = pair.private.decrypt(wrapped, _OAEP)
        except ValueError:
            raise KeyRingError(f"the private key of key pair {key_id!r} does not unwrap this "
                               "segment's data key (a different key under the same id?)") from None
        if len(data_key) != DATA_KEY_BYTES:
            raise KeyRingError(f"key pair {key_id!r} unwrapped a {len(data_key)}-byte data key")
        return data_key


def _load(path: str, setting: str, private: bool) -> rsa.RSAPublicKey | rsa.RSAPrivateKey:
    """Read one PEM key file. Raises: ConfigError: unreadable, not RSA, too short."""
    name = f"rsm.config.{PAIR_PREFIX}{setting}"
    try:
        with open(os.path.expanduser(path), "rb") as f:
            pem = f.read()
        key = (serialization.load_pem_private_key(pem, password=None) if private
               else serialization.load_pem_public_key(pem))
    except OSError as exc:
        raise ConfigError(name, path, f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(name, path, f"not a PEM {'private' if private else 'public'} "
                                      f"key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey if private else rsa.RSAPublicKey):
        raise ConfigError(name, path, "not an RSA key")
    if key.key_size < MIN_RSA_BITS:
        raise ConfigError(name, path, f"RSA key of {key.key_size} bits; at least "
                                      f"{MIN_RSA_BITS} needed")
    return key
