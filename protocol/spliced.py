"""Responses whose largest byte fields travel beside the encoded message.

Theory of operation: a Fetch response is mostly record bytes that the broker
can send straight from a file (sendfile). The schema encoder needs every
field's value, so each such field is encoded with a placeholder: a random
marker of ``MARKER_SIZE`` bytes. The encoded response is then cut at each
marker: the marker's length prefix is rewritten for the real length, the
marker itself becomes a hole, and the frame size is corrected by the
difference. The result is a list of parts, byte strings and hole numbers,
whose concatenation (holes filled in order) is byte for byte the response
the encoder would have produced with the real values.

Markers come from ``os.urandom`` per response, are looked for in order from
where the previous one ended, and must sit right after the length prefix the
encoder writes for a ``MARKER_SIZE``-byte value (int32 for classic versions,
unsigned varint of length + 1 for flexible ones); a mismatch raises, it never
yields a wrong frame.

Pure: no sockets, no files (the caller owns what fills the holes).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

from kafka.protocol.old.types import UnsignedVarInt32

from protocol.api import RequestHeader, encode_response

# 128 random bits: no record bytes of another partition in the same response
# can contain one by chance.
MARKER_SIZE = 16
_INT32 = struct.Struct(">i")
_FRAME_SIZE = struct.Struct(">i")


def new_marker() -> bytes:
    return os.urandom(MARKER_SIZE)


def _prefix(length: int, flexible: bool) -> bytes:
    """The length prefix kafka-python's encoder writes for a bytes field."""
    return bytes(UnsignedVarInt32.encode(length + 1)) if flexible else _INT32.pack(length)


def encode_spliced(header: RequestHeader, response: Any, flexible_body: bool,
                   holes: Sequence[tuple[bytes, int]]) -> list[bytes | int]:
    """Encode ``response`` with each marker's field left as a hole.

    Args:
        header: the request's header (version, correlation id).
        response: the response object, each hole's bytes field set to its marker.
        flexible_body: whether the body uses compact (varint) lengths.
        holes: (marker, real length) in the order the fields are encoded.

    Returns:
        Byte strings and hole indexes (into ``holes``), in wire order.

    Raises:
        ValueError: a marker is missing or not where a byte field's value starts.
    """
    frame = encode_response(header, response)
    marker_prefix = _prefix(MARKER_SIZE, flexible_body)
    parts: list[bytes | int] = []
    pos = 0
    delta = 0
    for i, (marker, length) in enumerate(holes):
        at = frame.find(marker, pos)
        start = at - len(marker_prefix)
        if at < 0 or start < pos or frame[start:at] != marker_prefix:
            raise ValueError(f"placeholder {i} not found after a length prefix")
        real_prefix = _prefix(length, flexible_body)
        parts.append(frame[pos:start] + real_prefix)
        parts.append(i)
        delta += len(real_prefix) + length - len(marker_prefix) - MARKER_SIZE
        pos = at + MARKER_SIZE
    parts.append(frame[pos:])
    first = parts[0]
    assert isinstance(first, bytes)
    size = _FRAME_SIZE.unpack_from(first, 0)[0] + delta
    parts[0] = _FRAME_SIZE.pack(size) + first[_FRAME_SIZE.size:]
    return parts
