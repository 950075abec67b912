"""The server side of a TLS connection, lean enough for bulk data.

Theory of operation: TLS runs in memory (``ssl.SSLObject`` between two
``MemoryBIO``s) and trio moves the encrypted bytes. ``trio.SSLStream`` does
the same for any use, and pays for it per TLS record: a produce request of
256 KiB is 16 records, and it goes through the stream's locks, conflict
detectors and a socket receive of 16 KiB for each. A broker connection is
simpler: one task reads and writes it, one request at a time. So here

- a receive takes what the socket has (up to ``RECEIVE_BYTES``) and decrypts
  every complete record in it with one call each, returning them joined;
- a send encrypts the whole buffer (in ``SEND_SLICE_BYTES`` slices, so the
  encrypted copy stays bounded) and writes each slice with one socket send.

That is what takes TLS's CPU per message back towards the cost of the
cipher itself (issue 12's benchmark).

Concurrency: one task at a time may use a stream (the connection's own).
Error handling: a TLS failure raises ``trio.BrokenResourceError`` with the
``ssl.SSLError`` as its cause, as ``trio.SSLStream`` does, so callers read
the reason the same way. A clean close (close_notify) or a closed socket
reads as b"".
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

# Encrypted bytes taken from the socket per receive.
RECEIVE_BYTES = 256 * 1024
# Plaintext encrypted per socket send: bounds the encrypted copy of a large
# fetch response (16 TLS records).
SEND_SLICE_BYTES = 256 * 1024


class TlsStream(trio.abc.Stream):
    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._closed = False

    @property
    def socket(self) -> Any:
        return self.transport.socket

    def getpeercert(self, binary_form: bool = False) -> Any:
        return self._tls.getpeercert(binary_form)

    async def do_handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise trio.BrokenResourceError("closed during the TLS handshake") from None
            except ssl.SSLError as exc:
                await self._flush_quietly()  # the alert tells the client why
                raise trio.BrokenResourceError(str(exc)) from exc
        await self._flush()

    async def _fill(self) -> bool:
        """Encrypted bytes from the socket into the TLS object; False at EOF."""
        data = await self.transport.receive_some(RECEIVE_BYTES)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await self.transport.send_all(self._outgoing.read())

    async def _flush_quietly(self) -> None:
        try:
            with trio.move_on_after(1):
                await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    def _decrypt(self, max_bytes: int) -> tuple[list[bytes], bool]:
        """Every record already received (up to ``max_bytes``); and whether
        the peer closed TLS."""
        chunks: list[bytes] = []
        size = 0
        try:
            while size < max_bytes:
                chunk = self._tls.read(max_bytes - size)
                if not chunk:
                    return chunks, True
                chunks.append(chunk)
                size += len(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            return chunks, True
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        return chunks, False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        limit = max_bytes or RECEIVE_BYTES
        while True:
            chunks, closed = self._decrypt(limit)
            # TLS 1.3 may answer a record (a key update): send it on.
            await self._flush()
            if chunks:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if closed or not await self._fill():
                return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        try:
            for start in range(0, len(view), SEND_SLICE_BYTES):
                piece = view[start:start + SEND_SLICE_BYTES]
                while piece:
                    written = self._tls.write(piece)
                    piece = piece[written:]
                await self._flush()
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        if not view:
            await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Send close_notify (best effort), then close the socket."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            try:
                self._tls.unwrap()
            except ssl.SSLError:
                pass  # the peer's close_notify is not awaited
            await self._flush_quietly()
        finally:
            await self.transport.aclose()


def failure_reason(exc: BaseException | None) -> str:
    """A short, bounded label for a failed handshake (never secret material)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "certificate_" + {10: "expired", 18: "self_signed", 19: "self_signed_in_chain",
                                 20: "untrusted_issuer"}.get(exc.verify_code, "rejected")
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "ssl_error").lower()
        return reason if reason.replace("_", "").isalnum() and len(reason) < 60 else "ssl_error"
    return "connection_lost"
