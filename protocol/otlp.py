"""A minimal decoder of OpenTelemetry (OTLP) ``MetricsData`` protobuf messages,
the payload of KIP-714's PushTelemetry.

Only what the broker exports is read: per metric its name and, of each data
point, the attributes and the value (gauges and sums: the number; histograms:
their count and sum, as ``<name>.count`` and ``<name>.sum``). The resource's
attributes (the client's identity: client id, software name, ...) are kept
beside. Everything else (units, descriptions, exemplars, timestamps, unknown
fields) is skipped by its wire type, as protobuf readers must.

Theory of operation: protobuf's wire format is a sequence of (field number,
wire type) keys, each followed by a varint, a fixed 64- or 32-bit value or a
length-prefixed slice. ``_fields`` walks one message and yields its fields;
one small function per message type picks the fields it knows. The message
types nest to a fixed depth (MetricsData > ResourceMetrics > ScopeMetrics >
Metric > Gauge/Sum/Histogram > data point > KeyValue > AnyValue), and nested
arrays or key-value lists inside an attribute value are not descended into,
so a hostile payload cannot make the decoder recurse.

Field numbers are those of opentelemetry-proto's ``metrics/v1/metrics.proto``,
``common/v1/common.proto`` and ``resource/v1/resource.proto``.

Error handling: a payload that is not a well-formed ``MetricsData`` raises
``OtlpError``. This module is pure (no I/O).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_UINT64 = struct.Struct("<Q")

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

Attributes = tuple[tuple[str, str], ...]


class OtlpError(ValueError):
    """The payload is not a well-formed OTLP MetricsData message."""


@dataclass(frozen=True, slots=True)
class DataPoint:
    """One value of one metric: ``name`` as the client named it, ``kind``
    gauge / sum / histogram, the point's attributes (values rendered as text)."""

    name: str
    kind: str
    attributes: Attributes
    value: float


@dataclass(frozen=True, slots=True)
class MetricsPayload:
    """A decoded push: the resource attributes and every data point."""

    resource: Attributes
    points: tuple[DataPoint, ...]


def decode_metrics_data(data: bytes) -> MetricsPayload:
    """Decode an OTLP ``MetricsData`` message.

    Several ResourceMetrics are allowed; their resource attributes are merged
    (the Java client and librdkafka send one).

    Raises:
        OtlpError: malformed protobuf or a field of the wrong wire type.
    """
    resource: dict[str, str] = {}
    points: list[DataPoint] = []
    view = memoryview(data)
    for number, wire, value in _fields(view):
        if number == 1:
            _resource_metrics(_slice(value, wire), resource, points)
    return MetricsPayload(tuple(resource.items()), tuple(points))


def _resource_metrics(buf: memoryview, resource: dict[str, str],
                      points: list[DataPoint]) -> None:
    for number, wire, value in _fields(buf):
        if number == 1:  # Resource
            for n, w, v in _fields(_slice(value, wire)):
                if n == 1:
                    key, text = _key_value(_slice(v, w))
                    resource[key] = text
        elif number == 2:  # ScopeMetrics
            for n, w, v in _fields(_slice(value, wire)):
                if n == 2:
                    _metric(_slice(v, w), points)


def _metric(buf: memoryview, points: list[DataPoint]) -> None:
    name = ""
    bodies: list[tuple[int, memoryview]] = []
    for number, wire, value in _fields(buf):
        if number == 1:
            name = _text(_slice(value, wire))
        elif number in (5, 7, 9):  # Gauge, Sum, Histogram
            bodies.append((number, _slice(value, wire)))
    for number, body in bodies:
        for n, w, v in _fields(body):
            if n != 1:  # data_points; temporality and monotonicity are not kept
                continue
            if number == 9:
                points.extend(_histogram_point(name, _slice(v, w)))
            else:
                points.append(_number_point(name, "gauge" if number == 5 else "sum",
                                            _slice(v, w)))


def _number_point(name: str, kind: str, buf: memoryview) -> DataPoint:
    attributes: list[tuple[str, str]] = []
    value = 0.0
    for number, wire, raw in _fields(buf):
        if number == 7:
            attributes.append(_key_value(_slice(raw, wire)))
        elif number == 4:  # as_double
            value = _DOUBLE.unpack(_fixed(raw, wire, FIXED64))[0]
        elif number == 6:  # as_int (sfixed64)
            value = float(_INT64.unpack(_fixed(raw, wire, FIXED64))[0])
    return DataPoint(name, kind, tuple(attributes), value)


def _histogram_point(name: str, buf: memoryview) -> list[DataPoint]:
    attributes: list[tuple[str, str]] = []
    count = 0.0
    total = 0.0
    for number, wire, raw in _fields(buf):
        if number == 9:
            attributes.append(_key_value(_slice(raw, wire)))
        elif number == 4:  # count (fixed64)
            count = float(_UINT64.unpack(_fixed(raw, wire, FIXED64))[0])
        elif number == 5:  # sum (double)
            total = _DOUBLE.unpack(_fixed(raw, wire, FIXED64))[0]
    attrs = tuple(attributes)
    return [DataPoint(f"{name}.count", "histogram", attrs, count),
            DataPoint(f"{name}.sum", "histogram", attrs, total)]


def _key_value(buf: memoryview) -> tuple[str, str]:
    """A KeyValue, its AnyValue rendered as text (arrays and key-value lists as "")."""
    key = ""
    text = ""
    for number, wire, value in _fields(buf):
        if number == 1:
            key = _text(_slice(value, wire))
        elif number == 2:
            text = _any_value(_slice(value, wire))
    return key, text


def _any_value(buf: memoryview) -> str:
    text = ""
    for number, wire, value in _fields(buf):
        if number == 1:
            text = _text(_slice(value, wire))
        elif number == 2:
            text = "true" if _varint_value(value, wire) else "false"
        elif number == 3:
            raw = _varint_value(value, wire)
            text = str(raw - (1 << 64) if raw >= 1 << 63 else raw)
        elif number == 4:
            text = repr(_DOUBLE.unpack(_fixed(value, wire, FIXED64))[0])
    return text


# -- wire format ---------------------------------------------------------------

def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of one message: a varint
    or fixed value as an int, a length-delimited value as a slice.

    Raises:
        OtlpError: truncated input, a bad varint, field number 0 or a
            deprecated group wire type.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise OtlpError("field number 0")
        value: int | memoryview
        if wire == VARINT:
            value, pos = _varint(buf, pos)
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            if pos + size > end:
                raise OtlpError("truncated fixed-width field")
            value = int.from_bytes(buf[pos:pos + size], "little")
            pos += size
        elif wire == LENGTH:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise OtlpError("truncated length-delimited field")
            value = buf[pos:pos + size]
            pos += size
        else:
            raise OtlpError(f"unsupported wire type {wire}")
        yield number, wire, value


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise OtlpError("truncated varint")
        if shift > 63:
            raise OtlpError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def _slice(value: int | memoryview, wire: int) -> memoryview:
    if wire != LENGTH or not isinstance(value, memoryview):
        raise OtlpError(f"expected a length-delimited field, got wire type {wire}")
    return value


def _fixed(value: int | memoryview, wire: int, want: int) -> bytes:
    if wire != want or not isinstance(value, int):
        raise OtlpError(f"expected wire type {want}, got {wire}")
    return value.to_bytes(8, "little")


def _varint_value(value: int | memoryview, wire: int) -> int:
    if wire != VARINT or not isinstance(value, int):
        raise OtlpError(f"expected a varint, got wire type {wire}")
    return value


def _text(buf: memoryview) -> str:
    try:
        return bytes(buf).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OtlpError("string field is not UTF-8") from exc
