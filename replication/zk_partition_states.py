"""Partition state znodes of ZooKeeper-mode Kafka
(``/brokers/topics/<topic>/partitions/<n>/state``: leader, leader epoch, ISR,
controller epoch), read and written by the controller through ``ZkClient``.
A write is a compare-and-set on the znode's version, so a controller that
lost its term cannot overwrite its successor's states; batches go out
pipelined on the session.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from replication.elections import LeaderAndIsr
from replication.zookeeper import ZkClient, create_async, json_bytes, settled


class ZkPartitionStates:
    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    @staticmethod
    def _state_path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}/state"

    @staticmethod
    def _state_json(state: LeaderAndIsr) -> bytes:
        return json_bytes({"controller_epoch": state.controller_epoch, "leader": state.leader,
                      "version": 1, "leader_epoch": state.leader_epoch,
                      "isr": list(state.isr)})

    async def get_partition_state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        try:
            data, stat = await self.zk.call(self.zk.client.get, self._state_path(topic, partition))
        except NoNodeError:
            return None
        return self._parse_state(data, stat)

    async def create_partition_state(self, topic: str, partition: int,
                                     state: LeaderAndIsr) -> tuple[int, int] | None:
        """Create the state znode; (its version, 0, and zxid), or None if it exists."""
        try:
            _, stat = await self.zk.call(self.zk.client.create, self._state_path(topic, partition),
                                       self._state_json(state), makepath=True,
                                       include_data=True)
            return int(stat.version), int(stat.mzxid)
        except NodeExistsError:
            return None

    async def update_partition_state(self, topic: str, partition: int, state: LeaderAndIsr,
                                     expected_version: int) -> tuple[int, int] | None:
        """Compare-and-set; (the new version, its zxid), or None if the znode moved on."""
        try:
            stat = await self.zk.call(self.zk.client.set, self._state_path(topic, partition),
                                    self._state_json(state), version=expected_version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version), int(stat.mzxid)

    async def get_partition_states(self, tps: list[tuple[str, int]]
                                   ) -> list[LeaderAndIsr | None]:
        """Many partitions' states, read pipelined (None: no state znode)."""
        def run() -> list[tuple[bytes, Any] | None]:
            sent = [self.zk.client.get_async(self._state_path(t, p)) for t, p in tps]
            out: list[tuple[bytes, Any] | None] = []
            for result in sent:
                value, error = settled(result, NoNodeError)
                out.append(None if error is not None else value)
            return out

        return [None if got is None else self._parse_state(*got) for got in await self.zk.call(run)]

    @staticmethod
    def _parse_state(data: bytes, stat: Any) -> LeaderAndIsr:
        info = json.loads(data)
        return LeaderAndIsr(int(info["leader"]), int(info["leader_epoch"]),
                            tuple(int(r) for r in info["isr"]), int(info["controller_epoch"]),
                            int(stat.version), int(stat.mzxid))

    async def update_partition_states(
            self, updates: list[tuple[str, int, LeaderAndIsr, int]]
    ) -> list[tuple[int, int] | None]:
        """Compare-and-set many partition states: (topic, partition, state,
        expected version) each; per update as ``update_partition_state``.

        The writes go out pipelined on the session (kazoo's async calls from one
        worker thread) rather than one round trip after another: a lost broker
        of a few thousand partitions is one batch, not thousands of waits.
        """
        def run() -> list[tuple[int, int] | None]:
            sent = [self.zk.client.set_async(self._state_path(t, p), self._state_json(st),
                                          version=version) for t, p, st, version in updates]
            out: list[tuple[int, int] | None] = []
            for result in sent:
                stat, error = settled(result, BadVersionError, NoNodeError)
                out.append(None if error is not None else (int(stat.version), int(stat.mzxid)))
            return out

        return await self.zk.call(run)

    async def create_partition_states(self, creates: list[tuple[str, int, LeaderAndIsr]]
                                      ) -> list[tuple[int, int] | None]:
        """Create many state znodes, pipelined; per create as ``create_partition_state``.

        The parents (``partitions`` per topic, then one znode per partition)
        are created first, each level pipelined, rather than with kazoo's
        ``makepath``: that one fails, creates the path and tries again for
        every partition, and leaves thousands of exception cycles behind.
        """
        def create_all(paths: list[str]) -> None:
            for result in [create_async(self.zk.client, path, b"") for path in paths]:
                settled(result, NodeExistsError, NoNodeError)

        def run() -> list[tuple[int, int] | None]:
            create_all(sorted({f"/brokers/topics/{t}/partitions" for t, _, _ in creates}))
            create_all([f"/brokers/topics/{t}/partitions/{p}" for t, p, _ in creates])
            sent = [create_async(self.zk.client, self._state_path(t, p), self._state_json(st),
                                  include_data=True)
                    for t, p, st in creates]
            out: list[tuple[int, int] | None] = []
            for (t, p, st), result in zip(creates, sent, strict=True):
                got, error = settled(result, NodeExistsError, NoNodeError)
                if isinstance(error, NoNodeError):  # the topic's znode went: as before, make it
                    try:
                        got = self.zk.client.create(self._state_path(t, p), self._state_json(st),
                                                 makepath=True, include_data=True)
                    except NodeExistsError:
                        got = None
                elif error is not None:
                    got = None
                out.append(None if got is None else (int(got[1].version), int(got[1].mzxid)))
            return out

        return await self.zk.call(run)
