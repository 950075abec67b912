"""Chunk-wise compression and encryption of a remote segment's objects, and
the codec manifest that maps plain byte ranges to stored ones.

Theory of operation: an object is cut into chunks of ``chunk_size`` plain
bytes (the last one shorter). Each chunk is transformed on its own: zstd
compressed (if the object is compressed), then AES-256-GCM encrypted (if the
segment is encrypted) with a fresh 12-byte nonce stored in front of the
ciphertext and the 16-byte tag behind it. The stored object is the
transformed chunks back to back. Because chunks are independent, a ranged
read of plain bytes ``a..b`` fetches only the stored chunks covering it and
decodes those: the codec manifest lists every chunk's stored length, and
plain chunk ``i`` starts at ``i * chunk_size``.

Every chunk's GCM associated data binds it to its place: the segment uuid,
the object suffix and the chunk's number. A tampered, truncated, swapped or
foreign chunk fails the tag check (``CodecError``), never decodes to other
bytes. Compressed-only chunks are checked by zstd's frame (content size and
checksum), so corruption there is an error too.

The codec manifest (JSON, stored as the segment's ``rsm_manifest`` object)
records per object: the plain size, the chunk size, whether it is
compressed, and the stored length of each chunk; for an encrypted segment,
the id of the key pair and the data key wrapped with it (``key_ring``).

Concurrency: pure functions and immutable values; thread-safe.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.remote.types import RemoteStorageError

CODEC_MANIFEST_VERSION = 1
# zstd level 3 is zstd's own default: most of the ratio of higher levels at a
# fraction of their CPU, which a copier thread pays per byte tiered.
ZSTD_LEVEL = 3
# GCM's recommended nonce length (NIST SP 800-38D), and its full tag.
NONCE_BYTES = 12
TAG_BYTES = 16

# Record batch v2: attributes (int16) at byte 21; the low 3 bits are the codec.
_ATTRIBUTES_AT = 21
_CODEC_MASK = 0x07


class CodecError(RemoteStorageError):
    """Stored bytes that do not decode: a failed GCM tag, a corrupt zstd
    frame, a manifest that does not fit the object. Not retriable."""


@dataclass(frozen=True, slots=True)
class ObjectLayout:
    """How one object of a segment is stored.

    Attributes:
        size: plain length in bytes.
        chunk_size: plain bytes per chunk (the last chunk may be shorter).
        compressed: whether each chunk is zstd compressed.
        stored: the stored length of each chunk, in order.
    """

    size: int
    chunk_size: int
    compressed: bool
    stored: tuple[int, ...]

    @property
    def stored_size(self) -> int:
        return sum(self.stored)

    def stored_starts(self) -> list[int]:
        """Stored offset of every chunk, plus the stored size at the end."""
        return [0, *itertools.accumulate(self.stored)]

    def chunk_span(self, start: int, end: int) -> tuple[int, int]:
        """(first, last) chunk numbers holding plain bytes ``start..end`` (inclusive)."""
        return start // self.chunk_size, end // self.chunk_size


@dataclass(frozen=True, slots=True)
class CodecManifest:
    """The chunking of a transformed segment and how to decrypt it.

    Attributes:
        objects: object suffix (``log``, ``index``, ...) -> its layout.
        key_id: the key pair that wrapped the data key; None if not encrypted.
        wrapped_key: the data key, wrapped; None if not encrypted.
    """

    objects: dict[str, ObjectLayout]
    key_id: str | None = None
    wrapped_key: bytes | None = None

    def to_json(self) -> bytes:
        doc: dict[str, object] = {
            "v": CODEC_MANIFEST_VERSION,
            "objects": {name: {"size": o.size, "chunk": o.chunk_size, "zstd": o.compressed,
                               "stored": list(o.stored)}
                        for name, o in self.objects.items()},
        }
        if self.key_id is not None and self.wrapped_key is not None:
            doc["encryption"] = {"aes": "AES-256-GCM", "key_pair_id": self.key_id,
                                 "wrapped_key": base64.b64encode(self.wrapped_key).decode()}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CodecManifest:
        """Raises: CodecError: not a codec manifest this version reads."""
        try:
            doc = json.loads(raw)
            if doc["v"] != CODEC_MANIFEST_VERSION:
                raise CodecError(f"codec manifest version {doc['v']} is not readable here")
            objects = {}
            for name, o in doc["objects"].items():
                layout = ObjectLayout(int(o["size"]), int(o["chunk"]), bool(o["zstd"]),
                                      tuple(int(n) for n in o["stored"]))
                if layout.chunk_size <= 0 or len(layout.stored) != -(-layout.size
                                                                      // layout.chunk_size):
                    raise CodecError(f"codec manifest: inconsistent chunking of {name}")
                objects[name] = layout
            encryption = doc.get("encryption")
            if encryption is None:
                return cls(objects)
            return cls(objects, str(encryption["key_pair_id"]),
                       base64.b64decode(encryption["wrapped_key"], validate=True))
        except CodecError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CodecError(f"unreadable codec manifest: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class Transform:
    """What is done to every chunk of one object."""

    compress: bool
    data_key: bytes | None

    def encode(self, plain: bytes, aad: bytes) -> bytes:
        out = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress(
            plain) if self.compress else plain
        if self.data_key is None:
            return out
        nonce = os.urandom(NONCE_BYTES)
        return nonce + AESGCM(self.data_key).encrypt(nonce, out, aad)

    def decode(self, stored: bytes | memoryview, aad: bytes, plain_size: int) -> bytes:
        """Raises: CodecError: the chunk fails its tag, frame or length check."""
        out = stored
        if self.data_key is not None:
            if len(stored) < NONCE_BYTES + TAG_BYTES:
                raise CodecError("encrypted chunk shorter than its nonce and tag")
            view = memoryview(stored)  # slices without copies of megabytes
            try:
                out = AESGCM(self.data_key).decrypt(view[:NONCE_BYTES], view[NONCE_BYTES:], aad)
            except InvalidTag:
                raise CodecError("encrypted chunk fails its authentication tag "
                                 "(tampered, corrupt or misplaced)") from None
        if self.compress:
            try:
                out = zstandard.ZstdDecompressor().decompress(out, max_output_size=plain_size)
            except zstandard.ZstdError as exc:
                raise CodecError(f"corrupt compressed chunk: {exc}") from None
        if len(out) != plain_size:
            raise CodecError(f"chunk decodes to {len(out)} bytes, the manifest says {plain_size}")
        return bytes(out)  # a copy only for a stored-as-is chunk, still a view


def chunk_aad(segment: uuid.UUID, suffix: str, number: int) -> bytes:
    """GCM associated data binding a chunk to its segment, object and place."""
    return segment.bytes + suffix.encode() + number.to_bytes(8, "big")


def encode_object(pieces: Iterable[bytes], transform: Transform, segment: uuid.UUID,
                  suffix: str, chunk_size: int) -> Iterator[tuple[bytes, int]]:
    """(stored chunk, plain length) for each chunk of the plain ``pieces``
    (each at most ``chunk_size``; all but the last exactly ``chunk_size``)."""
    for number, plain in enumerate(pieces):
        yield transform.encode(plain, chunk_aad(segment, suffix, number)), len(plain)


def encode_bytes(plain: bytes, transform: Transform, segment: uuid.UUID, suffix: str,
                 chunk_size: int) -> tuple[bytes, ObjectLayout]:
    """A whole small object (an index) encoded in memory."""
    pieces = (plain[i:i + chunk_size] for i in range(0, len(plain), chunk_size))
    chunks = list(encode_object(pieces, transform, segment, suffix, chunk_size))
    return (b"".join(c for c, _ in chunks),
            ObjectLayout(len(plain), chunk_size, transform.compress,
                         tuple(len(c) for c, _ in chunks)))


def decode_range(stored: bytes, first_stored_at: int, layout: ObjectLayout, first: int,
                 last: int, transform: Transform, segment: uuid.UUID, suffix: str) -> bytes:
    """Decode chunks ``first..last`` of an object from ``stored``, which are
    the object's bytes from stored offset ``first_stored_at`` on.

    Raises:
        CodecError: a chunk does not decode, or ``stored`` is too short.
    """
    starts = layout.stored_starts()
    view = memoryview(stored)
    out = []
    for number in range(first, last + 1):
        a, b = starts[number] - first_stored_at, starts[number + 1] - first_stored_at
        if a < 0 or b > len(stored):
            raise CodecError(f"stored range too short for chunk {number} of {suffix}")
        plain_size = min(layout.chunk_size, layout.size - number * layout.chunk_size)
        out.append(transform.decode(view[a:b], chunk_aad(segment, suffix, number), plain_size))
    return out[0] if len(out) == 1 else b"".join(out)


def decode_whole(stored: bytes, layout: ObjectLayout, transform: Transform, segment: uuid.UUID,
                 suffix: str) -> bytes:
    """A whole object's plain bytes. Raises: CodecError."""
    if len(stored) != layout.stored_size:
        raise CodecError(f"stored {suffix} is {len(stored)} bytes, the codec manifest says "
                         f"{layout.stored_size}")
    if layout.size == 0:
        return b""
    return decode_range(stored, 0, layout, 0, len(layout.stored) - 1, transform, segment, suffix)


def batches_compressed(first_bytes: bytes) -> bool:
    """Whether the log's first record batch is compressed (the heuristic's
    test: a producer that compresses one batch compresses them all)."""
    if len(first_bytes) < _ATTRIBUTES_AT + 2:
        return False
    return (first_bytes[_ATTRIBUTES_AT + 1] & _CODEC_MASK) != 0

