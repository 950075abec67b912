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

A slice whose pages are not in the page cache (an old segment read by a
catching-up consumer) would make ``sendfile`` or ``pread`` wait for the disk
on the event loop, stalling every other connection with it (KAFKA-7504).
``cached`` tells, with a few one-byte ``RWF_NOWAIT`` reads that never wait,
whether the slice's pages are resident; ``warm`` reads them in, in a worker
thread, before the slice is sent.

Concurrency: made on the event loop; ``read``, ``warm`` and ``close`` may run
anywhere, ``close`` is idempotent. A slice not closed explicitly closes its descriptor
when it is garbage collected (a fetch pass whose results were discarded).
"""

from __future__ import annotations

import os

# One probe read per this many bytes of a slice (and one at its last byte).
PROBE_STRIDE = 256 * 1024
# The page cache's unit: one byte read brings in (or finds) its whole page.
PAGE_BYTES = 4096
# The buffer ``warm`` reads through.
WARM_READ_BYTES = 256 * 1024


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

    def cached(self) -> bool:
        """Whether the slice's pages are in the page cache, as far as one-byte
        reads every PROBE_STRIDE bytes and at its end can tell without waiting.
        Where such reads are not supported it answers True (nothing to gain)."""
        if self.length <= 0:
            return True
        probe = bytearray(1)
        end = self.position + self.length
        points = [*range(self.position, end, PROBE_STRIDE)]
        if (end - 1) // PAGE_BYTES != points[-1] // PAGE_BYTES:
            points.append(end - 1)  # its last page, unless a probe read it already
        try:
            for point in points:
                os.preadv(self.fd, [probe], point, os.RWF_NOWAIT)
        except BlockingIOError:
            return False
        except (OSError, AttributeError):
            return True
        return True

    def warm(self) -> None:
        """Read the slice through once, so that its pages are in the page cache
        (blocking: run it in a worker thread). A short file just ends it."""
        buffer = bytearray(min(WARM_READ_BYTES, self.length))
        position, end = self.position, self.position + self.length
        while position < end:
            got = os.preadv(self.fd, [memoryview(buffer)[:end - position]], position)
            if got <= 0:
                return
            position += got

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice(position={self.position}, length={self.length})"
