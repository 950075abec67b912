"""protocol.otlp: OTLP MetricsData decoding, from payloads encoded by hand."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from protocol.otlp import DataPoint, OtlpError, decode_metrics_data


def varint(n: int) -> bytes:
    out = bytearray()
    n &= 0xFFFFFFFFFFFFFFFF
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(number: int, body: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(body)) + body


def fixed64(number: int, raw: bytes) -> bytes:
    return varint(number << 3 | 1) + raw


def vfield(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def kv(key: str, any_value: bytes) -> bytes:
    return ld(1, key.encode()) + ld(2, any_value)


def string_value(text: str) -> bytes:
    return ld(1, text.encode())


def number_point(attrs: bytes, *, double: float | None = None, integer: int | None = None
                 ) -> bytes:
    body = attrs + fixed64(3, struct.pack("<Q", 1_700_000_000_000_000_000))  # time_unix_nano
    if double is not None:
        body += fixed64(4, struct.pack("<d", double))
    if integer is not None:
        body += fixed64(6, struct.pack("<q", integer))
    return body


def metrics_data(resource_attrs: bytes, metrics: list[bytes]) -> bytes:
    scope = ld(1, ld(1, b"org.apache.kafka")) + b"".join(ld(2, m) for m in metrics)
    resource_metrics = ld(1, resource_attrs) + ld(2, scope) + ld(3, b"schema")
    return ld(1, resource_metrics)


GAUGE = (ld(1, b"org.apache.kafka.producer.record.queue.time.avg")
         + ld(2, b"description, skipped") + ld(3, b"ms")
         + ld(5, ld(1, number_point(ld(7, kv("topic", string_value("t"))), double=1.5))))
SUM = (ld(1, b"org.apache.kafka.producer.record.send.total")
       + ld(7, ld(1, number_point(b"", integer=-3) + vfield(8, 0)) + vfield(2, 2) + vfield(3, 1)))
HISTOGRAM = (ld(1, b"h") + ld(9, ld(1, (
    ld(9, kv("n", vfield(3, -7)))
    + fixed64(4, struct.pack("<Q", 4))         # count
    + fixed64(5, struct.pack("<d", 10.0))      # sum
    + ld(6, struct.pack("<QQ", 1, 3))          # bucket_counts, packed, not kept
    + ld(7, struct.pack("<d", 5.0))))))         # explicit_bounds, not kept
PAYLOAD = metrics_data(ld(1, kv("client_id", string_value("c1")))
                       + ld(1, kv("flag", vfield(2, 1))), [GAUGE, SUM, HISTOGRAM])


def test_decodes_gauge_sum_histogram_and_resource() -> None:
    got = decode_metrics_data(PAYLOAD)
    assert got.resource == (("client_id", "c1"), ("flag", "true"))
    assert got.points == (
        DataPoint("org.apache.kafka.producer.record.queue.time.avg", "gauge",
                  (("topic", "t"),), 1.5),
        DataPoint("org.apache.kafka.producer.record.send.total", "sum", (), -3.0),
        DataPoint("h.count", "histogram", (("n", "-7"),), 4.0),
        DataPoint("h.sum", "histogram", (("n", "-7"),), 10.0),
    )


def test_golden_bytes_of_a_single_gauge() -> None:
    data = bytes.fromhex(
        "0a1d"          # MetricsData.resource_metrics (1), 29 bytes
        "121b"          # ResourceMetrics.scope_metrics (2), 27 bytes
        "1219"          # ScopeMetrics.metrics (2), 25 bytes
        "0a01" "67"     # Metric.name (1) = "g"
        "2a14"          # Metric.gauge (5), 20 bytes
        "0a12"          # Gauge.data_points (1), 18 bytes
        "3a07"          # NumberDataPoint.attributes (7), 7 bytes
        "0a01" "6b"     # KeyValue.key = "k"
        "1202" "1802"   # KeyValue.value: AnyValue.int_value (3) = 2
        "31" "0004000000000000"  # NumberDataPoint.as_int (6, fixed64) = 1024
    )
    assert decode_metrics_data(data).points == (DataPoint("g", "gauge", (("k", "2"),), 1024.0),)


def test_empty_payload_has_no_points() -> None:
    assert decode_metrics_data(b"").points == ()


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    extra = vfield(15, 300) + fixed64(16, b"\0" * 8) + ld(17, b"xyz") + varint(18 << 3 | 5) + b"abcd"
    assert decode_metrics_data(PAYLOAD + extra) == decode_metrics_data(PAYLOAD)


def test_every_truncation_is_refused_or_a_prefix() -> None:
    """Fed one byte more at a time: each prefix decodes or raises OtlpError."""
    for end in range(len(PAYLOAD)):
        try:
            decode_metrics_data(PAYLOAD[:end])
        except OtlpError:
            pass


@pytest.mark.parametrize("bad", [
    b"\x0a\x05\x01",                 # length beyond the end
    b"\x0b",                         # group wire type (3)
    b"\x00\x01",                     # field number 0
    b"\x08" + b"\xff" * 11,          # varint longer than 10 bytes
    b"\x09\x00\x00",                 # truncated fixed64
    b"\x08\x01",                     # resource_metrics as a varint
    ld(1, ld(2, ld(2, ld(1, b"\xff\xfe")))),  # a name that is not UTF-8
    ld(1, ld(2, ld(2, ld(5, ld(1, vfield(4, 1)))))),  # as_double as a varint
])
def test_malformed_payloads_raise(bad: bytes) -> None:
    with pytest.raises(OtlpError):
        decode_metrics_data(bad)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_otlp_error(data: bytes) -> None:
    try:
        decode_metrics_data(data)
    except OtlpError:
        pass


# A real push: the metrics of a Java 4.3 consumer (client.id "capture", group
# "g1", subscribed to org.apache.kafka.consumer.*, cumulative temporality),
# zstd-compressed as the client sent them, captured by a TCP proxy between
# the client and tierd.
JAVA_PUSH = Path(__file__).parent / "data" / "java_consumer_push.otlp.zst"


def test_decodes_a_real_java_client_push() -> None:
    raw = zstandard.ZstdDecompressor().decompress(JAVA_PUSH.read_bytes(),
                                                  max_output_size=1 << 20)
    got = decode_metrics_data(raw)
    assert got.resource == (("group_id", "g1"),)
    assert len(got.points) == 112
    assert {p.kind for p in got.points} == {"gauge", "sum"}
    assert all(p.name.startswith("org.apache.kafka.consumer.") for p in got.points)
    by_name = {(p.name, p.attributes): p for p in got.points}
    created = by_name[("org.apache.kafka.consumer.connection.creation.total", ())]
    assert (created.kind, created.value) == ("sum", 2.0)
    assert ("org.apache.kafka.consumer.fetch.manager.records.consumed.total", ()) in by_name
    # Cut short at many places: every prefix decodes or is refused.
    for end in range(0, len(raw), 97):
        try:
            decode_metrics_data(raw[:end])
        except OtlpError:
            pass
