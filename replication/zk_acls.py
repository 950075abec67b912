"""Kafka's ACL znodes (ZooKeeper-mode AclAuthorizer), read and written through
``ZkClient``; what the entries mean is ``broker.security``'s business.

Layout:

- ``/kafka-acl/<ResourceType>/<name>``: LITERAL patterns;
- ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``: PREFIXED patterns;
- each node's data ``{"version": 1, "acls": [{"principal": "User:alice",
  "permissionType": "Allow", "operation": "Read", "host": "*"}]}``;
- a change leaves a sequential node under ``/kafka-acl-changes`` (literal) or
  ``/kafka-acl-extended-changes`` (prefixed); every broker watches both and
  re-reads the table when one appears. The writer prunes all but the newest
  ``KEEP_NOTIFICATIONS``.

Node names are URL-encoded (``*`` kept), so group names with ``/`` fit.

Error handling: a node changed by another broker between our read and write
(BadVersion, NodeExists) is retried; a node whose data is not JSON is skipped
with a log line; ZooKeeper unreachable raises to the caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import structlog
import trio
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from replication.zookeeper import ZkClient

log = structlog.get_logger(__name__)

LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
ROOTS = {LITERAL: "/kafka-acl", PREFIXED: "/kafka-acl-extended/prefixed"}
CHANGE_ROOTS = {LITERAL: "/kafka-acl-changes", PREFIXED: "/kafka-acl-extended-changes"}
# Change notifications only say "re-read"; a few recent ones are enough for
# a broker that was between reads.
KEEP_NOTIFICATIONS = 50

# One resource's entries: {"principal", "permissionType", "operation", "host"} each.
Entries = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AclNode:
    """One resource's node: its pattern type, resource type name, resource name."""

    pattern: str
    type_name: str
    name: str

    @property
    def path(self) -> str:
        return f"{ROOTS[self.pattern]}/{self.type_name}/{quote(self.name, safe='*')}"


class ZkAcls:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def update(self, node: AclNode, change: Callable[[Entries], Entries]) -> None:
        """Replace ``node``'s entries with ``change(entries)`` (an empty result
        deletes the node), then leave a change notification.

        ``change`` runs in a ZooKeeper thread, again after a concurrent write.
        """
        await self.zk.call(self._update, node, change)

    def _update(self, node: AclNode, change: Callable[[Entries], Entries]) -> None:
        client = self.zk.client
        path = node.path
        while True:
            try:
                data, stat = client.get(path)
                version = stat.version
                entries = json.loads(data or b"{}").get("acls", [])
            except NoNodeError:
                version, entries = -1, []
            wanted = change(entries)
            text = json.dumps({"version": 1, "acls": wanted}).encode()
            try:
                if version < 0:
                    client.create(path, text, makepath=True)
                elif wanted:
                    client.set(path, text, version=version)
                else:
                    client.delete(path, version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it between our read and write
        changes = CHANGE_ROOTS[node.pattern]
        note = json.dumps({"version": 1, "resourceType": node.type_name, "name": node.name,
                           "patternType": node.pattern}).encode()
        client.create(f"{changes}/acl_changes_", note, sequence=True, makepath=True)
        for old in sorted(client.get_children(changes))[:-KEEP_NOTIFICATIONS]:
            try:
                client.delete(f"{changes}/{old}")
            except NoNodeError:
                pass

    async def read_all(self, type_names: Iterable[str]) -> list[tuple[AclNode, Entries]]:
        """Every node of the resource types named, with its entries."""
        return await self.zk.call(self._read_all, list(type_names))

    def _read_all(self, type_names: list[str]) -> list[tuple[AclNode, Entries]]:
        client = self.zk.client
        out: list[tuple[AclNode, Entries]] = []
        for pattern, root in ROOTS.items():
            for type_name in type_names:
                try:
                    names = client.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    node = AclNode(pattern, type_name, unquote(name))
                    try:
                        data, _ = client.get(f"{root}/{type_name}/{name}")
                        out.append((node, json.loads(data or b"{}").get("acls", [])))
                    except NoNodeError:
                        continue
                    except ValueError:
                        log.warning("unreadable ACL node skipped", path=node.path)
        return out

    async def watch_changes(self, changed: Callable[[], None]) -> None:
        """Call ``changed()`` whenever a change notification appears (under either
        root), until cancelled."""
        for root in CHANGE_ROOTS.values():
            await self.zk.call(self.zk.client.ensure_path, root)

        async def watch(root: str) -> None:
            async for _ in self.zk.watch_children(root):
                changed()

        async with trio.open_nursery() as nursery:
            for root in CHANGE_ROOTS.values():
                nursery.start_soon(watch, root)
