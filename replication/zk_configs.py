"""Config znodes of ZooKeeper-mode Kafka, read and written through ``ZkClient``:
topics' (``/config/topics/<name>``), brokers' dynamic configs
(``/config/brokers/<id>`` and the cluster default ``/config/brokers/<default>``),
groups' (KIP-848 group configs, ``/config/groups/<id>``), users' (SCRAM
credentials and quotas, ``/config/users/<name>``), clients' quotas (``/config/clients/<id>``), and the
change notifications (``/config/changes/config_change_<seq>``) that tell every
broker to re-read one.

Each node's data is ``{"version": 1, "config": {key: value}}``.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from replication.zookeeper import ZkClient, json_bytes, user_node


class ZkConfigs:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        return await self.get_entity_config(f"topics/{topic}")

    async def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        data = json_bytes({"version": 1, "config": dict(configs)})

        def run() -> None:
            try:
                self.zk.client.create(f"/config/topics/{topic}", data)
            except NodeExistsError:
                self.zk.client.set(f"/config/topics/{topic}", data)
        await self.zk.call(run)

    # -- users (SCRAM credentials, Kafka's /config/users/<name>) --------------------

    async def get_user_config(self, user: str) -> dict[str, str]:
        return await self.get_entity_config(f"users/{user_node(user)}")

    async def set_user_config(self, user: str, configs: dict[str, str]) -> None:
        """Write (or, with no configs left, delete) a user's config node."""
        path = f"/config/users/{user_node(user)}"
        data = json_bytes({"version": 1, "config": dict(configs)})

        def run() -> None:
            if not configs:
                try:
                    self.zk.client.delete(path)
                    return
                except NoNodeError:
                    return
                except NotEmptyError:
                    pass  # client-id quota nodes below it: keep it, empty
            self.zk.client.ensure_path("/config/users")
            try:
                self.zk.client.create(path, data)
            except NodeExistsError:
                self.zk.client.set(path, data)
        await self.zk.call(run)

    # -- client quotas (Kafka's /config/users/..., /config/clients/...) --------------

    async def get_entity_config(self, path: str) -> dict[str, str]:
        """The config map of ``/config/<path>`` (empty if the node does not exist)."""
        try:
            data, _ = await self.zk.call(self.zk.client.get, f"/config/{path}")
        except NoNodeError:
            return {}
        return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}

    async def set_entity_config(self, path: str, configs: dict[str, str]) -> None:
        """Write ``/config/<path>`` (parents created with empty configs); an empty
        config deletes the node unless it has children."""
        full = f"/config/{path}"
        data = json_bytes({"version": 1, "config": dict(configs)})

        def run() -> None:
            if not configs:
                try:
                    self.zk.client.delete(full)
                    return
                except NoNodeError:
                    return
                except NotEmptyError:
                    pass
            parts = full.strip("/").split("/")
            for depth in range(2, len(parts)):
                parent = "/" + "/".join(parts[:depth])
                try:
                    self.zk.client.create(parent, json_bytes({"version": 1, "config": {}})
                                       if depth > 2 else b"", makepath=True)
                except NodeExistsError:
                    pass
            try:
                self.zk.client.create(full, data)
            except NodeExistsError:
                self.zk.client.set(full, data)
        await self.zk.call(run)

    async def get_quota_configs(self) -> list[tuple[str, dict[str, str]]]:
        """(path under /config, config) of every user, user/client and client node."""
        def run() -> list[tuple[str, dict[str, str]]]:
            out: list[tuple[str, dict[str, str]]] = []

            def read(path: str) -> None:
                try:
                    data, _ = self.zk.client.get(f"/config/{path}")
                    out.append((path, {k: str(v) for k, v in
                                       json.loads(data or b"{}").get("config", {}).items()}))
                except (NoNodeError, ValueError):
                    pass

            for kind in ("users", "clients"):
                try:
                    names = self.zk.client.get_children(f"/config/{kind}")
                except NoNodeError:
                    continue
                for name in names:
                    read(f"{kind}/{name}")
                    if kind == "users":
                        try:
                            clients = self.zk.client.get_children(f"/config/users/{name}/clients")
                        except NoNodeError:
                            continue
                        for client in clients:
                            read(f"users/{name}/clients/{client}")
            return out
        return list(await self.zk.call(run))

    async def get_entity_configs(self, kind: str) -> dict[str, dict[str, str]]:
        """The config map of every ``/config/<kind>/<name>``, by (still quoted) name."""
        try:
            names = await self.zk.call(self.zk.client.get_children, f"/config/{kind}")
        except NoNodeError:
            return {}
        return {n: await self.get_entity_config(f"{kind}/{n}") for n in names}

    async def get_users(self) -> list[str]:
        try:
            children = await self.zk.call(self.zk.client.get_children, "/config/users")
        except NoNodeError:
            return []
        return sorted(unquote(c) for c in children)

    async def notify_topic_config_change(self, topic: str) -> None:
        await self.zk.call(self.zk.client.create, "/config/changes/config_change_",
                         json_bytes({"version": 2, "entity_path": f"topics/{topic}"}),
                         sequence=True)

    async def notify_config_change(self, entity_path: str) -> None:
        """Tell every broker to re-read ``/config/<entity_path>`` (e.g. brokers/<default>)."""
        await self.zk.call(self.zk.client.create, "/config/changes/config_change_",
                           json_bytes({"version": 2, "entity_path": entity_path}),
                           sequence=True)
