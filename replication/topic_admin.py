"""The one interface through which topics are created, deleted, grown and reconfigured.

Handlers (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
Metadata's auto-creation), the internal topics and InitProducerId talk to a
``TopicAdmin``; which one they get depends on the mode: on a single broker
``replication.local_admin.LocalTopicAdmin`` persists the change in the log
directory and applies it at once; in cluster mode the change is written to
ZooKeeper and the controller carries it out on every broker.

Every method validates what only the writer can know (the name is free,
the topic exists) and raises ``KafkaApiError`` with Kafka's code; request
shape checks (partition counts, replication factor against live brokers,
config values) happen in the handlers before calling.
"""

from __future__ import annotations

from typing import Protocol

from config import TopicConfigs
from replication.metadata import TopicInfo


class TopicAdmin(Protocol):
    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], internal: bool = False,
                           assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        """Create a topic with a fresh topic id (``assignment``: the replicas of
        each partition as the client chose them; else the broker places them).

        Raises:
            KafkaApiError: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
                INVALID_REPLICATION_FACTOR.
        """
        ...

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (and, if tiered, its remote data, in the background)."""
        ...

    async def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic to ``count`` partitions."""
        ...

    async def alter_configs(self, name: str, configs: TopicConfigs) -> None:
        """Replace a topic's config overrides."""
        ...

    async def allocate_producer_id(self) -> int:
        """A producer id no broker of the cluster has handed out before."""
        ...
