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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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


# Values of `ClientSecurity.protocol` and `.mechanism`, by their Kafka names.
SECURITY_PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client authenticates and encrypts; None (the default) means PLAINTEXT.

    Attributes:
        protocol: "SSL", "SASL_PLAINTEXT" or "SASL_SSL" (Kafka's security.protocol).
        ca_file: PEM CA certificate(s) to verify the broker with (TLS protocols).
            None means the library's default trust store.
        cert_file: PEM client certificate, for mutual TLS (with `key_file`).
        key_file: PEM private key (unencrypted PKCS8) of `cert_file`.
        keystore_pem: key then certificate in one PEM file: the Java client's
            ``ssl.keystore.type=PEM`` keystore (`certs.Pki.alice_pem`).
        mechanism: SASL mechanism: "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
        username: SASL user name.
        password: SASL password.

    The broker's host name (or IP) is always verified against its certificate.
    """

    protocol: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    keystore_pem: Path | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; expected one of {SECURITY_PROTOCOLS}")
        if self.sasl:
            if self.mechanism not in SASL_MECHANISMS:
                raise ValueError(f"{self.protocol} needs a mechanism in {SASL_MECHANISMS}")
            if self.username is None or self.password is None:
                raise ValueError(f"{self.protocol} needs a username and a password")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")

    @property
    def tls(self) -> bool:
        """Whether the connection is encrypted (SSL or SASL_SSL)."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether the client authenticates with SASL."""
        return self.protocol.startswith("SASL_")


def kafka_python_options(security: ClientSecurity | None) -> dict[str, Any]:
    """KafkaProducer/KafkaConsumer/KafkaAdminClient keyword arguments for `security`.

    Empty for None (plaintext). kafka-python 3 takes `sasl_plain_username`/
    `sasl_plain_password` for SCRAM as well as PLAIN.
    """
    if security is None:
        return {}
    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.tls:
        options["ssl_check_hostname"] = True
        if security.ca_file is not None:
            options["ssl_cafile"] = str(security.ca_file)
        if security.cert_file is not None:
            options["ssl_certfile"] = str(security.cert_file)
            options["ssl_keyfile"] = str(security.key_file)
    if security.sasl:
        options["sasl_mechanism"] = security.mechanism
        options["sasl_plain_username"] = security.username
        options["sasl_plain_password"] = security.password
    return options


def librdkafka_options(security: ClientSecurity | None) -> dict[str, str]:
    """librdkafka properties (confluent-kafka config, kcat -X) for `security`.

    Empty for None (plaintext).
    """
    if security is None:
        return {}
    options = {"security.protocol": security.protocol}
    if security.tls:
        options["ssl.endpoint.identification.algorithm"] = "https"
        if security.ca_file is not None:
            options["ssl.ca.location"] = str(security.ca_file)
        if security.cert_file is not None:
            options["ssl.certificate.location"] = str(security.cert_file)
            options["ssl.key.location"] = str(security.key_file)
    if security.sasl:
        assert security.mechanism is not None
        assert security.username is not None and security.password is not None
        options["sasl.mechanisms"] = security.mechanism
        options["sasl.username"] = security.username
        options["sasl.password"] = security.password
    return options


def java_props(security: ClientSecurity | None) -> list[str]:
    """Java client properties for `security`, as "key=value" strings (KafkaTool --prop).

    Trust and key material use Kafka's PEM store type, so no JKS/PKCS12
    conversion is needed; the keystore is `keystore_pem` (key then cert).
    Empty for None (plaintext).
    """
    if security is None:
        return []
    props = {"security.protocol": security.protocol}
    if security.tls:
        props["ssl.endpoint.identification.algorithm"] = "https"
        if security.ca_file is not None:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(security.ca_file)
        if security.keystore_pem is not None:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(security.keystore_pem)
    if security.sasl:
        assert security.username is not None and security.password is not None
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if security.mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        props["sasl.mechanism"] = str(security.mechanism)
        props["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(security.username)} "
            f"password={_jaas_quote(security.password)};"
        )
    return [f"{key}={value}" for key, value in props.items()]


def _jaas_quote(text: str) -> str:
    """A JAAS option value in double quotes (backslash escapes " and \\)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
        security: ClientSecurity | None = None,
    ) -> list[Delivery]:
        """Produce `messages` (each to its own partition), in order, and wait for acks.

        Args:
            security: TLS/SASL settings; None for PLAINTEXT.

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
        security: ClientSecurity | None = None,
    ) -> list[Record]:
        """Read partitions from the given offsets up to their current end offsets.

        Args:
            starts: partition -> first offset to read.
            security: TLS/SASL settings; None for PLAINTEXT.

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
