"""Messages whose top-level array is encoded item by item, ahead of time.

Theory of operation: a full Metadata response at thousands of partitions
takes longer to encode than one event-loop step may last, yet between two
changes each topic's part of it is the same bytes. So those parts are kept
encoded, and a response is the message encoded with the array empty, with
the items' bytes spliced in where the array's count was.

kafka-python encodes whole messages with generated code, several times faster
than it encodes a nested struct on its own, so an item is encoded as the only
item of an otherwise default message and cut out of it. ``ArrayLayout`` knows,
for one message class, version and array field, how many bytes come before
the array's count and after its items; it learns them by encoding the message
with no item and with one default item (the first byte that differs is in the
count). A frame that does not have the layout raises ``ValueError``; this
never yields a wrong frame.

Pure: no sockets, no caches (the caller keeps the encoded items).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

from kafka.protocol.old.types import UnsignedVarInt32

from protocol.api import RequestHeader, encode_response

_INT32 = struct.Struct(">i")


def _count(n: int, flexible: bool) -> bytes:
    """An array's count as the encoder writes it (compact: n + 1 as a varint)."""
    return bytes(UnsignedVarInt32.encode(n + 1)) if flexible else _INT32.pack(n)


class ArrayLayout:
    """Where the array ``field`` of ``cls`` (one version's message class) sits."""

    def __init__(self, cls: Any, field: str, version: int, flexible: bool) -> None:
        self.cls = cls
        self.field = field
        self.version = version
        self.flexible = flexible
        empty = bytes(cls(**{field: []}).encode(version=version))
        one = bytes(cls(**{field: [cls.fields[field].data_class()]}).encode(version=version))
        same = next(i for i, (a, b) in enumerate(zip(empty, one, strict=False)) if a != b)
        # Classic counts are int32: 0 and 1 differ in their last byte.
        self.head = same if flexible else same - 3
        self.count_size = len(_count(0, flexible))
        self.tail = len(empty) - self.head - self.count_size
        if self.tail < 0 or empty[self.head:self.head + self.count_size] != _count(0, flexible):
            raise ValueError(f"{cls.__name__}.{field} v{version}: no array count where expected")

    def item_bytes(self, item: Any) -> bytes:
        """``item`` encoded as this array's items are."""
        one = bytes(self.cls(**{self.field: [item]}).encode(version=self.version))
        return one[self.head + self.count_size:len(one) - self.tail]

    def encode(self, header: RequestHeader, message: Any, items: Sequence[bytes]) -> bytes:
        """The framed response: ``message`` (its array empty) with ``items`` as
        the array."""
        if getattr(message, self.field):
            raise ValueError(f"{self.field} must be empty; its items come encoded")
        frame = encode_response(header, message)
        end = len(frame) - self.tail
        at = end - self.count_size
        if frame[at:end] != _count(0, self.flexible):
            raise ValueError(f"{self.cls.__name__}.{self.field}: no array count where expected")
        count = _count(len(items), self.flexible)
        body = [frame[:at], count, *items, frame[end:]]
        size = sum(map(len, body)) - 4
        body[0] = _INT32.pack(size) + frame[4:at]
        return b"".join(body)


@functools.cache
def layout(cls: Any, field: str, version: int, flexible: bool) -> ArrayLayout:
    """The (cached) layout of ``cls``'s array ``field`` at ``version``."""
    return ArrayLayout(cls, field, version, flexible)
