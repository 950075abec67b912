"""Deterministic, moderately compressible message values and their verification.

Every value starts with a 16-byte header ``(seq: u64, send_ns: u64)`` followed by a
slice of a fixed, text-like filler (words and digits, so lz4 gets roughly a 2-3x
ratio as with typical JSON/log records). The CRC-32 of every produced value is kept,
so the consumer can check count, uniqueness and content of what it reads back.
"""

from __future__ import annotations

import random
import struct
import zlib
from array import array
from dataclasses import dataclass, field
from functools import lru_cache

HEADER = struct.Struct(">QQ")
FILLER_BYTES = 1 << 16
_WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
    "rho sigma tau upsilon phi chi psi omega user order item price status ok error id ts "
    "region eu us ap value count total event click view buy cart session true false null"
).split()


@lru_cache(maxsize=1)
def filler(seed: int = 405) -> bytes:
    """Return ``FILLER_BYTES`` of deterministic JSON-ish text used to pad values."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < 2 * FILLER_BYTES:
        token = f'"{rng.choice(_WORDS)}":{rng.randint(0, 99999)},'
        parts.append(token)
        size += len(token)
    return "".join(parts).encode()[: 2 * FILLER_BYTES]


def make_value(seq: int, size: int, send_ns: int = 0) -> bytes:
    """Return the value for message ``seq`` of ``size`` bytes (at least the header)."""
    pad = max(0, size - HEADER.size)
    start = (seq * 7919) % FILLER_BYTES
    return HEADER.pack(seq, send_ns) + filler()[start : start + pad]


def parse_header(value: bytes) -> tuple[int, int]:
    """Return ``(seq, send_ns)`` from a value built by :func:`make_value`."""
    seq, send_ns = HEADER.unpack_from(value, 0)
    return int(seq), int(send_ns)


@dataclass(frozen=True)
class PayloadSet:
    """Pre-built values for one throughput case plus their CRCs."""

    size: int
    values: list[bytes]
    crcs: array  # array('L') of CRC-32 per seq

    @property
    def count(self) -> int:
        """Number of messages."""
        return len(self.values)

    @property
    def total_bytes(self) -> int:
        """Sum of value lengths."""
        return self.size * len(self.values)


@lru_cache(maxsize=4)
def payload_set(count: int, size: int) -> PayloadSet:
    """Build (and cache across rounds) ``count`` values of ``size`` bytes."""
    values = [make_value(seq, size) for seq in range(count)]
    crcs = array("L", (zlib.crc32(v) for v in values))
    return PayloadSet(size=size, values=values, crcs=crcs)


@dataclass
class Verifier:
    """Checks consumed values against the CRCs of what was produced."""

    crcs: array
    seen: bytearray = field(init=False)
    unique: int = 0
    received: int = 0
    duplicates: int = 0
    bad_crc: int = 0
    bad_seq: int = 0

    def __post_init__(self) -> None:
        self.seen = bytearray(len(self.crcs))

    @property
    def expected(self) -> int:
        """Number of distinct messages that should arrive."""
        return len(self.crcs)

    def complete(self) -> bool:
        """Return True once every expected message has been seen."""
        return self.unique >= self.expected

    def feed(self, value: bytes | None) -> None:
        """Check one consumed value: known seq, matching CRC, first time seen."""
        self.received += 1
        if value is None or len(value) < HEADER.size:
            self.bad_seq += 1
            return
        seq = HEADER.unpack_from(value, 0)[0]
        if seq >= self.expected:
            self.bad_seq += 1
            return
        if zlib.crc32(value) != self.crcs[seq]:
            self.bad_crc += 1
            return
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        self.unique += 1

    def ok(self) -> bool:
        """Return True if exactly the produced set arrived, intact and without duplicates."""
        return self.complete() and not (self.duplicates or self.bad_crc or self.bad_seq)

    def summary(self) -> str:
        """Return a one-line description of the verification outcome."""
        missing = self.expected - self.unique
        return (
            f"expected={self.expected} received={self.received} unique={self.unique} "
            f"missing={missing} duplicates={self.duplicates} bad_crc={self.bad_crc} "
            f"bad_seq={self.bad_seq}"
        )
