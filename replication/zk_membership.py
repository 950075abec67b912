"""Who is in the cluster and who controls it, as ZooKeeper-mode Kafka keeps
it in ephemeral znodes (read and written through ``ZkClient``):

    /brokers/ids/<id>   ephemeral   one per running broker: its listeners, rack,
                                    and (its czxid) the broker epoch
    /controller         ephemeral   the broker acting as controller
    /controller_epoch               bumped by each new controller (compare-and-set)

These znodes live and die with a broker's session, unlike the rest of the
layout, which is the cluster's durable state: a registration is re-created
after a new session, and the controller role is won by creating a znode and
lost with it. Keeping them together keeps the liveness rules in one place.

Error handling: a broker id held by another live broker raises
``ZkConfigError`` (after waiting out a session that may be ending); an
unreadable registration is logged and left out of ``get_brokers``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog
import trio
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from replication.metadata_cache import BrokerEndpoint, ListenerEndpoint
from replication.zookeeper import ZkClient, ZkConfigError, json_bytes

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    node_id: int
    endpoint: BrokerEndpoint
    epoch: int  # the registration znode's czxid: changes with every (re)start


def _url(e: ListenerEndpoint) -> str:
    host = f"[{e.host}]" if ":" in e.host else e.host
    return f"{e.name}://{host}:{e.port}"


def _parse_broker(node: int, info: dict[str, Any], inter_broker: str) -> BrokerEndpoint | None:
    """A /brokers/ids/<id> node as a BrokerEndpoint reached on ``inter_broker``
    (a node without that listener, or unreadable: None, logged)."""
    protocols = info.get("listener_security_protocol_map") or {}
    ends = []
    try:
        for url in info.get("endpoints") or []:
            name, _, rest = url.partition("://")
            host, _, port = rest.rpartition(":")
            ends.append(ListenerEndpoint(name, protocols.get(name, name), host.strip("[]"),
                                         int(port)))
        if not ends and info.get("host"):  # an old registration without endpoints
            ends.append(ListenerEndpoint("PLAINTEXT", "PLAINTEXT", info["host"],
                                         int(info["port"])))
    except (ValueError, TypeError, AttributeError):
        log.warning("unreadable broker registration", node_id=node, data=info)
        return None
    inter = next((e for e in ends if e.name == inter_broker), None)
    if inter is None:
        log.warning("broker registered without the inter-broker listener", node_id=node,
                    listener=inter_broker, endpoints=[_url(e) for e in ends])
        return None
    return BrokerEndpoint(node, inter.host, inter.port, info.get("rack"), tuple(ends))


class ZkMembership:
    def __init__(self, zk: ZkClient, inter_broker_listener: str) -> None:
        self.zk = zk
        # The listener other brokers are reached on (inter.broker.listener.name).
        self.inter_broker_listener = inter_broker_listener

    # -- brokers -------------------------------------------------------------------------

    async def register_broker(self, endpoint: BrokerEndpoint,
                              wait_s: float | None = None) -> int:
        """Create /brokers/ids/<id> with every advertised listener (Kafka's v5
        layout: ``endpoints`` as NAME://host:port, their protocols in
        ``listener_security_protocol_map``, ``host``/``port`` those of a
        listener named PLAINTEXT or null/-1); returns the broker epoch (the
        znode's czxid).

        A node left by this broker's previous, crashed incarnation (same
        endpoint: this process now holds that listener, so the old one is gone)
        is deleted at once rather than waited out: until it goes, the
        controller would count the old incarnation as alive and in sync, and
        could elect this restarted broker (whose disk may have been wiped)
        leader of partitions it no longer has. Any other holder of the id is
        waited for until the deadline (its session may be ending).

        Raises:
            ZkConfigError: another live broker holds the id.
        """
        node_id = endpoint.node_id
        path = f"/brokers/ids/{node_id}"
        plain = next((e for e in endpoint.listeners if e.name == "PLAINTEXT"), None)
        data = json_bytes({"listener_security_protocol_map": {e.name: e.security_protocol
                                                               for e in endpoint.listeners},
                           "endpoints": [_url(e) for e in endpoint.listeners], "jmx_port": -1,
                           "features": {}, "host": plain.host if plain else None,
                           "timestamp": str(int(time.time() * 1000)),
                           "port": plain.port if plain else -1, "version": 5,
                           **({"rack": endpoint.rack} if endpoint.rack else {})})
        wait = wait_s if wait_s is not None else self.zk.session_timeout_s * 2 + 2
        deadline = trio.current_time() + wait
        while True:
            try:
                await self.zk.call(self.zk.client.create, path, data, ephemeral=True)
                break
            except NodeExistsError:
                stat = await self.zk.call(self.zk.client.exists, path)
                if stat is not None and stat.ephemeralOwner == self.zk.client.client_id[0]:
                    break
                if stat is not None and await self._stale_self(path, endpoint):
                    try:
                        await self.zk.call(self.zk.client.delete, path, stat.version)
                        log.info("removed the registration of this broker's previous "
                                 "incarnation", node_id=node_id)
                    except (NoNodeError, BadVersionError):
                        pass  # gone or re-registered meanwhile: try again
                    continue
                if trio.current_time() >= deadline:
                    raise ZkConfigError(f"broker id {node_id} is already registered in "
                                        f"ZooKeeper by a live broker; use another "
                                        f"broker.id") from None
                await trio.sleep(0.2)
        stat = await self.zk.call(self.zk.client.exists, path)
        return int(stat.czxid) if stat is not None else -1

    async def _stale_self(self, path: str, endpoint: BrokerEndpoint) -> bool:
        """Whether the broker node at ``path`` names our own inter-broker endpoint."""
        try:
            data, _ = await self.zk.call(self.zk.client.get, path)
        except NoNodeError:
            return False
        try:
            ours = {_url(e) for e in endpoint.listeners if e.port == endpoint.port
                    and e.host == endpoint.host}
            return bool(ours & set(json.loads(data).get("endpoints", [])))
        except (ValueError, AttributeError):
            return False

    async def get_brokers(self) -> list[RegisteredBroker]:
        def run() -> list[RegisteredBroker]:
            out = []
            for child in self.zk.client.get_children("/brokers/ids"):
                try:
                    data, stat = self.zk.client.get(f"/brokers/ids/{child}")
                except NoNodeError:
                    continue
                node = int(child)
                endpoint = _parse_broker(node, json.loads(data), self.inter_broker_listener)
                if endpoint is not None:
                    out.append(RegisteredBroker(node, endpoint, int(stat.czxid)))
            return sorted(out, key=lambda b: b.node_id)
        return list(await self.zk.call(run))

    async def watch_brokers(self) -> AsyncIterator[list[RegisteredBroker]]:
        """Yields the registered brokers each time one comes or goes."""
        async for _ in self.zk.watch_children("/brokers/ids"):
            yield await self.get_brokers()

    # -- controller --------------------------------------------------------------------

    async def try_become_controller(self, node_id: int) -> bool:
        data = json_bytes({"version": 1, "brokerid": node_id,
                           "timestamp": str(int(time.time() * 1000))})
        try:
            await self.zk.call(self.zk.client.create, "/controller", data, ephemeral=True)
            return True
        except NodeExistsError:
            return False

    async def get_controller(self) -> int | None:
        try:
            data, _ = await self.zk.call(self.zk.client.get, "/controller")
        except NoNodeError:
            return None
        return int(json.loads(data)["brokerid"])

    async def wait_controller_gone(self) -> None:
        """Until /controller does not exist."""
        gone = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def watch(data: Any, stat: Any) -> bool | None:
            if stat is None:
                try:
                    token.run_sync_soon(gone.set)
                except trio.RunFinishedError:
                    pass
                return False  # stop watching
            return None

        await self.zk.call(self.zk.client.DataWatch, "/controller", watch)
        await gone.wait()

    async def wait_controller_lost(self, node_id: int) -> None:
        """Until this broker's session is lost or /controller names someone else."""
        async with trio.open_nursery() as nursery:
            async def gone() -> None:
                await self.wait_controller_gone()
                nursery.cancel_scope.cancel()

            nursery.start_soon(gone)
            await self.zk.session_lost()
            nursery.cancel_scope.cancel()

    async def increment_controller_epoch(self) -> int:
        def run() -> int:
            while True:
                try:
                    data, stat = self.zk.client.get("/controller_epoch")
                except NoNodeError:
                    try:
                        self.zk.client.create("/controller_epoch", b"1")
                        return 1
                    except NodeExistsError:
                        continue
                epoch = int(data) + 1
                try:
                    self.zk.client.set("/controller_epoch", str(epoch).encode(), version=stat.version)
                    return epoch
                except BadVersionError:
                    continue
        return int(await self.zk.call(run))
