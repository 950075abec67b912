"""Dynamic broker configs at run time: where they are kept, altering them, and
telling the running broker's parts that a value changed.

Theory of operation: the entries are Kafka's: ``<default>`` (every broker) and
one per broker id. In cluster mode they live in ZooKeeper
(``/config/brokers/<entity>``); a write is followed by a change notification
(``/config/changes/config_change_*``, entity path ``brokers/<entity>``) that
every broker watches, re-reading the entry if it is its own or the default.
On a single node they live in a file of the log directory. After any change
``DynamicLayers.apply`` rebuilds the broker's config values in place and each
registered applier gets the set of keys that changed (broker/dynamic_apply.py).

Concurrency: alters run under one lock, so two admin requests cannot lose each
other's keys on this broker (brokers writing the same entry race as Kafka's
do: the last write wins). Appliers run on the event loop and do not await.

Error handling: ``alter`` raises ``ConfigError`` (INVALID_CONFIG) or
``DynamicConfigRefused`` (INVALID_REQUEST) before anything is written; stored
values that no longer parse (written by another version) are skipped with a
warning at load rather than stopping the broker.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import structlog
import trio

from config import BrokerConfig, ConfigError
from config.dynamic import (
    DEFAULT_ENTITY,
    DynamicConfigRefused,
    DynamicLayers,
    check_change,
    check_values,
    definition,
)
from replication.zk_configs import ZkConfigs
from replication.zookeeper import ZkClient
from storage.log import checkpoint

log = structlog.get_logger(__name__)

# The single-node store, in the log directory.
DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"

Applier = Callable[[set[str]], None]
Validator = Callable[[BrokerConfig], None]


class DynamicConfigStore(Protocol):
    async def read(self, entity: str) -> dict[str, str]: ...

    async def write(self, entity: str, configs: dict[str, str]) -> None: ...

    def changes(self) -> AsyncIterator[list[str]]: ...


class LocalDynamicConfigStore:
    """The entries of a single-node broker, in one JSON file."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, DYNAMIC_CONFIGS_FILE)
        try:
            with open(self.path, encoding="utf-8") as f:
                entries = json.load(f).get("brokers", {})
        except FileNotFoundError:
            entries = {}
        self.entries: dict[str, dict[str, str]] = {
            str(e): {str(k): str(v) for k, v in c.items()} for e, c in entries.items()}

    async def read(self, entity: str) -> dict[str, str]:
        return dict(self.entries.get(entity, {}))

    async def write(self, entity: str, configs: dict[str, str]) -> None:
        entries = {**self.entries, entity: dict(configs)}
        if not configs:
            del entries[entity]
        text = json.dumps({"version": 1, "brokers": entries}, indent=1, sort_keys=True)
        await trio.to_thread.run_sync(checkpoint.atomic_write, self.path, text, True)
        self.entries = entries

    async def changes(self) -> AsyncIterator[list[str]]:
        await trio.sleep_forever()
        yield []  # pragma: no cover - never reached: nobody else writes the file


class ZkDynamicConfigStore:
    """The entries in ZooKeeper, Kafka's nodes and change notifications."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.configs = ZkConfigs(zk)

    async def read(self, entity: str) -> dict[str, str]:
        return await self.configs.get_entity_config(f"brokers/{entity}")

    async def write(self, entity: str, configs: dict[str, str]) -> None:
        await self.configs.set_entity_config(f"brokers/{entity}", configs)
        await self.configs.notify_config_change(f"brokers/{entity}")

    async def changes(self) -> AsyncIterator[list[str]]:
        async for entities in self.zk.watch_config_changes("brokers"):
            yield entities


class DynamicBrokerConfigs:
    """This broker's dynamic entries, their store, and who to tell of a change."""

    def __init__(self, config: BrokerConfig, store: DynamicConfigStore,
                 cluster: bool) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.store = store
        self.cluster = cluster
        self.layers = DynamicLayers.of(config)
        self._appliers: list[Applier] = []
        self._validators: list[Validator] = []
        self._lock = trio.Lock()

    def on_change(self, applier: Applier, validator: Validator | None = None) -> None:
        """Call ``applier`` with the changed keys after every change; ``validator``
        may refuse a candidate config (raising ConfigError) before it is stored."""
        self._appliers.append(applier)
        if validator is not None:
            self._validators.append(validator)

    def entity(self, resource_name: str) -> str:
        """The entry a BROKER resource name means: "" the default, else a broker id.

        Raises:
            DynamicConfigRefused: not a broker id; or, on a single node, another
                broker's.
        """
        if resource_name == "":
            return DEFAULT_ENTITY
        if not resource_name.isdigit():
            raise DynamicConfigRefused(f"Broker id must be an integer, got {resource_name!r}")
        if not self.cluster and int(resource_name) != self.node_id:
            raise DynamicConfigRefused(f"Unexpected broker id, expected {self.node_id}, but "
                                       f"received {resource_name}")
        return str(int(resource_name))

    async def load(self) -> set[str]:
        """Read this broker's entries and apply them (at start, before the parts
        that read the config are built); returns the keys they changed."""
        self.layers.default = _usable(await self.store.read(DEFAULT_ENTITY), DEFAULT_ENTITY)
        self.layers.broker = _usable(await self.store.read(str(self.node_id)), str(self.node_id))
        changed = self.layers.apply(self.config)
        if self.layers.default or self.layers.broker:
            log.info("dynamic broker configs loaded", default=_shown(self.layers.default),
                     broker=_shown(self.layers.broker))
        self.tell(changed)
        return changed

    async def current(self, entity: str) -> dict[str, str]:
        return await self.store.read(entity)

    async def alter(self, entity: str, build: Callable[[dict[str, str]], dict[str, str]],
                    listeners: list[str], validate_only: bool) -> None:
        """Replace entry ``entity`` with ``build(current entry)``.

        Raises:
            ConfigError, DynamicConfigRefused: nothing is stored.
        """
        async with self._lock:
            current = await self.store.read(entity)
            new = build(dict(current))
            changes = {k: new.get(k) for k in set(current) | set(new)
                       if current.get(k) != new.get(k)}
            check_change(changes, entity != DEFAULT_ENTITY, listeners)
            mine = entity in (DEFAULT_ENTITY, str(self.node_id))
            if mine:
                candidate = (self.layers.merged(default=new) if entity == DEFAULT_ENTITY
                             else self.layers.merged(broker=new))
                check_values(candidate, self.config)
                for validate in self._validators:
                    validate(candidate)
            if validate_only:
                return
            await self.store.write(entity, new)
            log.info("dynamic broker configs altered", entity=entity, configs=_shown(new))
            if mine:
                self._set(entity, new)

    async def run(self) -> None:
        """Follow changes other brokers make to this broker's entries."""
        async for entities in self.store.changes():
            for entity in entities:
                if entity in (DEFAULT_ENTITY, str(self.node_id)):
                    self._set(entity, _usable(await self.store.read(entity), entity))

    def _set(self, entity: str, configs: dict[str, str]) -> None:
        if entity == DEFAULT_ENTITY:
            self.layers.default = configs
        else:
            self.layers.broker = configs
        self.tell(self.layers.apply(self.config))

    def tell(self, changed: set[str]) -> None:
        """Run the appliers for ``changed`` keys."""
        if not changed:
            return
        log.info("broker config changed", keys=sorted(changed))
        for applier in self._appliers:
            try:
                applier(changed)
            except Exception:  # our own bug: keep the broker and the other appliers going
                log.exception("applying a dynamic broker config failed", keys=sorted(changed))


def _usable(configs: dict[str, str], entity: str) -> dict[str, str]:
    """The stored keys that still parse (others are logged and left out)."""
    out = {}
    for key, value in configs.items():
        d = definition(key)
        try:
            if d is not None:
                d.parse(value)
        except ConfigError as exc:
            log.warning("stored dynamic broker config ignored", entity=entity, error=str(exc))
            continue
        out[key] = value
    return out


def _shown(configs: dict[str, str]) -> dict[str, str]:
    """Configs for a log line: passwords hidden."""
    return {k: "[hidden]" if (d := definition(k)) is not None and d.sensitive else v
            for k, v in configs.items()}
