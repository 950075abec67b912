"""Per-group configs (KIP-848): the GROUP config resource (type 32) of
DescribeConfigs and IncrementalAlterConfigs, where the overrides are kept, and
the values the consumer-group coordinator reads for each group.

Theory of operation: a group may override Kafka's group keys that apply to
tierd's consumer groups, ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``; a group without an override follows the
broker's ``group.consumer.session.timeout.ms`` / ``...heartbeat.interval.ms``.
Values are bounded by the broker's ``group.consumer.min/max.*`` keys and the
session timeout must exceed the heartbeat interval, as Kafka checks. In
cluster mode overrides live in ZooKeeper (``/config/groups/<group>``, Kafka's
config node layout) with a change notification (entity path
``groups/<group>``) every broker follows; on a single node, in a file of the
log directory. The coordinator asks ``value`` on every heartbeat, so a change
reaches a group's members with their next heartbeat: the interval it answers,
and the session timer it re-arms.

Concurrency: alters run under one lock; appliers do not exist (readers ask).

Error handling: an unknown key, a value that is not an integer or is out of
bounds is INVALID_CONFIG (nothing stored); an empty group id INVALID_REQUEST.
Stored values that no longer validate are still served (a later broker
restart with narrower bounds does not lose the group's settings).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Protocol
from urllib.parse import quote, unquote

import structlog
import trio

from config import BrokerConfig, ConfigError
from config.broker import DEFS as BROKER_DEFS
from config.defs import ConfigDef
from replication.zk_configs import ZkConfigs
from replication.zookeeper import ZkClient
from storage.log import checkpoint

log = structlog.get_logger(__name__)

# The single-node store, in the log directory.
GROUP_CONFIGS_FILE = "group-configs.json"
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
# Each group key, the broker key that is its default, and the broker keys bounding it.
GROUP_KEYS: dict[str, tuple[str, str, str]] = {
    SESSION_TIMEOUT: ("group.consumer.session.timeout.ms",
                      "group.consumer.min.session.timeout.ms",
                      "group.consumer.max.session.timeout.ms"),
    HEARTBEAT_INTERVAL: ("group.consumer.heartbeat.interval.ms",
                         "group.consumer.min.heartbeat.interval.ms",
                         "group.consumer.max.heartbeat.interval.ms"),
}


class GroupConfigStore(Protocol):
    async def read_all(self) -> dict[str, dict[str, str]]: ...

    async def read(self, group: str) -> dict[str, str]: ...

    async def write(self, group: str, configs: dict[str, str]) -> None: ...

    def changes(self) -> AsyncIterator[list[str]]: ...


class LocalGroupConfigStore:
    """A single node's group overrides, in one JSON file."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, GROUP_CONFIGS_FILE)
        self.entries: dict[str, dict[str, str]] = {}

    async def read_all(self) -> dict[str, dict[str, str]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                groups = json.load(f).get("groups", {})
        except FileNotFoundError:
            groups = {}
        self.entries = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in groups.items()}
        return {g: dict(c) for g, c in self.entries.items()}

    async def read(self, group: str) -> dict[str, str]:
        return dict(self.entries.get(group, {}))

    async def write(self, group: str, configs: dict[str, str]) -> None:
        entries = {**self.entries, group: dict(configs)}
        if not configs:
            del entries[group]
        text = json.dumps({"version": 1, "groups": entries}, indent=1, sort_keys=True)
        await trio.to_thread.run_sync(checkpoint.atomic_write, self.path, text, True)
        self.entries = entries

    async def changes(self) -> AsyncIterator[list[str]]:
        await trio.sleep_forever()
        yield []  # pragma: no cover - never reached: nobody else writes the file


class ZkGroupConfigStore:
    """Group overrides in ZooKeeper's ``/config/groups``, with change notifications."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.configs = ZkConfigs(zk)

    async def read_all(self) -> dict[str, dict[str, str]]:
        stored = await self.configs.get_entity_configs("groups")
        return {unquote(name): configs for name, configs in stored.items()}

    async def read(self, group: str) -> dict[str, str]:
        return await self.configs.get_entity_config(f"groups/{quote(group, safe='')}")

    async def write(self, group: str, configs: dict[str, str]) -> None:
        path = f"groups/{quote(group, safe='')}"
        await self.configs.set_entity_config(path, configs)
        await self.configs.notify_config_change(path)

    async def changes(self) -> AsyncIterator[list[str]]:
        async for names in self.zk.watch_config_changes("groups"):
            yield [unquote(n) for n in names]


def group_def(key: str) -> ConfigDef | None:
    """The definition of group key ``key`` (its broker default's), None if unknown."""
    keys = GROUP_KEYS.get(key)
    return BROKER_DEFS[keys[0]] if keys is not None else None


def check_group_configs(configs: dict[str, str], config: BrokerConfig) -> dict[str, int]:
    """The effective values of a group with overrides ``configs``.

    Raises:
        ConfigError: an unknown key, a non-integer, or a value out of Kafka's bounds.
    """
    for key in configs:
        if key not in GROUP_KEYS:
            raise ConfigError(key, configs[key], f"Unknown group config name: {key}")
    values: dict[str, int] = {}
    for key, (default_key, low_key, high_key) in GROUP_KEYS.items():
        raw = configs.get(key)
        if raw is None:  # the broker's value (not bounded: tierd does not refuse it at start)
            values[key] = int(config[default_key])
            continue
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(key, raw, "not an integer") from None
        if value < config[low_key]:
            raise ConfigError(key, raw, f"{key} must be greater than or equal to {low_key}")
        if value > config[high_key]:
            raise ConfigError(key, raw, f"{key} must be less than or equal to {high_key}")
        values[key] = value
    if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
        raise ConfigError(SESSION_TIMEOUT, configs.get(SESSION_TIMEOUT),
                          f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
    return values


class GroupConfigs:
    """Every group's overrides as this broker knows them, and altering them."""

    def __init__(self, config: BrokerConfig, store: GroupConfigStore) -> None:
        self.config = config
        self.store = store
        self.overrides: dict[str, dict[str, str]] = {}
        self._lock = trio.Lock()

    async def load(self) -> None:
        self.overrides = await self.store.read_all()
        if self.overrides:
            log.info("group configs loaded", groups=len(self.overrides))

    async def run(self) -> None:
        """Follow changes made through other brokers."""
        async for groups in self.store.changes():
            for group in groups:
                self._set(group, await self.store.read(group))

    def _set(self, group: str, configs: dict[str, str]) -> None:
        if configs:
            self.overrides[group] = configs
        else:
            self.overrides.pop(group, None)

    def value(self, group: str, key: str) -> int:
        """``key``'s value for ``group``: its override, else the broker's default."""
        raw = self.overrides.get(group, {}).get(key)
        if raw is not None:
            try:
                return int(raw)
            except ValueError:
                log.warning("unusable group config ignored", group=group, key=key, value=raw)
        return int(self.config[GROUP_KEYS[key][0]])

    async def alter(self, group: str, build: Callable[[dict[str, str]], dict[str, str]],
                    validate_only: bool) -> None:
        """Replace ``group``'s overrides with ``build(current overrides)``.

        Raises:
            ConfigError: the result does not validate; nothing is stored.
        """
        async with self._lock:
            new = build(dict(self.overrides.get(group, {})))
            check_group_configs(new, self.config)
            if validate_only:
                return
            await self.store.write(group, new)
            log.info("group configs altered", group=group, configs=new)
            self._set(group, new)
