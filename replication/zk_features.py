"""The finalized features in ZooKeeper: Kafka's ``/feature`` znode (KIP-584).

The node's data is what ZooKeeper-mode Kafka writes (FeatureZNode version 2)::

    {"version": 2, "status": 1,
     "features": {"transaction.version": {"max_version_level": 2}, ...}}

Status 1 is "enabled"; a feature at level 0 is absent. The finalized-features
epoch is the znode's version: every write bumps it, and brokers report it in
ApiVersions so clients can prefer the newest view.

Concurrency: writes are compare-and-set on the znode version, so two brokers
updating features at once cannot lose each other's change: the loser gets
``FeatureWriteFailed`` and answers FEATURE_UPDATE_FAILED. Every broker watches
the node and replaces its cached levels when it changes.

Error handling: a node whose data cannot be read as the format above is
logged and treated as no finalized features (Kafka does the same with a
deleted node); it is never overwritten by the seeding at start-up.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import structlog
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from protocol.features import Finalized
from replication.zookeeper import ZkClient, json_bytes

log = structlog.get_logger(__name__)

FEATURE_PATH = "/feature"
# FeatureZNode version 2 dropped min_version_level (KIP-778); version 1 is read too.
ZNODE_VERSION = 2
_READABLE_VERSIONS = (1, 2)
STATUS_ENABLED = 1


class FeatureWriteFailed(Exception):
    """The features were not written: another writer changed them since they
    were read, or ZooKeeper failed the write."""


def encode(levels: dict[str, int]) -> dict[str, Any]:
    """The znode's JSON document for ``levels`` (levels of 0 left out)."""
    return {"version": ZNODE_VERSION, "status": STATUS_ENABLED,
            "features": {name: {"max_version_level": level}
                         for name, level in sorted(levels.items()) if level > 0}}


def decode(data: bytes | str) -> dict[str, int]:
    """The levels in a znode document.

    Raises:
        ValueError: not the FeatureZNode format (or status disabled).
    """
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("version") not in _READABLE_VERSIONS:
        raise ValueError(f"unsupported feature node: {data!r}")
    if doc.get("status") != STATUS_ENABLED:
        raise ValueError(f"feature versioning is not enabled in {data!r}")
    features = doc.get("features")
    if not isinstance(features, dict):
        raise ValueError(f"no features map in {data!r}")
    levels: dict[str, int] = {}
    for name, info in features.items():
        level = info.get("max_version_level") if isinstance(info, dict) else None
        if not isinstance(level, int) or level < 1:
            raise ValueError(f"bad level of {name} in {data!r}")
        levels[str(name)] = level
    return levels


def _finalized(data: bytes, version: int) -> Finalized:
    try:
        return Finalized(decode(data), version)
    except ValueError as exc:
        log.warning("feature znode unreadable; no finalized features", error=str(exc))
        return Finalized({}, version)


class ZkFeatureStore:
    """``/feature`` read, compare-and-set written, and watched."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def load(self, seed: dict[str, int]) -> Finalized:
        """The stored features; ``seed`` is written first if the node does not exist."""
        def run() -> Finalized:
            try:
                self.zk.client.create(FEATURE_PATH, json_bytes(encode(seed)))
            except NodeExistsError:
                pass
            data, stat = self.zk.client.get(FEATURE_PATH)
            return _finalized(data, stat.version)
        return await self.zk.call(run)

    async def write(self, levels: dict[str, int], epoch: int) -> Finalized:
        """Replace the features if the node is still at ``epoch``.

        Raises:
            FeatureWriteFailed: another write came first (or the node was
                deleted), or ZooKeeper failed.
        """
        def run() -> Finalized:
            try:
                stat = self.zk.client.set(FEATURE_PATH, json_bytes(encode(levels)),
                                          version=epoch)
            except (BadVersionError, NoNodeError):
                raise FeatureWriteFailed("the finalized features changed meanwhile; "
                                         "read them again and retry") from None
            except KazooException as exc:
                raise FeatureWriteFailed(f"ZooKeeper failed the write: {exc!r}") from None
            return Finalized(dict(levels), stat.version)
        return await self.zk.call(run)

    async def changes(self) -> AsyncIterator[Finalized]:
        """Yields the features each time the node changes (first: as it is now)."""
        async for _ in self.zk.watch_node(FEATURE_PATH):
            try:
                data, stat = await self.zk.call(self.zk.client.get, FEATURE_PATH)
            except NoNodeError:
                log.warning("feature znode deleted; no finalized features")
                yield Finalized({}, -1)
                continue
            yield _finalized(data, stat.version)
