"""Connection limits against abuse, with Kafka's keys.

- ``max.connections``: open connections of the broker, and per listener with
  the ``listener.name.<l>.`` prefix. Connections on the inter-broker
  listener are neither limited nor counted by the broker-wide limit
  (brokers must always reach each other).
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``.
- ``max.connection.creation.rate``: new connections per second per listener
  (prefixed) and for the broker (the inter-broker listener exempt); a
  connection over the rate waits before it is served, as Kafka delays
  accepting.
- ``connections.max.idle.ms`` is applied by the connection itself.

Kafka stops accepting while a count limit is reached; tierd accepts and
closes at once, so the client sees the refusal immediately instead of a
connect timeout. Either way it backs off and retries. Every refusal is
logged and counted (``tierd_connections_refused_total{listener,reason}``).

Concurrency: on the event loop; ``admit``/``release`` do not await.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import trio

from config import BrokerConfig
from config.defs import INT_MAX
from config.security import parse_ip_overrides


class _Rate:
    """A token bucket: ``rate`` per second, a burst of ``rate``."""

    def __init__(self, rate: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = float(rate)
        self.stamp = clock()

    def delay(self) -> float:
        """Take a token; the seconds to wait before using it (0: now)."""
        now = self.clock()
        self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class ConnectionLimits:
    def __init__(self, config: BrokerConfig, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or trio.current_time
        self._listeners = [b.name for b in config.listeners.bind]
        self.inter_broker = config.listeners.inter_broker
        self.reconfigure(config)
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self.by_ip: Counter[str] = Counter()

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take the limits from ``config`` (at start, and when a dynamic config
        changes them); open connections stay counted, and a lowered limit refuses
        only new ones."""
        self.max_total: int = config["max.connections"]
        # Only a prefixed key limits a listener of its own.
        self.max_listener = {name: limit for name in self._listeners if (limit := config.values.get(
            f"listener.name.{name.lower()}.max.connections")) is not None}
        self.max_per_ip: int = config["max.connections.per.ip"]
        self.ip_overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"])
        broker_rate: int = config["max.connection.creation.rate"]
        self._broker_rate = _Rate(broker_rate, self._clock) if broker_rate < INT_MAX else None
        self._rates = {name: _Rate(rate, self._clock) for name in self._listeners
                       if (rate := config.values.get(
                           f"listener.name.{name.lower()}.max.connection.creation.rate",
                           INT_MAX)) < INT_MAX}

    def admit(self, listener: str, ip: str) -> str | None:
        """Count a new connection in, or the reason it is refused (not counted)."""
        if self.by_ip[ip] >= self.ip_overrides.get(ip, self.max_per_ip):
            return "max_connections_per_ip"
        if self.by_listener[listener] >= self.max_listener.get(listener, INT_MAX):
            return "max_connections_listener"
        counted = listener != self.inter_broker
        if counted and self.total >= self.max_total:
            return "max_connections"
        self.total += counted
        self.by_listener[listener] += 1
        self.by_ip[ip] += 1
        return None

    def release(self, listener: str, ip: str) -> None:
        self.total -= listener != self.inter_broker
        self.by_listener[listener] -= 1
        self.by_ip[ip] -= 1
        if not self.by_ip[ip]:
            del self.by_ip[ip]

    async def throttle(self, listener: str) -> float:
        """Wait while connections arrive faster than the creation rates allow;
        returns the seconds waited."""
        broker = self._broker_rate if listener != self.inter_broker else None
        waits = [r.delay() for r in (self._rates.get(listener), broker) if r]
        delay = max(waits, default=0.0)
        if delay > 0 and not math.isinf(delay):
            await trio.sleep(delay)
        return delay
