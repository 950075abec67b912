"""Sending wire parts: bytes and file slices in order, slices closed, short files refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from broker.zero_copy import SEND_STEP_BYTES, Sent, send_parts
from storage.log.file_slice import FileSlice, ShortFileSlice


async def _pair(buffer_bytes: int = 0) -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    if buffer_bytes:  # room for a whole send at once, as on a fast link
        a.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, buffer_bytes)
        b.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, buffer_bytes)
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
        sent = await send_parts(out, parts)
        assert sent.sendfile_bytes == (2 << 20) + 7
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


def _evict(path: Path) -> None:
    """Drop the file's clean pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def test_a_slice_not_in_the_page_cache_is_read_in_by_a_thread_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(1 << 20)
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    _evict(path)
    fd = os.open(path, os.O_RDONLY)
    cold = FileSlice(fd, 4096, 512 << 10, 0)
    assert not cold.cached()
    in_threads: list[str] = []
    real_run_sync = trio.to_thread.run_sync

    async def run_sync(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        in_threads.append(fn.__name__)
        return await real_run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_sync)
    out, into = await _pair()
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []

        async def reader() -> None:
            received.append(await _receive(into, 4 + (512 << 10)))

        nursery.start_soon(reader)
        sent = await send_parts(out, [b"head", cold])
    assert received == [b"head" + data[4096:4096 + (512 << 10)]]
    assert sent == Sent(sendfile_bytes=512 << 10, warmed_bytes=512 << 10)
    assert in_threads == ["warm"]  # the disk read ran in a worker thread
    assert FileSlice(fd, 4096, 512 << 10, 0).cached()  # and left the pages resident
    os.close(fd)


async def test_a_slice_in_the_page_cache_is_sent_as_it_is(tmp_path: Path) -> None:
    data = os.urandom(256 << 10)
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, len(data), 0)
    hot = FileSlice(fd, 0, len(data), 0)
    os.close(fd)
    assert hot.cached()
    out, into = await _pair()
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []

        async def reader() -> None:
            received.append(await _receive(into, len(data)))

        nursery.start_soon(reader)
        sent = await send_parts(out, [hot])
    assert received == [data]
    assert sent == Sent(sendfile_bytes=len(data), warmed_bytes=0)


class _Recording(trio.abc.Stream):
    """A stream that records the size of every send, and when it came."""

    def __init__(self, inner: trio.SocketStream, events: list[str]) -> None:
        self.inner = inner
        self.events = events

    async def send_all(self, data) -> None:  # type: ignore[no-untyped-def]
        self.events.append(f"send {len(data)}")
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None) -> bytes:  # type: ignore[no-untyped-def]
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Steps(trio.abc.Instrument):
    """Marks the start of every task step in ``events``."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.events.append("step")


async def _stepped(send: object, expected: int, events: list[str], into) -> None:  # type: ignore[no-untyped-def]
    """Run ``send`` (and a reader) with every task step marked in ``events``."""
    steps = _Steps(events)
    trio.lowlevel.add_instrument(steps)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_receive, into, expected)
            await send()  # type: ignore[operator]
    finally:
        trio.lowlevel.remove_instrument(steps)


def _one_send_per_step(events: list[str]) -> bool:
    """No task step made two sends: the sender gave the loop back after each."""
    sends = [i for i, e in enumerate(events) if e.startswith("send")]
    return all("step" in events[a + 1:b] for a, b in zip(sends, sends[1:], strict=False))


async def test_a_large_file_slice_is_sent_in_steps_that_let_other_tasks_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(os.urandom(2 << 20))
    fd = os.open(path, os.O_RDONLY)
    part = FileSlice(fd, 0, 2 << 20, 0)
    os.close(fd)
    events: list[str] = []
    real_sendfile = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        events.append(f"send {count}")
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)
    out, into = await _pair(8 << 20)
    await _stepped(lambda: send_parts(out, [part]), 2 << 20, events, into)
    counts = [int(e.split()[1]) for e in events if e.startswith("send")]
    assert SEND_STEP_BYTES <= 256 * 1024
    assert len(counts) >= (2 << 20) // SEND_STEP_BYTES
    assert max(counts) <= SEND_STEP_BYTES
    assert _one_send_per_step(events)


async def test_large_record_bytes_are_sent_in_steps_that_let_other_tasks_run() -> None:
    data = os.urandom((1 << 20) + 5)  # a remote read's records: sent apart, in steps
    out, into = await _pair(8 << 20)
    events: list[str] = []
    stream = _Recording(out, events)
    await _stepped(lambda: send_parts(stream, [b"head", data]), len(data) + 4, events, into)
    sizes = [int(e.split()[1]) for e in events if e.startswith("send")]
    assert sizes[0] == 4 and sum(sizes[1:]) == len(data)
    assert SEND_STEP_BYTES <= 256 * 1024
    assert max(sizes) <= SEND_STEP_BYTES and len(sizes) >= 1 + len(data) // SEND_STEP_BYTES
    assert _one_send_per_step(events)
