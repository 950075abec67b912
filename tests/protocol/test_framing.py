"""FrameDecoder: length-prefixed frames fed whole, byte by byte, split and oversized."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.framing import FrameDecoder, FrameTooLarge, frame


def _drain(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (got := decoder.next_frame()) is not None:
        out.append(got)
    return out


def test_frame_prefixes_int32_size():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(bytearray()) == b"\x00\x00\x00\x00"


def test_whole_buffer():
    d = FrameDecoder(100)
    d.feed(b"\x00\x00\x00\x05hello")
    assert d.next_frame() == b"hello"
    assert d.next_frame() is None
    assert d.buffered == 0


def test_one_byte_at_a_time():
    d = FrameDecoder(100)
    data = frame(b"hello world")
    for i, byte in enumerate(data):
        assert d.next_frame() is None
        d.feed(bytes([byte]))
        assert d.buffered == i + 1
    assert d.next_frame() == b"hello world"
    assert d.next_frame() is None


def test_trailing_partial_next_frame_stays_buffered():
    d = FrameDecoder(100)
    d.feed(frame(b"one") + frame(b"second")[:6])
    assert d.next_frame() == b"one"
    assert d.next_frame() is None
    assert d.buffered == 6
    d.feed(frame(b"second")[6:])
    assert d.next_frame() == b"second"
    assert d.buffered == 0


def test_several_frames_in_one_feed():
    d = FrameDecoder(100)
    d.feed(frame(b"a") + frame(b"") + frame(b"ccc"))
    assert _drain(d) == [b"a", b"", b"ccc"]


def test_size_equal_to_limit_is_accepted():
    d = FrameDecoder(8)
    d.feed(frame(b"12345678"))
    assert d.next_frame() == b"12345678"


@pytest.mark.parametrize("size", [9, 2**31 - 1, -1, -(2**31)])
def test_bad_size_raises_after_only_the_size_is_fed(size):
    d = FrameDecoder(8)
    d.feed(struct.pack(">i", size)[:3])
    assert d.next_frame() is None  # three bytes of size: not yet known
    d.feed(struct.pack(">i", size)[3:])
    with pytest.raises(FrameTooLarge) as info:
        d.next_frame()
    assert (info.value.size, info.value.limit) == (size, 8)
    assert d.buffered == 4  # nothing of the body was waited for or buffered


def test_bad_size_after_good_frames():
    d = FrameDecoder(8)
    d.feed(frame(b"ok") + struct.pack(">i", 1000))
    assert d.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        d.next_frame()


def test_long_stream_past_buffer_compaction():
    # More than 1 MiB passes through, so the consumed prefix gets discarded on the way.
    payloads = [bytes([i % 251]) * (1000 + i % 7) for i in range(2500)]
    stream = b"".join(frame(p) for p in payloads)
    d = FrameDecoder(1 << 20)
    got = []
    step = 4093  # not a multiple of any frame size
    for start in range(0, len(stream), step):
        d.feed(stream[start : start + step])
        got.extend(_drain(d))
    assert got == payloads
    assert d.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20), st.data())
def test_any_chunking_yields_the_same_frames(payloads, data):
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=15)))
    d = FrameDecoder(64)
    got = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        d.feed(stream[prev:cut])
        prev = cut
        got.extend(_drain(d))
    assert got == payloads
    assert d.buffered == 0
