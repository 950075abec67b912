"""Cluster metadata of a single-node broker: topics, ids, partition counts, configs.

In cluster mode ZooKeeper holds this; a single broker keeps it in
``<log.dir>/tierd-topics.json``, rewritten atomically (temp file, fsync in a
worker thread, rename) on every change, so a crash leaves the old or the new
state. ``meta.properties`` holds the cluster and node ids as Kafka's does.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.errors import ErrorCode, KafkaApiError
from storage.log import checkpoint
from storage.log.checkpoint import topic_id_from_str, topic_id_to_str

TOPICS_FILE = "tierd-topics.json"
PRODUCER_IDS_FILE = "tierd-producer-ids"
# Producer ids are handed out from blocks whose end is persisted before the
# first id of the block is used, so ids are never reused after a crash.
PRODUCER_ID_BLOCK = 1000
META_FILE = "meta.properties"
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class MetaPropertiesError(Exception):
    """The log directory belongs to another cluster or another node id
    (Kafka's InconsistentClusterIdException / InconsistentBrokerIdException)."""


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate.

    Raises:
        KafkaApiError: INVALID_TOPIC_EXCEPTION naming the problem.
    """
    if not name:
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL.match(name):
        raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                            f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    leader_epoch: int = 0
    internal: bool = False

    def to_json(self) -> dict[str, object]:
        return {"id": topic_id_to_str(self.topic_id), "partitions": self.partitions,
                "configs": self.configs, "leader_epoch": self.leader_epoch,
                "internal": self.internal}

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicInfo:
        return cls(name, topic_id_from_str(str(data["id"])), int(data["partitions"]),
                   dict(data.get("configs") or {}), int(data.get("leader_epoch", 0)),
                   bool(data.get("internal", False)))


class LocalMetadataStore:
    """Topics of a one-broker cluster, persisted in the log directory."""

    def __init__(self, log_dir: str, node_id: int, cluster_id: str | None) -> None:
        self.log_dir = log_dir
        self.node_id = node_id
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        # Partitions of deleted tiered topics whose remote data is not yet gone.
        self.pending_remote_deletes: list[tuple[uuid.UUID, str, int]] = []
        os.makedirs(log_dir, exist_ok=True)
        self.cluster_id = self._load_meta(cluster_id)
        self._load_topics()
        self._next_pid, self._pid_block_end = self._load_producer_ids()
        self._pid_lock = trio.Lock()

    def _load_producer_ids(self) -> tuple[int, int]:
        try:
            with open(os.path.join(self.log_dir, PRODUCER_IDS_FILE), encoding="utf-8") as f:
                end = int(f.read().strip())
        except (OSError, ValueError):
            end = 0
        return end, end

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across crashes.

        Concurrency: callers that find the block used up queue on a lock; the
        first persists the next block, the others then take ids from it.
        """
        async with self._pid_lock:
            if self._next_pid >= self._pid_block_end:
                end = self._next_pid + PRODUCER_ID_BLOCK
                await trio.to_thread.run_sync(
                    checkpoint.atomic_write, os.path.join(self.log_dir, PRODUCER_IDS_FILE),
                    f"{end}\n", True)
                self._pid_block_end = end
            pid = self._next_pid
            self._next_pid += 1
            return pid

    def _load_meta(self, configured: str | None) -> str:
        path = os.path.join(self.log_dir, META_FILE)
        props: dict[str, str] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                props = dict(line.split("=", 1) for line in f.read().splitlines()
                             if "=" in line and not line.startswith("#"))
        stored = props.get("cluster.id")
        if stored and configured and stored != configured:
            raise MetaPropertiesError(f"log dir {self.log_dir} belongs to cluster {stored}, "
                                      f"not the configured {configured}")
        stored_node = props.get("node.id", props.get("broker.id"))
        if stored_node is not None and stored_node.strip() != str(self.node_id):
            raise MetaPropertiesError(
                f"log dir {self.log_dir} belongs to node id {stored_node.strip()}, but this "
                f"broker is configured as node.id={self.node_id}; fix node.id/broker.id or "
                f"point log.dirs elsewhere")
        cluster_id = stored or configured or topic_id_to_str(uuid.uuid4())
        if not stored:
            checkpoint.atomic_write(path, f"version=1\ncluster.id={cluster_id}\n"
                                          f"node.id={self.node_id}\n", fsync=True)
        return cluster_id

    def _load_topics(self) -> None:
        path = os.path.join(self.log_dir, TOPICS_FILE)
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for name, info in data.get("topics", {}).items():
            topic = TopicInfo.from_json(name, info)
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
        self.pending_remote_deletes = [
            (topic_id_from_str(d["id"]), d["topic"], int(d["partition"]))
            for d in data.get("pending_remote_deletes", [])]

    async def _save(self) -> None:
        text = json.dumps({"version": 1, "topics": {n: t.to_json() for n, t in self.topics.items()},
                           "pending_remote_deletes": [
                               {"id": topic_id_to_str(i), "topic": t, "partition": p}
                               for i, t, p in self.pending_remote_deletes]},
                          indent=1, sort_keys=True)
        path = os.path.join(self.log_dir, TOPICS_FILE)
        await trio.to_thread.run_sync(checkpoint.atomic_write, path, text, True)

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                           internal: bool = False) -> TopicInfo:
        """Register a new topic with a fresh topic id.

        Raises:
            KafkaApiError: TOPIC_ALREADY_EXISTS or INVALID_TOPIC_EXCEPTION.
        """
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        collide = name.replace(".", "_")
        for other in self.topics:
            if other.replace(".", "_") == collide:
                raise KafkaApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"topic {name!r} collides with existing topic {other!r}")
        topic = TopicInfo(name, uuid.uuid4(), partitions, dict(configs), internal=internal)
        self.topics[name] = topic
        self.by_id[topic.topic_id] = topic
        await self._save()
        return topic

    async def delete_topic(self, name: str, remote_partitions: bool = False) -> TopicInfo:
        """Forget a topic. With ``remote_partitions`` its partitions are recorded as
        owing a remote-tier cleanup, which survives restarts until
        ``remote_delete_done`` is called for each."""
        topic = self.topics.pop(name)
        self.by_id.pop(topic.topic_id, None)
        if remote_partitions:
            self.pending_remote_deletes += [(topic.topic_id, name, i)
                                            for i in range(topic.partitions)]
        await self._save()
        return topic

    async def remote_delete_done(self, topic_id: uuid.UUID, topic: str, partition: int) -> None:
        entry = (topic_id, topic, partition)
        if entry in self.pending_remote_deletes:
            self.pending_remote_deletes.remove(entry)
            await self._save()

    async def set_partitions(self, name: str, count: int) -> None:
        self.topics[name].partitions = count
        await self._save()

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        await self._save()
