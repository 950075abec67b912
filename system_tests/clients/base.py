"""The contract every client driver meets, and helpers they share.

A driver produces a list of `OutMessage`s and consumes records back, using
one real client library over real sockets. Consumption uses assign()+seek()
(no consumer group) and reads each requested partition up to the end offset
(high watermark) it saw when it started, so duplicates and extra records are
caught as surely as missing ones.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Protocol

from system_tests.messages import Delivery, MessageProfile, OutMessage, Record

# Compression codecs every driver accepts, by their Kafka config names.
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# acks settings every driver accepts, by their Kafka config names.
ACKS = ("0", "1", "all")

# How long a consume may take to reach the end offsets. The data is small and
# local; 30 s only matters when the broker is broken.
CONSUME_TIMEOUT_S = 30.0

# How long a produce may take to be fully acknowledged.
PRODUCE_TIMEOUT_S = 60.0

# Producer linger: small, so tests are quick, but non-zero so that several
# records share a batch (the interesting case for compression).
LINGER_MS = 5


class ProduceFailed(AssertionError):
    """The client reported at least one failed delivery."""


class ConsumeTimeout(AssertionError):
    """The consumer did not reach the end offsets in time.

    Attributes:
        records: what had been consumed by then.
    """

    def __init__(self, message: str, records: Sequence[Record]) -> None:
        super().__init__(f"{message} (after {len(records)} records)")
        self.records = list(records)


class ClientDriver(Protocol):
    """One Kafka client library, driven synchronously from a test.

    Attributes:
        name: short id used in test ids ("kafka-python", "kcat", ...).
        profile: what messages its producer can express.
        reports_offsets: whether `produce` returns real offsets (acks != 0).
    """

    name: str
    profile: MessageProfile
    reports_offsets: bool

    def produce(
        self,
        bootstrap: str,
        topic: str,
        messages: Sequence[OutMessage],
        *,
        compression: str = "none",
        acks: str = "all",
    ) -> list[Delivery]:
        """Produce `messages` (each to its own partition), in order, and wait for acks.

        Returns:
            One `Delivery` per message, in order.

        Raises:
            ProduceFailed: any message was not delivered.
        """
        ...

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
    ) -> list[Record]:
        """Read partitions from the given offsets up to their current end offsets.

        Args:
            starts: partition -> first offset to read.

        Raises:
            ConsumeTimeout: the end offsets were not reached in `timeout_s`.
        """
        ...


def check_codec(compression: str) -> None:
    """Reject codec names outside `CODECS`."""
    if compression not in CODECS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {CODECS}")


def check_acks(acks: str) -> None:
    """Reject acks values outside `ACKS`."""
    if acks not in ACKS:
        raise ValueError(f"unknown acks {acks!r}; expected one of {ACKS}")


def check_messages(driver: ClientDriver, messages: Sequence[OutMessage]) -> None:
    """Fail early if `messages` ask for more than the driver's profile allows."""
    profile = driver.profile
    for i, m in enumerate(messages):
        problems = []
        if not profile.null_keys and m.key is None:
            problems.append("null key")
        if not profile.null_values and m.value is None:
            problems.append("null value")
        if not profile.timestamps and m.timestamp_ms is not None:
            problems.append("explicit timestamp")
        if not profile.bare_empty and m.key is None and m.value == b"":
            problems.append("null key with empty value")
        if problems:
            raise ValueError(f"{driver.name} cannot produce message {i}: {', '.join(problems)}")


def acked_offset(offset: int, acks: str) -> int | None:
    """The offset to report for a delivery: None when acks=0 (no real offset)."""
    return None if acks == "0" or offset < 0 else offset


def run_tool(
    argv: Sequence[str], *, input_bytes: bytes | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    """Run a command-line client to completion, capturing output.

    Raises:
        FileNotFoundError: the tool is not installed (run scripts/install-deps.sh).
        subprocess.TimeoutExpired: it ran longer than `timeout_s`.
    """
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(f"{argv[0]} not on PATH: run scripts/install-deps.sh")
    return subprocess.run(list(argv), input=input_bytes, capture_output=True, timeout=timeout_s, check=False)
