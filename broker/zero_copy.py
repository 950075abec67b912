"""Fetch responses sent with sendfile: encoding around file slices, and sending.

A handler that answers with local log data as ``FileSlice``s (or large
record bytes, e.g. from the remote tier) returns a ``SplicedResponse``: the
response object with a marker in place of each slice's bytes (see
``protocol.spliced``); large bytes are sent as they are, never copied into
the encoded frame. The connection turns it into wire
parts, byte strings and slices, and sends the slices with ``os.sendfile``
from the segment file to the socket, waiting for writability with trio.

On a TLS connection there is no sendfile: the slices are read with pread
and encrypted like any other bytes (sendfile would put plaintext on the wire).

Disk waits stay off the event loop: a slice whose pages are not in the page
cache (``FileSlice.cached``: an old segment a catching-up consumer reads) is
read in by a worker thread first (``FileSlice.warm``), so sendfile and pread
on the loop only ever copy from memory, and a produce on another connection
never waits for this one's disk.

Error handling: a slice whose file ended early (truncated after the read)
cannot be sent without breaking the frame, so ``send_parts`` raises
``ShortFileSlice`` and the connection is closed; the client reconnects and
fetches again. Every slice is closed once sent or abandoned.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol import spliced
from protocol.api import RequestHeader, WrappedResponse
from storage.log.file_slice import FileSlice, ShortFileSlice

Part = bytes | FileSlice

# Record bytes at least this large (a remote read's result) are not copied into
# the encoded response: they are a hole of their own, sent as they are.
SEND_APART_BYTES = 64 * 1024

# The most one send (sendfile, or a send of record bytes) may move before the
# loop lets other connections run. On loopback and fast links one call can
# move the whole socket buffer (megabytes: a millisecond of kernel time on the
# loop thread, more with TLS encrypting it first), so a catch-up reader's
# large fetch would hold up every produce behind it.
SEND_STEP_BYTES = 256 * 1024


@dataclass(slots=True)
class SplicedResponse(WrappedResponse):
    """A response object whose byte fields named in ``slices`` hold markers."""

    response: Any
    slices: list[tuple[bytes, FileSlice | bytes]] = field(default_factory=list)

    def placeholder(self, data: FileSlice | bytes) -> bytes:
        """A marker to put in the response in place of ``data`` (in encoding order)."""
        marker = spliced.new_marker()
        self.slices.append((marker, data))
        return marker

    def encode(self, header: RequestHeader, flexible_body: bool) -> list[Part]:
        """The wire parts: byte strings and the slices, in order."""
        try:
            parts = spliced.encode_spliced(header, self.response, flexible_body,
                                           [(m, len(s)) for m, s in self.slices])
        except BaseException:
            close_parts(s for _, s in self.slices)
            raise
        return [self.slices[p][1] if isinstance(p, int) else p for p in parts]


def close_parts(parts: Any) -> None:
    for part in parts:
        if isinstance(part, FileSlice):
            part.close()


@dataclass(slots=True)
class Sent:
    """What ``send_parts`` sent from segment files: with sendfile, and how
    much of it had to be read in from disk first."""

    sendfile_bytes: int = 0
    warmed_bytes: int = 0


async def send_parts(stream: trio.abc.Stream, parts: Sequence[Part]) -> Sent:
    """Send byte strings (consecutive ones joined) and file slices, in order;
    every slice is closed afterwards, sent or not. Slices go with sendfile on a
    plain socket; on any other stream (TLS encrypts in user space) they are
    read with pread and sent as bytes.

    Returns:
        The bytes sent with sendfile, and those read in from disk first.

    Raises:
        ShortFileSlice: a slice's file ended early (the frame cannot be finished).
        trio.BrokenResourceError, OSError: the connection failed.
    """
    sent = Sent()
    try:
        pending: list[bytes] = []
        for part in parts:
            if isinstance(part, bytes) and len(part) < SEND_APART_BYTES:
                pending.append(part)
                continue
            if pending:
                await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))
                pending = []
            if isinstance(part, bytes):
                await _send_in_steps(stream, part)
                continue
            if not part.cached():
                await trio.to_thread.run_sync(part.warm)
                sent.warmed_bytes += part.length
            if isinstance(stream, trio.SocketStream):
                await _sendfile(stream, part)
                sent.sendfile_bytes += part.length
            else:
                await _send_in_steps(stream, part.read())
        if pending:
            await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))
    finally:
        close_parts(parts)
    return sent


async def _send_in_steps(stream: trio.abc.Stream, data: bytes) -> None:
    """``data`` sent SEND_STEP_BYTES at a time (each send yields to the loop)."""
    if len(data) <= SEND_STEP_BYTES:
        await stream.send_all(data)
        return
    with memoryview(data) as view:
        for start in range(0, len(view), SEND_STEP_BYTES):
            await stream.send_all(view[start:start + SEND_STEP_BYTES])


async def _sendfile(stream: trio.SocketStream, part: FileSlice) -> None:
    sock = stream.socket
    out_fd = sock.fileno()
    offset, left = part.position, part.length
    while left:
        try:
            sent = os.sendfile(out_fd, part.fd, offset, min(left, SEND_STEP_BYTES))
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            raise ShortFileSlice(f"file slice ended after {part.length - left} of "
                                 f"{part.length} bytes")
        offset += sent
        left -= sent
        # Each step yields: other connections' requests (a produce) are read
        # and handled between the steps of a large send.
        await trio.lowlevel.checkpoint()
