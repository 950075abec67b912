"""Sending wire parts: bytes and file slices in order, slices closed, short files refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from broker.zero_copy import send_parts
from storage.log.file_slice import FileSlice, ShortFileSlice


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def _receive(stream: trio.SocketStream, count: int) -> bytes:
    got = bytearray()
    while len(got) < count:
        chunk = await stream.receive_some(count - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


async def test_parts_arrive_in_order_and_slices_are_closed(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # larger than a socket buffer: sendfile must wait
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    slices = [FileSlice(fd, 5, 2 << 20, 0), FileSlice(fd, 100, 7, 0)]
    os.close(fd)
    parts = [b"head", slices[0], b"mid", b"dle", slices[1], b"tail"]
    expected = b"head" + data[5:5 + (2 << 20)] + b"middle" + data[100:107] + b"tail"
    out, into = await _pair()
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []

        async def reader() -> None:
            received.append(await _receive(into, len(expected)))

        nursery.start_soon(reader)
        assert await send_parts(out, parts) == (2 << 20) + 7
    assert received == [expected]
    assert all(s.fd == -1 for s in slices)


async def test_a_slice_of_a_truncated_file_is_refused_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_RDWR)
    piece = FileSlice(fd, 500, 500, 0)
    os.ftruncate(fd, 600)
    os.close(fd)
    out, into = await _pair()
    with pytest.raises(ShortFileSlice):
        await send_parts(out, [b"head", piece])
    assert piece.fd == -1
    assert await _receive(into, 104) == b"head" + b"x" * 100
