"""Driver for kcat (Debian's, librdkafka 2.0.2), run as a subprocess.

Produce: one `kcat -P` per partition, stdin lines `key<TAB>value`; a line
without a tab is a null key. kcat cannot express null values (without -Z,
which would turn empty values into nulls), per-message headers (-H applies to
the whole run) or timestamps, and values must be text: see `PROFILE`. It
prints no offsets, so deliveries carry offset None.

Consume: one `kcat -C -e` per partition with a format whose key and value are
length-prefixed, so any bytes round-trip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from system_tests.clients.base import (
    CONSUME_TIMEOUT_S,
    LINGER_MS,
    PRODUCE_TIMEOUT_S,
    ClientSecurity,
    ConsumeTimeout,
    ProduceFailed,
    check_acks,
    check_codec,
    check_messages,
    librdkafka_options,
    run_tool,
)
from system_tests.messages import (
    CONSTANT_HEADERS,
    Delivery,
    Headers,
    MessageProfile,
    OutMessage,
    Record,
)

PROFILE = MessageProfile(
    binary=False,
    null_keys=True,
    null_values=False,
    per_message_headers=False,
    timestamps=False,
    bare_empty=False,
)

KEY_DELIMITER = "\t"

# Output format: a header line "REC partition offset timestamp keylen valuelen"
# (length -1 for null), then exactly keylen key bytes and valuelen value
# bytes, then the headers as "name=value,..." and a newline.
CONSUME_FORMAT = r"REC %p %o %T %K %S\n%k%s%h\n"
RECORD_HEADER = re.compile(rb"REC (\d+) (\d+) (-?\d+) (-?\d+) (-?\d+)\n")


class KcatDriver:
    """kcat; text values, constant headers, no null values, no timestamps."""

    name = "kcat"
    profile = PROFILE
    reports_offsets = False

    def produce(
        self,
        bootstrap: str,
        topic: str,
        messages: Sequence[OutMessage],
        *,
        compression: str = "none",
        acks: str = "all",
        security: ClientSecurity | None = None,
    ) -> list[Delivery]:
        """Run one `kcat -P` per partition; deliveries carry no offsets."""
        check_codec(compression)
        check_acks(acks)
        check_messages(self, messages)
        for partition in sorted({m.partition for m in messages}):
            batch = [m for m in messages if m.partition == partition]
            _produce_partition(bootstrap, topic, partition, batch, compression, acks, security)
        return [Delivery(m.partition, None) for m in messages]

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """Run one `kcat -C -e` per partition from its start offset to end of partition."""
        records: list[Record] = []
        for partition, offset in starts.items():
            argv = [
                "kcat", "-b", bootstrap, "-C", "-t", topic, "-p", str(partition),
                "-o", str(offset), "-e", "-q", "-f", CONSUME_FORMAT,
                *security_args(security),
            ]  # fmt: skip
            done = run_tool(argv, timeout_s=timeout_s)
            if done.returncode != 0:
                raise ConsumeTimeout(
                    f"kcat -C partition {partition} exited {done.returncode}: "
                    f"{done.stderr.decode(errors='replace')[-2000:]}",
                    records,
                )
            records.extend(parse_consume_output(done.stdout))
        return records


def _produce_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    messages: Sequence[OutMessage],
    compression: str,
    acks: str,
    security: ClientSecurity | None,
) -> None:
    for m in messages:
        if m.headers != CONSTANT_HEADERS:
            raise ValueError("kcat can only send CONSTANT_HEADERS")
    argv = [
        "kcat", "-b", bootstrap, "-P", "-t", topic, "-p", str(partition),
        "-K", KEY_DELIMITER, "-z", compression,
        "-X", f"acks={acks}", "-X", f"linger.ms={LINGER_MS}",
        "-X", f"message.timeout.ms={int(PRODUCE_TIMEOUT_S * 1000)}",
        *security_args(security),
    ]  # fmt: skip
    for name, value in CONSTANT_HEADERS:
        assert value is not None
        argv += ["-H", f"{name}={value.decode()}"]
    done = run_tool(argv, input_bytes=_produce_input(messages), timeout_s=PRODUCE_TIMEOUT_S + 30)
    if done.returncode != 0 or b"Delivery failed" in done.stderr:
        raise ProduceFailed(
            f"kcat -P partition {partition} exited {done.returncode}: "
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )


def security_args(security: ClientSecurity | None) -> list[str]:
    """kcat `-X key=value` arguments for `security` (none for PLAINTEXT)."""
    return [arg for key, value in librdkafka_options(security).items() for arg in ("-X", f"{key}={value}")]


def _produce_input(messages: Sequence[OutMessage]) -> bytes:
    """stdin for kcat -P: `key<TAB>value` lines, or just `value` for a null key."""
    lines = []
    for m in messages:
        assert m.value is not None
        if b"\n" in m.value or KEY_DELIMITER.encode() in m.value:
            raise ValueError("kcat values cannot contain newlines or tabs")
        if m.key is None and not m.value:
            raise ValueError("kcat skips empty lines: cannot send a null key with an empty value")
        key = b"" if m.key is None else m.key + KEY_DELIMITER.encode()
        lines.append(key + m.value + b"\n")
    return b"".join(lines)


def parse_consume_output(data: bytes) -> list[Record]:
    """Parse the `CONSUME_FORMAT` stream into records.

    Raises:
        AssertionError: the stream is malformed (truncated or garbled).
    """
    records = []
    pos = 0
    while pos < len(data):
        match = RECORD_HEADER.match(data, pos)
        assert match, f"kcat output garbled at byte {pos}: {data[pos : pos + 80]!r}"
        partition, offset, timestamp, key_len, value_len = (int(g) for g in match.groups())
        pos = match.end()
        key, pos = _take(data, pos, key_len)
        value, pos = _take(data, pos, value_len)
        end = data.index(b"\n", pos)
        records.append(Record(partition, offset, key, value, parse_headers(data[pos:end]), timestamp))
        pos = end + 1
    return records


def _take(data: bytes, pos: int, length: int) -> tuple[bytes | None, int]:
    if length < 0:
        return None, pos
    assert pos + length <= len(data), "kcat output truncated"
    return data[pos : pos + length], pos + length


def parse_headers(text: bytes) -> Headers:
    """kcat's `%h`: "name=value,name=value" (empty for no headers)."""
    if not text:
        return ()
    pairs = []
    for item in text.split(b","):
        name, _, value = item.partition(b"=")
        pairs.append((name.decode(), value))
    return tuple(pairs)
