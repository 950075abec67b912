"""Where ACLs are kept: a file in the log directory of a single node, or
ZooKeeper in cluster mode (Kafka's nodes, so every broker enforces the same
table).

ZooKeeper layout (Kafka's ZooKeeper-mode AclAuthorizer):

- ``/kafka-acl/<ResourceType>/<name>``: LITERAL patterns;
- ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``: PREFIXED patterns;
- each node's data ``{"version": 1, "acls": [{"principal": "User:alice",
  "permissionType": "Allow", "operation": "Read", "host": "*"}]}``;
- a change leaves a sequential node under ``/kafka-acl-changes`` (literal) or
  ``/kafka-acl-extended-changes`` (prefixed); every broker watches both and
  re-reads the table when one appears. The writer prunes all but the newest
  ``_KEEP_NOTIFICATIONS``.

Node names are URL-encoded (``*`` kept), so group names with ``/`` fit.

Error handling: a node changed by another broker between our read and write
(BadVersion, NodeExists) is retried; ZooKeeper unreachable raises to the
handler (its request fails with an error code) and, for the refresh loop,
keeps the last table with a log line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import quote, unquote

import structlog
import trio
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.security.acl import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AclBinding,
    AclFilter,
    Authorizer,
    PatternType,
    ResourceType,
    parse_super_users,
)
from storage.log import checkpoint

log = structlog.get_logger(__name__)

ACLS_FILE = "tierd-acls.json"
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
CHANGE_ROOTS = {PatternType.LITERAL: "/kafka-acl-changes",
                PatternType.PREFIXED: "/kafka-acl-extended-changes"}
# Change notifications only say "re-read"; a few recent ones are enough for
# a broker that was between reads.
_KEEP_NOTIFICATIONS = 50
# A missed watch (a ZooKeeper session move) is repaired by a full re-read this often.
ZK_FULL_REFRESH_S = 30.0

_TYPES_BY_NAME = {v: k for k, v in RESOURCE_NAMES.items()}
_OPS_BY_NAME = {v: k for k, v in OPERATION_NAMES.items()}
_PERMS_BY_NAME = {v: k for k, v in PERMISSION_NAMES.items()}


class AclStore(Protocol):
    authorizer: Authorizer

    async def create(self, acls: list[AclBinding]) -> None: ...

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]: ...

    async def run(self) -> None: ...


def _entry(acl: AclBinding) -> dict[str, str]:
    return {"principal": acl.principal, "permissionType": PERMISSION_NAMES[acl.permission],
            "operation": OPERATION_NAMES[acl.operation], "host": acl.host}


def _binding(resource_type: ResourceType, name: str, pattern: PatternType,
             entry: dict[str, Any]) -> AclBinding:
    return AclBinding(resource_type, name, pattern, str(entry["principal"]), str(entry["host"]),
                      _OPS_BY_NAME[entry["operation"]], _PERMS_BY_NAME[entry["permissionType"]])


def _to_json(acls: Iterable[AclBinding]) -> str:
    items = [{"resourceType": RESOURCE_NAMES[a.resource_type], "name": a.name,
              "patternType": a.pattern.name, **_entry(a)} for a in acls]
    return json.dumps({"version": 1, "acls": items}, indent=1)


def _from_json(text: str) -> list[AclBinding]:
    out = []
    for item in json.loads(text).get("acls", []):
        out.append(_binding(_TYPES_BY_NAME[item["resourceType"]], item["name"],
                            PatternType[item["patternType"]], item))
    return out


def _deleted(acls: tuple[AclBinding, ...], filters: list[AclFilter]
             ) -> tuple[list[list[AclBinding]], set[AclBinding]]:
    per_filter = [[a for a in acls if f.matches(a)] for f in filters]
    return per_filter, {a for found in per_filter for a in found}


class LocalAclStore:
    """ACLs of a single-node broker, in a file of its log directory."""

    def __init__(self, log_dir: str, authorizer: Authorizer) -> None:
        self.path = os.path.join(log_dir, ACLS_FILE)
        self.authorizer = authorizer
        self._lock = trio.Lock()
        try:
            with open(self.path, encoding="utf-8") as f:
                authorizer.set_acls(_from_json(f.read()))
        except FileNotFoundError:
            pass

    async def _save(self, acls: set[AclBinding]) -> None:
        await trio.to_thread.run_sync(checkpoint.atomic_write, self.path,
                                      _to_json(sorted(acls, key=str)), True)
        self.authorizer.set_acls(acls)

    async def create(self, acls: list[AclBinding]) -> None:
        async with self._lock:
            await self._save(set(self.authorizer.acls) | set(acls))

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        async with self._lock:
            per_filter, gone = _deleted(self.authorizer.acls, filters)
            if gone:
                await self._save(set(self.authorizer.acls) - gone)
            return per_filter

    async def run(self) -> None:
        await trio.sleep_forever()


def _node_path(resource_type: ResourceType, name: str, pattern: PatternType) -> str:
    root = LITERAL_ROOT if pattern is PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{RESOURCE_NAMES[resource_type]}/{quote(name, safe='*')}"


class ZkAclStore:
    """ACLs in ZooKeeper (see the module docstring), cached in the authorizer."""

    def __init__(self, zk: Any, authorizer: Authorizer) -> None:
        self.zk = zk
        self.client = zk.client
        self.authorizer = authorizer

    async def create(self, acls: list[AclBinding]) -> None:
        await self._change(acls, [])

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        await self.refresh()
        per_filter, gone = _deleted(self.authorizer.acls, filters)
        if gone:
            await self._change([], sorted(gone, key=str))
        return per_filter

    async def _change(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        by_node: dict[tuple[ResourceType, str, PatternType],
                      tuple[list[AclBinding], list[AclBinding]]] = {}
        for acl in added:
            by_node.setdefault((acl.resource_type, acl.name, acl.pattern), ([], []))[0].append(acl)
        for acl in removed:
            by_node.setdefault((acl.resource_type, acl.name, acl.pattern), ([], []))[1].append(acl)
        for (rtype, name, pattern), (add, remove) in by_node.items():
            await self.zk.call(self._update_node, rtype, name, pattern, add, remove)
        await self.refresh()

    def _update_node(self, rtype: ResourceType, name: str, pattern: PatternType,
                     add: list[AclBinding], remove: list[AclBinding]) -> None:
        """kazoo thread: read-modify-write one resource's node, then notify."""
        path = _node_path(rtype, name, pattern)
        while True:
            try:
                data, stat = self.client.get(path)
                version = stat.version
                entries = json.loads(data or b"{}").get("acls", [])
            except NoNodeError:
                version, entries = -1, []
            current = {_binding(rtype, name, pattern, e) for e in entries}
            wanted = (current | set(add)) - set(remove)
            text = json.dumps({"version": 1, "acls": [_entry(a) for a in sorted(
                wanted, key=str)]}).encode()
            try:
                if version < 0:
                    self.client.create(path, text, makepath=True)
                elif wanted:
                    self.client.set(path, text, version=version)
                else:
                    self.client.delete(path, version=version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it between our read and write
        changes = CHANGE_ROOTS[pattern]
        note = json.dumps({"version": 1, "resourceType": RESOURCE_NAMES[rtype], "name": name,
                           "patternType": pattern.name}).encode()
        self.client.create(f"{changes}/acl_changes_", note, sequence=True, makepath=True)
        for old in sorted(self.client.get_children(changes))[:-_KEEP_NOTIFICATIONS]:
            try:
                self.client.delete(f"{changes}/{old}")
            except NoNodeError:
                pass

    def _read_all(self) -> list[AclBinding]:
        """kazoo thread: every ACL node."""
        out: list[AclBinding] = []
        for pattern, root in ((PatternType.LITERAL, LITERAL_ROOT),
                              (PatternType.PREFIXED, PREFIXED_ROOT)):
            for type_name, rtype in _TYPES_BY_NAME.items():
                try:
                    names = self.client.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for node in names:
                    try:
                        data, _ = self.client.get(f"{root}/{type_name}/{node}")
                        entries = json.loads(data or b"{}").get("acls", [])
                        out.extend(_binding(rtype, unquote(node), pattern, e) for e in entries)
                    except NoNodeError:
                        continue
                    except (ValueError, KeyError):
                        log.warning("unreadable ACL node skipped", path=f"{root}/{type_name}/{node}")
        return out

    async def refresh(self) -> None:
        self.authorizer.set_acls(await self.zk.call(self._read_all))

    async def run(self) -> None:
        """Re-read the table on every change notification (and now and then)."""
        for root in CHANGE_ROOTS.values():
            await self.zk.call(self.client.ensure_path, root)
        changed = trio.Event()

        async def watch(root: str) -> None:
            async for _ in self.zk.watch_children(root):
                changed.set()

        async with trio.open_nursery() as nursery:
            for root in CHANGE_ROOTS.values():
                nursery.start_soon(watch, root)
            while True:
                try:
                    await self.refresh()
                except Exception:  # ZooKeeper unavailable: keep the last table
                    log.warning("cannot read ACLs from ZooKeeper", exc_info=True)
                with trio.move_on_after(ZK_FULL_REFRESH_S):
                    await changed.wait()
                changed = trio.Event()



async def build_acl_store(config: Any, cluster: Any) -> AclStore | None:
    """The ACL store when ``authorizer.class.name`` is set (its table loaded
    before any listener opens, so no request is decided on an empty table)."""
    name = config["authorizer.class.name"]
    if not name:
        return None
    authorizer = Authorizer(parse_super_users(config["super.users"]),
                            config["allow.everyone.if.no.acl.found"])
    store: AclStore
    if cluster is not None:
        zk_store = ZkAclStore(cluster.zk, authorizer)
        await zk_store.refresh()
        store = zk_store
    else:
        store = LocalAclStore(config.log_dir, authorizer)
    log.info("ACL authorizer on", authorizer=name, acls=len(authorizer.acls),
             super_users=sorted(authorizer.super_users),
             allow_everyone_if_no_acl=authorizer.allow_if_no_acl)
    return store
