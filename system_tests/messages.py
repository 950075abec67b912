"""Test messages: deterministic generation and exact verification.

A test builds a list of `OutMessage`s, hands it to a client driver to produce,
reads `Record`s back with (possibly) another driver, and calls
`verify_consumed`, which demands that every expected message comes back
exactly once, in produce order within its partition, byte-identical (key,
value, headers, and the timestamp where the producer set one), at the offset
the producer was told (where the producer reports offsets).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Header values may be null on the wire; the tests only produce non-null ones,
# so a null coming back is a mismatch, not something to paper over.
Headers = tuple[tuple[str, bytes | None], ...]

# Value sizes cycled through by `make_messages`: empty, tiny, around typical
# batch boundaries, and one large value that spans several 16 KiB producer
# batches' worth of bytes (but stays well under the 1 MiB default
# max.message.bytes).
VALUE_SIZES = (0, 1, 7, 100, 1000, 4096, 16_383, 16_385, 100_000)

# Fixed base timestamp (2024-01-01T00:00:00Z) so CreateTime values are
# deterministic and far from "now" (a broker that overwrites them is caught).
BASE_TIMESTAMP_MS = 1_704_067_200_000

# Characters for text-only payloads: printable ASCII minus the delimiters the
# kcat driver uses on its input (tab separates key and value, newline ends a
# message) and in its header format (',' and '=').
TEXT_ALPHABET = bytes(c for c in range(0x20, 0x7F) if chr(c) not in {"\t", "\n", ",", "="})


@dataclass(frozen=True, slots=True)
class OutMessage:
    """A message to produce. `timestamp_ms=None` lets the client stamp it."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the producer was told for one message (offset None if unknown, e.g. acks=0)."""

    partition: int
    offset: int | None


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class MessageProfile:
    """What a producing client can express; `make_messages` stays inside it.

    Attributes:
        binary: values may hold any byte (False: `TEXT_ALPHABET` only).
        null_keys: some keys are null.
        null_values: some values are null (tombstones; key is then non-null).
        per_message_headers: headers vary per message (False: every message
            carries `CONSTANT_HEADERS`).
        timestamps: messages carry explicit CreateTime timestamps.
        bare_empty: a message may have a null key and an empty value (kcat
            cannot send one: such a message is an empty input line, which it skips).
    """

    binary: bool = True
    null_keys: bool = True
    null_values: bool = True
    per_message_headers: bool = True
    timestamps: bool = True
    bare_empty: bool = True


# Headers for clients that can only set one header set per produce run (kcat -H).
CONSTANT_HEADERS: Headers = (("origin", b"system-test"), ("run", b"constant"))


def payload(index: int, size: int, *, binary: bool) -> bytes:
    """Deterministic value bytes for message `index`.

    The binary form matches `generatedValue` in java/KafkaTool.java, so records
    produced by the Java tool's --count mode can be verified here.
    """
    if binary:
        return bytes((index * 31 + j * 7) & 0xFF for j in range(size))
    alphabet = TEXT_ALPHABET
    return bytes(alphabet[(index * 31 + j * 7) % len(alphabet)] for j in range(size))


def headers_for(index: int, profile: MessageProfile) -> Headers:
    """Headers for message `index`: none, one, or several (repeated names allowed)."""
    if not profile.per_message_headers:
        return CONSTANT_HEADERS
    shapes: tuple[Headers, ...] = (
        (),
        (("trace", f"t-{index}".encode()),),
        (("a", b""), ("b", f"{index}".encode()), ("a", b"again")),
    )
    return shapes[index % len(shapes)]


def make_messages(count: int, partitions: int, profile: MessageProfile) -> list[OutMessage]:
    """Build `count` deterministic messages spread round-robin over `partitions`.

    Every 10th key is null (if allowed), every 13th value is null (if allowed,
    and only where the key is non-null), sizes cycle through `VALUE_SIZES`.
    """
    messages = []
    for i in range(count):
        key: bytes | None = f"key-{i}".encode()
        if profile.null_keys and i % 10 == 3:
            key = None
        value: bytes | None = payload(i, VALUE_SIZES[i % len(VALUE_SIZES)], binary=profile.binary)
        if key is None and value == b"" and not profile.bare_empty:
            key = f"key-{i}".encode()
        if profile.null_values and key is not None and i % 13 == 5:
            value = None
        timestamp = BASE_TIMESTAMP_MS + i * 1000 if profile.timestamps else None
        messages.append(OutMessage(i % partitions, key, value, headers_for(i, profile), timestamp))
    return messages


def sha256(data: bytes | None) -> str | None:
    """Hex digest used to keep assertion messages short."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def describe(message: OutMessage | Record) -> str:
    """A one-line, size-bounded description for assertion messages."""
    value = message.value
    return (
        f"key={message.key!r:.40} value=len:{-1 if value is None else len(value)}"
        f"/sha:{(sha256(value) or '-')[:12]} headers={message.headers!r:.80}"
    )


def by_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    """Group records by partition, keeping their order."""
    grouped: dict[int, list[Record]] = defaultdict(list)
    for record in records:
        grouped[record.partition].append(record)
    return dict(grouped)


def expected_from(
    messages: Sequence[OutMessage],
    deliveries: Sequence[Delivery],
    starts: Mapping[int, int],
) -> dict[int, list[tuple[OutMessage, Delivery]]]:
    """The messages a consumer starting at `starts` (partition -> offset) must see.

    Requires the deliveries' offsets: a message is expected iff its delivered
    offset is >= the partition's start offset.
    """
    expected: dict[int, list[tuple[OutMessage, Delivery]]] = defaultdict(list)
    for message, delivery in zip(messages, deliveries, strict=True):
        start = starts.get(message.partition)
        if start is None:
            continue
        if delivery.offset is None:
            raise ValueError("expected_from needs delivered offsets")
        if delivery.offset >= start:
            expected[message.partition].append((message, delivery))
    return dict(expected)


def verify_consumed(
    messages: Sequence[OutMessage],
    deliveries: Sequence[Delivery],
    records: Sequence[Record],
    starts: Mapping[int, int] | None = None,
) -> None:
    """Assert `records` are exactly the produced `messages` from `starts` on.

    Args:
        messages: what was produced, in produce order.
        deliveries: the producer's delivery reports, parallel to `messages`.
            Offsets may be None (client did not report them); then the
            consumer must have started at offset 0 and offsets are only
            checked to be strictly increasing.
        records: what the consumer returned, in the order it returned them.
        starts: partition -> first offset consumed; default offset 0 on every
            partition that `messages` uses.

    Raises:
        AssertionError: naming the first mismatch.
    """
    for message, delivery in zip(messages, deliveries, strict=True):
        assert delivery.partition == message.partition, (
            f"message for partition {message.partition} delivered to {delivery.partition}"
        )
    used = sorted({m.partition for m in messages})
    starts = dict(starts) if starts is not None else {p: 0 for p in used}
    offsets_known = all(d.offset is not None for d in deliveries)
    if offsets_known:
        expected = expected_from(messages, deliveries, starts)
    else:
        assert all(s == 0 for s in starts.values()), "unknown offsets: can only verify from 0"
        expected = defaultdict(list)
        for message, delivery in zip(messages, deliveries, strict=True):
            expected[message.partition].append((message, delivery))
    got = by_partition(records)
    unexpected = set(got) - set(starts)
    assert not unexpected, f"records from partitions never asked for: {sorted(unexpected)}"
    for partition in starts:
        _verify_partition(partition, expected.get(partition, []), got.get(partition, []))


def _verify_partition(
    partition: int,
    expected: Sequence[tuple[OutMessage, Delivery]],
    got: Sequence[Record],
) -> None:
    """Compare one partition's records with the expected messages, in order."""
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), (
        f"partition {partition}: offsets not strictly increasing (duplicates or reordering): "
        f"{_first_disorder(offsets)}"
    )
    assert len(got) == len(expected), (
        f"partition {partition}: expected {len(expected)} records, got {len(got)} "
        f"(offsets {offsets[:5]}...{offsets[-5:]})"
    )
    for index, (record, (message, delivery)) in enumerate(zip(got, expected, strict=True)):
        where = f"partition {partition} record #{index} offset {record.offset}"
        if delivery.offset is not None:
            assert record.offset == delivery.offset, f"{where}: producer was told offset {delivery.offset}"
        assert (record.key, record.value, record.headers) == (
            message.key,
            message.value,
            message.headers,
        ), f"{where}: got {describe(record)}; expected {describe(message)}"
        if message.timestamp_ms is not None:
            assert record.timestamp_ms == message.timestamp_ms, (
                f"{where}: timestamp {record.timestamp_ms} != produced {message.timestamp_ms}"
            )


def _first_disorder(offsets: Sequence[int]) -> str:
    """Describe the first place where `offsets` stops strictly increasing."""
    for i in range(1, len(offsets)):
        if offsets[i] <= offsets[i - 1]:
            return f"index {i}: {offsets[i - 1]} then {offsets[i]}"
    return "none"
