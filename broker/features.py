"""The cluster's finalized feature levels at run time (KIP-584): where they are
kept, changing them (UpdateFeatures), and the copy every handler reads.

Theory of operation: in cluster mode the levels live in ZooKeeper's
``/feature`` znode (replication/zk_features.py) and every broker watches it,
so a change made through any broker reaches every broker's ApiVersions and
the APIs a feature gates. On a single node the same document is kept in a
file of the log directory, with the epoch beside it. When nothing is stored
yet, the first broker to start writes the seed: ``transaction.version`` from
its ``tierd.transaction.version``, ``group.version`` at Kafka's default 1.
After that the stored levels win over the config.

Concurrency: an update validates against the levels it read and writes
with compare-and-set on their epoch; a concurrent change makes it fail with
FEATURE_UPDATE_FAILED instead of losing either change. The cached copy only
moves forward in epoch (a watch read that started before our own write
cannot put older levels back), except after the node was deleted.

Error handling: requests that break the rules get INVALID_UPDATE_VERSION
from ``protocol.features.check_update``; a failed write, FEATURE_UPDATE_FAILED.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog
import trio

from config import BrokerConfig
from protocol import features
from protocol.errors import ErrorCode
from protocol.features import Finalized, Refusal
from replication.zk_features import FeatureWriteFailed, decode, encode
from storage.log import checkpoint

log = structlog.get_logger(__name__)

# The single-node store, in the log directory: the /feature document plus its epoch.
FEATURES_FILE = "feature.json"


class FeatureStore(Protocol):
    async def load(self, seed: dict[str, int]) -> Finalized: ...

    async def write(self, levels: dict[str, int], epoch: int) -> Finalized: ...

    def changes(self) -> AsyncIterator[Finalized]: ...


class LocalFeatureStore:
    """A single node's finalized features, in one JSON file of the log directory."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, FEATURES_FILE)
        self.epoch = -1

    async def load(self, seed: dict[str, int]) -> Finalized:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return await self._save(seed, 0)
        self.epoch = int(json.loads(text).get("epoch", 0))
        return Finalized(decode(text), self.epoch)

    async def write(self, levels: dict[str, int], epoch: int) -> Finalized:
        if epoch != self.epoch:
            raise FeatureWriteFailed("the finalized features changed meanwhile")
        return await self._save(levels, epoch + 1)

    async def _save(self, levels: dict[str, int], epoch: int) -> Finalized:
        text = json.dumps({**encode(levels), "epoch": epoch}, sort_keys=True)
        await trio.to_thread.run_sync(checkpoint.atomic_write, self.path, text, True)
        self.epoch = epoch
        return Finalized({k: v for k, v in levels.items() if v > 0}, epoch)

    async def changes(self) -> AsyncIterator[Finalized]:
        await trio.sleep_forever()
        yield Finalized({}, -1)  # pragma: no cover - never reached: nobody else writes the file


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One entry of an UpdateFeatures request."""

    name: str
    level: int
    upgrade_type: int


class ClusterFeatures:
    """The finalized levels this broker serves, and the way to change them."""

    def __init__(self, store: FeatureStore, seed: dict[str, int]) -> None:
        self.store = store
        self.seed = seed
        self.current = Finalized(dict(seed), 0)
        # Serialises this broker's updates (others are caught by compare-and-set).
        self._lock = trio.Lock()

    @classmethod
    def of(cls, config: BrokerConfig, store: FeatureStore) -> ClusterFeatures:
        return cls(store, features.seed_levels(config["tierd.transaction.version"]))

    async def load(self) -> None:
        self.current = await self.store.load(self.seed)
        log.info("finalized features", levels=self.current.levels, epoch=self.current.epoch)

    async def run(self) -> None:
        """Follow changes made through other brokers."""
        async for finalized in self.store.changes():
            self._set(finalized)

    def _set(self, finalized: Finalized) -> None:
        if finalized.epoch > self.current.epoch or finalized.epoch < 0:
            if finalized.levels != self.current.levels:
                log.info("finalized features changed", levels=finalized.levels,
                         epoch=finalized.epoch)
            self.current = finalized

    async def update(self, updates: Iterable[FeatureUpdate], validate_only: bool
                     ) -> Refusal | None:
        """Apply ``updates`` all or none; the first refusal, or None.

        Error handling: rule violations are INVALID_UPDATE_VERSION (nothing
        written); a write that fails is FEATURE_UPDATE_FAILED.
        """
        async with self._lock:
            before = self.current
            levels = dict(before.levels)
            for u in updates:
                refusal = features.check_update(before.level(u.name), u.name, u.level,
                                                u.upgrade_type)
                if refusal is not None:
                    return refusal
                levels[u.name] = u.level
            levels = {name: level for name, level in levels.items() if level > 0}
            if validate_only or levels == before.levels:
                return None
            try:
                written = await self.store.write(levels, before.epoch)
            except FeatureWriteFailed as exc:
                log.warning("feature update failed", error=str(exc))
                return Refusal(ErrorCode.FEATURE_UPDATE_FAILED, str(exc))
            self._set(written)
            return None


def finalized_now(cluster_features: ClusterFeatures | None, config: BrokerConfig) -> Finalized:
    """The levels to serve: the cluster's, or (no store: handlers driven
    directly by unit tests) the config's seed at epoch 0."""
    if cluster_features is not None:
        return cluster_features.current
    return Finalized(features.seed_levels(config["tierd.transaction.version"]), 0)
