"""Where ACLs are kept: a file in the log directory of a single node, or
ZooKeeper in cluster mode (Kafka's nodes, so every broker enforces the same
table; the nodes are ``replication.zk_acls``'s).

Error handling: ZooKeeper unreachable raises to the handler (its request
fails with an error code) and, for the refresh loop, keeps the last table
with a log line; an entry that names no known operation, permission or
resource type is skipped with a log line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Protocol

import structlog
import trio

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
from replication.zk_acls import AclNode, Entries, ZkAcls
from replication.zookeeper import ZkClient
from storage.log import checkpoint

log = structlog.get_logger(__name__)

ACLS_FILE = "tierd-acls.json"
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


def _node(acl: AclBinding) -> AclNode:
    return AclNode(acl.pattern.name, RESOURCE_NAMES[acl.resource_type], acl.name)


class ZkAclStore:
    """ACLs in ZooKeeper, cached in the authorizer."""

    def __init__(self, zk: ZkClient, authorizer: Authorizer) -> None:
        self.nodes = ZkAcls(zk)
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
        by_node: dict[AclNode, tuple[list[AclBinding], list[AclBinding]]] = {}
        for acl in added:
            by_node.setdefault(_node(acl), ([], []))[0].append(acl)
        for acl in removed:
            by_node.setdefault(_node(acl), ([], []))[1].append(acl)
        for node, (add, remove) in by_node.items():
            rtype, pattern = _TYPES_BY_NAME[node.type_name], PatternType[node.pattern]

            def change(entries: Entries, rtype: ResourceType = rtype, pattern: PatternType = pattern,
                       node: AclNode = node, add: list[AclBinding] = add,
                       remove: list[AclBinding] = remove) -> Entries:
                current = {_binding(rtype, node.name, pattern, e) for e in entries}
                wanted = (current | set(add)) - set(remove)
                return [_entry(a) for a in sorted(wanted, key=str)]

            await self.nodes.update(node, change)
        await self.refresh()

    async def refresh(self) -> None:
        acls: list[AclBinding] = []
        for node, entries in await self.nodes.read_all(_TYPES_BY_NAME):
            rtype, pattern = _TYPES_BY_NAME[node.type_name], PatternType[node.pattern]
            try:
                acls.extend(_binding(rtype, node.name, pattern, e) for e in entries)
            except (KeyError, TypeError):
                log.warning("unreadable ACL node skipped", path=node.path)
        self.authorizer.set_acls(acls)

    async def run(self) -> None:
        """Re-read the table on every change notification (and now and then)."""
        changed = trio.Event()

        def notice() -> None:
            changed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.nodes.watch_changes, notice)
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
