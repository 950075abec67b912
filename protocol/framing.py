"""Length-prefixed framing of Kafka requests, sans I/O.

Every Kafka request is ``int32 size`` followed by ``size`` bytes. The
``FrameDecoder`` buffers what the socket delivered and hands out complete
frames. The size is checked against ``socket.request.max.bytes`` as soon as
its four bytes arrive, before any buffer for the body is grown, so a client
announcing a 2 GiB request costs us four bytes of memory.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    """The announced frame size exceeds the limit (or is negative)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside [0, {limit}]")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Turns a byte stream into complete frames (without the size prefix).

    Args:
        max_frame_bytes: largest frame body accepted (socket.request.max.bytes).
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray) -> None:
        """Add bytes received from the peer."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | None:
        """Return the next complete frame body, or None if more bytes are needed.

        Raises:
            FrameTooLarge: the announced size is negative or above the limit.
        """
        avail = len(self._buf) - self._pos
        if avail < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        if size < 0 or size > self._max:
            raise FrameTooLarge(size, self._max)
        if avail < 4 + size:
            return None
        start = self._pos + 4
        frame = bytes(self._buf[start : start + size])
        self._pos = start + size
        if self._pos > 1 << 20 and self._pos * 2 > len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        return frame


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + bytes(payload)
