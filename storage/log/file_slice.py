"""A byte range of a segment file, handed to the network layer unread.

Theory of operation: a local fetch of whole batches needs no transformation,
so instead of ``pread`` into Python bytes (then copied again by the response
encoder and the socket send) the fetch path can return a ``FileSlice`` and the
connection sends it with ``os.sendfile``: the bytes go from the page cache to
the socket without entering the interpreter.

A slice owns a duplicate of the segment's file descriptor, taken when the
slice is made. The log may close or delete the segment (retention, a
follower's truncation, a rebuild from the remote tier) while a response waits
to be sent; the duplicate keeps the file itself open, and a closed-and-reused
descriptor number can never make us send another file's bytes.

Concurrency: made on the event loop; ``read`` and ``close`` may run anywhere,
``close`` is idempotent. A slice not closed explicitly closes its descriptor
when it is garbage collected (a fetch pass whose results were discarded).
"""

from __future__ import annotations

import os


class ShortFileSlice(OSError):
    """The file ended before the slice did (it was truncated after the read)."""


class FileSlice:
    """``length`` bytes of an open file from ``position``, with the last offset
    of the batches they hold (read_committed answers need it)."""

    __slots__ = ("fd", "position", "length", "last_offset")

    def __init__(self, fd: int, position: int, length: int, last_offset: int) -> None:
        self.fd = -1  # so that __del__ after a failed dup closes nothing
        self.fd = os.dup(fd)
        self.position = position
        self.length = length
        self.last_offset = last_offset

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def read(self) -> bytes:
        """The slice's bytes (the pread path), for callers that need them in memory.

        Raises:
            ShortFileSlice: the file is shorter than the slice now.
        """
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise ShortFileSlice(f"file slice ended after {len(data)} of {self.length} bytes")
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice(position={self.position}, length={self.length})"
