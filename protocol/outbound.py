"""Requests this broker sends to other brokers, and their responses (sans I/O).

The mirror image of ``api.parse_header`` / ``api.encode_response``: a request
frame is ``int32 size`` + request header (v1; v2 with an empty tagged-field
section for flexible versions) + body; a response frame body (after the size)
is the correlation id, for flexible versions an (ignored) tagged-field
section, then the body. ApiVersions responses always have the v0 header.
"""

from __future__ import annotations

import struct
from typing import Any

_REQ_HDR = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")
_API_VERSIONS_KEY = 18


class ProtocolError(ValueError):
    """A response that cannot be decoded."""


def _flexible(cls: Any, version: int) -> bool:
    return bool(cls.flexible_version_q(version))


def encode_request(request_cls: Any, version: int, correlation_id: int,
                   client_id: str | None, request: Any) -> bytes:
    """A complete request frame (size prefix included)."""
    cid = None if client_id is None else client_id.encode("utf-8")
    head = _REQ_HDR.pack(request_cls.API_KEY, version, correlation_id,
                         -1 if cid is None else len(cid)) + (cid or b"")
    if _flexible(request_cls, version):
        head += b"\x00"
    body = bytes(request.encode(version=version))
    return _INT32.pack(len(head) + len(body)) + head + body


def _skip_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("bad varint in response header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def decode_response(response_cls: Any, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response body) of a response frame (size prefix removed).

    Raises:
        ProtocolError: truncated or undecodable.
    """
    if len(frame) < 4:
        raise ProtocolError("truncated response header")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if _flexible(response_cls, version) and response_cls.API_KEY != _API_VERSIONS_KEY:
        count, pos = _skip_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _skip_uvarint(frame, pos)
            size, pos = _skip_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ProtocolError("truncated response header tagged fields")
    try:
        body = response_cls.decode(memoryview(frame)[pos:], version=version)
    except Exception as exc:  # the generated decoders raise assorted types
        raise ProtocolError(f"undecodable {response_cls.__name__} v{version}: {exc}") from exc
    return correlation_id, body
