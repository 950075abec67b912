"""KIP-714 client metrics: the client instances the broker knows, their
subscription, the rules of GetTelemetrySubscriptions and PushTelemetry, and
the latest pushed values served on the Prometheus endpoint.

Theory of operation: subscriptions come from two broker keys (not Kafka's
CLIENT_METRICS config resources): ``tierd.client.metrics.names`` (metric
name prefixes; empty = no subscription, so clients push nothing; ``*`` =
every metric) and ``tierd.client.metrics.interval.ms``. A client's first
GetTelemetrySubscriptions carries a zero instance id and is given a random
one. The subscription id is a CRC32C of the prefixes and interval XORed with
a hash of the instance id, as Kafka computes it, so a broker with another
configuration answers a push UNKNOWN_SUBSCRIPTION_ID and the client asks
again. The timing rules are Kafka's ``ClientMetricsManager``'s: a
subscription request or a push earlier than one interval after the last is
THROTTLING_QUOTA_EXCEEDED, except the first push after a subscription
request, a terminating push, and a subscription request right after a push
answered UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE (Kafka means
to exempt those; its check as written does not); after a terminating push
the instance takes no more pushes (INVALID_REQUEST). A dynamic change of the
two keys gives every instance a new subscription id and a fresh start.

Memory is bounded: at most ``MAX_CLIENT_INSTANCES`` instances (the least
recently seen is forgotten), an instance is forgotten after
``max(INSTANCE_EXPIRY_MS, 3 * interval)`` without a request (and its series
disappear from the endpoint), and at most ``MAX_EXPORTED_SERIES`` series
are exported in all (points beyond are dropped and counted).

Concurrency: requests are answered on the event loop; ``run`` expires
instances and copies the exported series once per ``SNAPSHOT_INTERVAL_S``;
scrapes (prometheus_client's HTTP thread) read only that copy.
"""

from __future__ import annotations

import io
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c
import lz4.frame
import trio
import zstandard
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from protocol.errors import ErrorCode
from protocol.otlp import DataPoint, MetricsPayload, OtlpError, decode_metrics_data
from replication.metrics import SNAPSHOT_INTERVAL_S

# Kafka's ClientMetricsManager cache size (16k active clients per broker).
MAX_CLIENT_INSTANCES = 16384
# Kafka's default instance expiry; an instance with a long interval lives 3 intervals.
INSTANCE_EXPIRY_MS = 60_000
# Most client series on the endpoint (Prometheus cardinality), over every instance.
MAX_EXPORTED_SERIES = 10_000

# Largest decompressed push: a client's whole metric set is tens of KB; a
# small compressed payload must not expand into gigabytes (refused INVALID_RECORD).
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(data, limit)
    if not inflater.eof:
        raise OtlpError("gzip data truncated or larger than allowed")
    return out


def _unlz4(data: bytes, limit: int) -> bytes:
    inflater = lz4.frame.LZ4FrameDecompressor()
    out = inflater.decompress(data, max_length=limit)
    if not inflater.eof:
        raise OtlpError("lz4 data truncated or larger than allowed")
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        out = reader.read(limit + 1)
    if len(out) > limit:
        raise OtlpError("zstd data larger than allowed")
    return bytes(out)


# What the broker decompresses, with a bound on the output; offered to clients
# in Kafka's order of preference. Snappy (xerial framing) is not offered: its
# decoder here cannot bound what it produces.
_DECOMPRESS: dict[int, Callable[[bytes, int], bytes]] = {
    NONE: lambda data, _limit: data, GZIP: _gunzip, LZ4: _unlz4, ZSTD: _unzstd}
ACCEPTED_COMPRESSION = (ZSTD, LZ4, GZIP)
# Push errors after which a subscription request is not throttled: the client
# must learn the new subscription (or codecs) to push at all. Kafka's
# ClientMetricsManager means to exempt these too.
_REFETCH_AT_ONCE = frozenset({ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                              ErrorCode.UNSUPPORTED_COMPRESSION_TYPE})


@dataclass(frozen=True, slots=True)
class Subscription:
    """What every client is asked to push (one subscription for all clients)."""

    prefixes: tuple[str, ...]
    interval_ms: int

    def requested_metrics(self) -> list[str]:
        """RequestedMetrics: [] pushes nothing, [""] everything."""
        return [""] if "*" in self.prefixes else list(self.prefixes)

    def subscription_id(self, instance_id: uuid.UUID) -> int:
        text = ("[" + ", ".join(self.prefixes) + "]" + str(self.interval_ms)).encode()
        signed = crc32c.crc32c(text) ^ _java_hash(instance_id) & 0xFFFFFFFF
        return signed - (1 << 32) if signed >= 1 << 31 else signed


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    client_id: str
    subscription_id: int
    last_get_ms: float = -1.0
    last_push_ms: float = -1.0
    terminating: bool = False
    # The last push's answer: after UNKNOWN_SUBSCRIPTION_ID or
    # UNSUPPORTED_COMPRESSION_TYPE the client may ask for the subscription at once.
    last_error: ErrorCode = ErrorCode.NONE
    last_seen_ms: float = 0.0
    series: tuple[tuple[tuple[str, ...], float], ...] = ()


@dataclass(frozen=True, slots=True)
class SubscriptionAnswer:
    error: ErrorCode
    instance_id: uuid.UUID | None = None
    subscription_id: int = 0
    requested: list[str] = field(default_factory=list)


class ClientTelemetry:
    """The client instances of one broker and their latest pushed metrics.

    Args:
        subscription: the configured subscription.
        max_bytes: largest accepted payload (Kafka's telemetry.max.bytes).
        registry: where the client series and the drop counter are exported.
        clock: milliseconds (injected by tests).
    """

    def __init__(self, subscription: Subscription, max_bytes: int,
                 registry: CollectorRegistry | None,
                 clock: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self.subscription = subscription
        self.max_bytes = max_bytes
        self._clock = clock
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self._exported_series = 0
        self._dirty = False
        self.snapshot_copy: list[tuple[tuple[str, ...], float]] = []
        self.dropped = Counter("tierd_client_metrics_dropped_points",
                               "Pushed client metric points not exported: over the series "
                               "cap or undecodable", registry=registry)
        if registry is not None:
            registry.register(_ClientMetricsCollector(self))

    @property
    def expiry_ms(self) -> float:
        return max(INSTANCE_EXPIRY_MS, 3 * self.subscription.interval_ms)

    def set_subscription(self, subscription: Subscription) -> None:
        """A new configuration: every instance gets the new subscription id
        (its next push is answered UNKNOWN_SUBSCRIPTION_ID) and, as Kafka
        re-creates it, may ask for the subscription again at once."""
        if subscription == self.subscription:
            return
        self.subscription = subscription
        for inst in self._instances.values():
            inst.subscription_id = subscription.subscription_id(inst.instance_id)
            inst.last_get_ms = inst.last_push_ms = -1.0

    def instance(self, instance_id: uuid.UUID) -> ClientInstance | None:
        return self._instances.get(instance_id)

    def get_subscription(self, instance_id: uuid.UUID | None, client_id: str
                         ) -> SubscriptionAnswer:
        """GetTelemetrySubscriptions: assign an id to a new client, refuse one
        asking again within the interval, else answer the subscription."""
        now = self._clock()
        self.expire(now)
        if instance_id is None:
            instance_id = uuid.uuid4()
            while instance_id in self._instances:
                instance_id = uuid.uuid4()
        inst = self._touch(instance_id, client_id, now)
        last = max(inst.last_get_ms, inst.last_push_ms)
        if (last >= 0 and now - last < self.subscription.interval_ms
                and inst.last_error not in _REFETCH_AT_ONCE):
            return SubscriptionAnswer(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        inst.last_get_ms = now
        inst.last_error = ErrorCode.NONE
        return SubscriptionAnswer(ErrorCode.NONE, instance_id, inst.subscription_id,
                                  self.subscription.requested_metrics())

    def check_push(self, instance_id: uuid.UUID | None, client_id: str, subscription_id: int,
                   terminating: bool, compression: int, size: int) -> ErrorCode:
        """PushTelemetry's checks, in Kafka's order; a terminating flag is
        remembered whatever the outcome."""
        if instance_id is None:
            return ErrorCode.INVALID_REQUEST
        now = self._clock()
        self.expire(now)
        inst = self._touch(instance_id, client_id, now)
        error = self._push_error(inst, now, subscription_id, terminating, compression, size)
        inst.last_error = error
        # Once terminating, always (Kafka takes each push's flag, even refused).
        inst.terminating = inst.terminating or terminating
        return error

    def _push_error(self, inst: ClientInstance, now: float, subscription_id: int,
                    terminating: bool, compression: int, size: int) -> ErrorCode:
        if inst.terminating:
            return ErrorCode.INVALID_REQUEST
        # The first push after a subscription request may come at once.
        on_time = (inst.last_get_ms > inst.last_push_ms or inst.last_push_ms < 0
                   or now - inst.last_push_ms >= self.subscription.interval_ms)
        if not on_time and not terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        inst.last_push_ms = now
        if subscription_id != inst.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if compression not in _DECOMPRESS:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if size > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE

    def record(self, instance_id: uuid.UUID, payload: MetricsPayload) -> None:
        """Keep ``payload``'s points as the instance's latest values (replacing
        the previous push's), within the series cap."""
        inst = self._instances.get(instance_id)
        if inst is None:
            return
        self._exported_series -= len(inst.series)
        room = max(0, MAX_EXPORTED_SERIES - self._exported_series)
        client_id = dict(payload.resource).get("client_id", inst.client_id)
        kept = [(_labels(str(instance_id), client_id, p), p.value) for p in payload.points[:room]]
        if len(payload.points) > room:
            self.dropped.inc(len(payload.points) - room)
        inst.series = tuple(kept)
        self._exported_series += len(kept)
        self._dirty = True

    def expire(self, now: float) -> None:
        """Forget instances not heard from within the expiry, and the least
        recently seen beyond ``MAX_CLIENT_INSTANCES``."""
        while self._instances:
            inst = next(iter(self._instances.values()))
            if now - inst.last_seen_ms < self.expiry_ms and len(
                    self._instances) <= MAX_CLIENT_INSTANCES:
                return
            self._forget(inst)

    def snapshot(self) -> None:
        """Copy the exported series for scrapes (on the event loop)."""
        self.expire(self._clock())
        if self._dirty:
            self.snapshot_copy = [s for inst in self._instances.values() for s in inst.series]
            self._dirty = False

    async def run(self) -> None:
        """Keep the scrape copy fresh and expire instances until cancelled."""
        while True:
            self.snapshot()
            await trio.sleep(SNAPSHOT_INTERVAL_S)

    def _touch(self, instance_id: uuid.UUID, client_id: str, now: float) -> ClientInstance:
        inst = self._instances.get(instance_id)
        if inst is None:
            inst = ClientInstance(instance_id, client_id,
                                  self.subscription.subscription_id(instance_id))
            self._instances[instance_id] = inst
        else:
            self._instances.move_to_end(instance_id)
        inst.last_seen_ms = now
        self.expire(now)
        return inst

    def _forget(self, inst: ClientInstance) -> None:
        del self._instances[inst.instance_id]
        if inst.series:
            self._exported_series -= len(inst.series)
            self._dirty = True


def decode_push(compression: int, data: bytes) -> MetricsPayload:
    """Decompress and decode a push's metrics (run in a worker thread).

    Raises:
        OtlpError: undecompressable or malformed payload.
    """
    try:
        raw = _DECOMPRESS[compression](data, MAX_DECOMPRESSED_BYTES)
    except OtlpError:
        raise
    except Exception as exc:  # each codec's library raises its own error types
        raise OtlpError(f"cannot decompress: {exc}") from exc
    return decode_metrics_data(raw)


def subscription_from_config(names: list[str], interval_ms: int) -> Subscription:
    return Subscription(tuple(n.strip() for n in names if n.strip()), interval_ms)


def _labels(instance_id: str, client_id: str, point: DataPoint) -> tuple[str, ...]:
    attributes = ",".join(f"{k}={v}" for k, v in sorted(point.attributes))
    return instance_id, client_id, point.name, attributes


def _java_hash(instance_id: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the xor of both halves, folded to 32 bits."""
    value = instance_id.int
    h = (value >> 64) ^ (value & 0xFFFFFFFFFFFFFFFF)
    return ((h >> 32) ^ h) & 0xFFFFFFFF


class _ClientMetricsCollector(Collector):
    """The latest pushed client values, served from ``snapshot_copy``."""

    def __init__(self, telemetry: ClientTelemetry) -> None:
        self._telemetry = telemetry

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tierd_client_metric", "Latest value each client instance pushed (KIP-714), "
            "per metric name and data point attributes",
            labels=["client_instance_id", "client_id", "name", "attributes"])
        for labels, value in self._telemetry.snapshot_copy:
            family.add_metric(list(labels), value)
        yield family
