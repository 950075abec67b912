"""Driver for the Apache Kafka Java client, through java/KafkaTool.java.

One JVM per produce (all messages from a TSV file) and one per consume (all
partitions), to keep JVM start-up cost to two runs per round trip.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from system_tests import javatool
from system_tests.clients.base import (
    CONSUME_TIMEOUT_S,
    PRODUCE_TIMEOUT_S,
    ClientSecurity,
    ConsumeTimeout,
    ProduceFailed,
    acked_offset,
    check_acks,
    check_codec,
    java_props,
)
from system_tests.messages import Delivery, MessageProfile, OutMessage, Record

# Slack on top of the tool's own timeouts for JVM start-up and shutdown.
JVM_SLACK_S = 30.0


class JavaDriver:
    """Java kafka-clients; supports everything in `MessageProfile`."""

    name = "java"
    profile = MessageProfile()
    reports_offsets = True

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
        """Write messages to a TSV file and run `KafkaTool produce --input`."""
        check_codec(compression)
        check_acks(acks)
        with tempfile.TemporaryDirectory(prefix="kafkatool-") as scratch:
            input_path = Path(scratch) / "messages.tsv"
            input_path.write_text("".join(to_tsv(m) + "\n" for m in messages))
            args = [
                "produce", "--bootstrap", bootstrap, "--topic", topic,
                "--input", str(input_path), "--compression", compression,
                "--acks", acks, "--report-offsets",
                *prop_args(security),
            ]  # fmt: skip
            result = javatool.run(args, check=False, timeout_s=PRODUCE_TIMEOUT_S + JVM_SLACK_S)
        if result["_exit"] != javatool.EXIT_OK:
            raise ProduceFailed(f"java produce failed: {javatool.summary(result)}")
        return [Delivery(pair[0], acked_offset(pair[1], acks)) for pair in result["offsets"]]

    def consume(
        self,
        bootstrap: str,
        topic: str,
        starts: Mapping[int, int],
        *,
        timeout_s: float = CONSUME_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """Run `KafkaTool consume` with one --start P:O per partition."""
        args = [
            "consume", "--bootstrap", bootstrap, "--topic", topic,
            "--timeout-ms", str(int(timeout_s * 1000)),
            *prop_args(security),
        ]  # fmt: skip
        for partition, offset in starts.items():
            args += ["--start", f"{partition}:{offset}"]
        result = javatool.run(args, check=False, timeout_s=timeout_s + JVM_SLACK_S)
        records = [from_json(r) for r in result.get("records", [])]
        if result["_exit"] != javatool.EXIT_OK:
            raise ConsumeTimeout(f"java consume failed: {javatool.summary(result)}", records)
        return records


def prop_args(security: ClientSecurity | None) -> list[str]:
    """KafkaTool `--prop key=value` arguments for `security` (none for PLAINTEXT)."""
    return [arg for prop in java_props(security) for arg in ("--prop", prop)]


def _b64(data: bytes | None) -> str:
    return "-" if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def to_tsv(m: OutMessage) -> str:
    """One KafkaTool --input line: partition, key, value, timestamp, headers."""
    headers = ",".join(f"{name}={_b64(value)}" for name, value in m.headers) or "-"
    for name, _ in m.headers:
        if any(c in name for c in ",=\t\n"):
            raise ValueError(f"header name {name!r} cannot go through KafkaTool's TSV")
    timestamp = "-" if m.timestamp_ms is None else str(m.timestamp_ms)
    return "\t".join((str(m.partition), _b64(m.key), _b64(m.value), timestamp, headers))


def from_json(r: Mapping[str, Any]) -> Record:
    """A KafkaTool consume record (base64 key/value/headers) as a `Record`."""
    headers = tuple((name, _unb64(value)) for name, value in r["h"])
    return Record(r["p"], r["o"], _unb64(r["k"]), _unb64(r["v"]), headers, r["ts"])
