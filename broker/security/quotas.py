"""Client quotas (KIP-13, KIP-55, KIP-124): produce and fetch byte rates and
request time, per user, client id, or both, with Kafka's precedence.

Entities and precedence (Kafka's): for a connection of user U with client id
C, each quota key is taken from the first of these that sets it:
U+C, U+<default client>, U, <default user>+C, <default user>+<default client>,
<default user>, C, <default client>. Keys: ``producer_byte_rate`` (bytes/s
of produce requests), ``consumer_byte_rate`` (bytes/s of fetched records),
``request_percentage`` (handler time, in percent of one thread; tierd has
one event loop, so 100 is all of it).

Measuring: one rate per quota entity (the entity that supplied the quota, so
every client under a user quota shares it), over ``quota.window.num``
windows of ``quota.window.size.seconds``. Throttling as Kafka since KIP-219:
the response is sent at once with ``throttle_time_ms``, then the connection
is muted (not read) for that long. The time is Kafka's: (rate - quota) /
quota x the whole sampled window, at most that window.

Exempt: replica fetches (followers) and inter-broker requests.

Stores: a JSON file in the log directory on a single node; ZooKeeper's
``/config/users/<u>[/clients/<c>]`` and ``/config/clients/<c>`` in cluster
mode (Kafka's nodes; ``<default>`` names the default), re-read by every
broker every ``ZK_REFRESH_S``.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import quote, unquote

import structlog
import trio

from replication.zk_configs import ZkConfigs
from replication.zookeeper import ZkClient
from storage.log import checkpoint

log = structlog.get_logger(__name__)

KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
USER, CLIENT = "user", "client-id"
DEFAULT = "<default>"
QUOTAS_FILE = "tierd-client-quotas.json"
ZK_REFRESH_S = 1.0

# An entity: ((entity type, name or None for the default), ...), sorted by type.
Entity = tuple[tuple[str, str | None], ...]


def entity(user: str | None | bool = False, client: str | None | bool = False) -> Entity:
    """An entity key: a name, None for the default, False for "not part of it"."""
    parts: list[tuple[str, str | None]] = []
    if client is not False:
        parts.append((CLIENT, client))  # type: ignore[arg-type]
    if user is not False:
        parts.append((USER, user))  # type: ignore[arg-type]
    return tuple(sorted(parts))


def precedence(user: str, client: str) -> list[Entity]:
    return [entity(user, client), entity(user, None), entity(user), entity(None, client),
            entity(None, None), entity(None), entity(client=client), entity(client=None)]


class _Rate:
    """A rate over ``windows`` samples of ``window_s`` seconds each."""

    def __init__(self, windows: int, window_s: float, clock: Callable[[], float]) -> None:
        self.windows = windows
        self.window_s = window_s
        self.clock = clock
        self.samples: deque[list[float]] = deque()  # [start, amount]

    def record(self, amount: float) -> float:
        """Add ``amount`` now; the rate per second over the sampled span."""
        now = self.clock()
        if not self.samples or now - self.samples[-1][0] >= self.window_s:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += amount
        while self.samples and now - self.samples[0][0] >= self.windows * self.window_s:
            self.samples.popleft()
        span = max(now - self.samples[0][0], (self.windows - 1) * self.window_s)
        return sum(s[1] for s in self.samples) / span

    @property
    def span_s(self) -> float:
        return self.windows * self.window_s


class ClientQuotas:
    """The quota configuration, and the rates of the entities it names."""

    def __init__(self, windows: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.entries: dict[Entity, dict[str, float]] = {}
        self.windows = windows
        self.window_s = window_s
        self.clock = clock
        self._rates: dict[tuple[Entity, str], _Rate] = {}

    def set_entries(self, entries: dict[Entity, dict[str, float]]) -> None:
        self.entries = {e: dict(v) for e, v in entries.items() if v}
        self._rates = {k: r for k, r in self._rates.items()
                       if k[1] in self.entries.get(k[0], {})}

    def quota(self, user: str, client: str, key: str) -> tuple[Entity, float] | None:
        """The entity supplying ``key`` for (user, client), and its value."""
        if not self.entries:
            return None
        for candidate in precedence(user, client):
            values = self.entries.get(candidate)
            if values and key in values:
                return candidate, values[key]
        return None

    def record(self, user: str, client: str, key: str, amount: float) -> float:
        """Record ``amount`` against the quota of ``key``; the throttle in ms."""
        found = self.quota(user, client, key)
        if found is None:
            return 0.0
        ent, bound = found
        rate = self._rates.get((ent, key))
        if rate is None:
            rate = self._rates[(ent, key)] = _Rate(self.windows, self.window_s, self.clock)
        observed = rate.record(amount)
        if bound <= 0:
            return rate.span_s * 1000
        if observed <= bound:
            return 0.0
        return min((observed - bound) / bound * rate.span_s, rate.span_s) * 1000


# -- stores ----------------------------------------------------------------------------


class QuotaStore(Protocol):
    quotas: ClientQuotas

    async def alter(self, changes: dict[Entity, dict[str, float | None]]) -> None: ...

    async def run(self) -> None: ...


def _to_json(entries: dict[Entity, dict[str, float]]) -> list[dict[str, Any]]:
    return [{"entity": [[t, n] for t, n in e], "values": v} for e, v in sorted(
        entries.items(), key=lambda item: str(item[0]))]


def _from_json(items: Iterable[dict[str, Any]]) -> dict[Entity, dict[str, float]]:
    return {tuple(sorted((str(t), n) for t, n in item["entity"])):
            {str(k): float(v) for k, v in item["values"].items()} for item in items}


class LocalQuotaStore:
    """Quotas of a single-node broker, in a file of its log directory."""

    def __init__(self, log_dir: str, quotas: ClientQuotas) -> None:
        self.path = os.path.join(log_dir, QUOTAS_FILE)
        self.quotas = quotas
        try:
            with open(self.path, encoding="utf-8") as f:
                quotas.set_entries(_from_json(json.load(f).get("quotas", [])))
        except FileNotFoundError:
            pass

    async def alter(self, changes: dict[Entity, dict[str, float | None]]) -> None:
        entries = {e: dict(v) for e, v in self.quotas.entries.items()}
        _apply(entries, changes)
        text = json.dumps({"version": 1, "quotas": _to_json(entries)}, indent=1)
        await trio.to_thread.run_sync(checkpoint.atomic_write, self.path, text, True)
        self.quotas.set_entries(entries)

    async def run(self) -> None:
        await trio.sleep_forever()


def _apply(entries: dict[Entity, dict[str, float]],
           changes: dict[Entity, dict[str, float | None]]) -> None:
    for ent, ops in changes.items():
        values = entries.setdefault(ent, {})
        for key, value in ops.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            del entries[ent]


def _zk_name(name: str | None) -> str:
    """A name as a znode name: Kafka's <default>, or URL-encoded (no '/')."""
    return DEFAULT if name is None else quote(name, safe="")


def _zk_path(ent: Entity) -> str:
    parts = dict(ent)
    if USER in parts and CLIENT in parts:
        return f"users/{_zk_name(parts[USER])}/clients/{_zk_name(parts[CLIENT])}"
    if USER in parts:
        return f"users/{_zk_name(parts[USER])}"
    return f"clients/{_zk_name(parts[CLIENT])}"


class ZkQuotaStore:
    """Quotas in ZooKeeper (Kafka's nodes), cached and re-read periodically."""

    def __init__(self, zk: ZkClient, quotas: ClientQuotas) -> None:
        self.zk = zk
        self.configs = ZkConfigs(zk)
        self.quotas = quotas

    async def alter(self, changes: dict[Entity, dict[str, float | None]]) -> None:
        for ent, ops in changes.items():
            path = _zk_path(ent)
            config = await self.configs.get_entity_config(path)
            for key, value in ops.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = repr(float(value))
            await self.configs.set_entity_config(path, config)
        await self.refresh()

    async def refresh(self) -> None:
        entries: dict[Entity, dict[str, float]] = {}
        for path, config in await self.configs.get_quota_configs():
            values = {k: float(v) for k, v in config.items() if k in KEYS}
            if not values:
                continue
            kinds = path.split("/")
            names = [None if n == DEFAULT else unquote(n) for n in kinds[1::2]]
            if kinds[0] == "users" and len(kinds) == 4:
                entries[entity(names[0], names[1])] = values
            elif kinds[0] == "users":
                entries[entity(names[0])] = values
            else:
                entries[entity(client=names[0])] = values
        self.quotas.set_entries(entries)

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # ZooKeeper unavailable: keep the last quotas
                log.warning("cannot read client quotas from ZooKeeper", exc_info=True)
            await trio.sleep(ZK_REFRESH_S)
