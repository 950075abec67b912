"""What the acting controller knows: the live brokers, the assignments and
every partition's leader and ISR, as read from (and written to) ZooKeeper.
The controller owns it; the channel reads it to build its requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.partition import TopicPartition
from replication.elections import LEADER_DURING_DELETE, LeaderAndIsr
from replication.metadata_cache import BrokerEndpoint


@dataclass(slots=True)
class ControllerContext:
    """What the acting controller knows."""

    epoch: int = 0
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    topic_ids: dict[str, object] = field(default_factory=dict)
    assignments: dict[TopicPartition, list[int]] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    # Each topic's own unclean.leader.election.enable (None: the broker's value
    # at the time of the election).
    unclean: dict[str, bool | None] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)

    def unclean_allowed(self, topic: str, default: bool) -> bool:
        own = self.unclean.get(topic)
        return default if own is None else own

    @property
    def live(self) -> set[int]:
        return set(self.brokers) - self.shutting_down

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp[0] == topic)

    def replica_partitions(self, broker: int) -> list[TopicPartition]:
        """The partitions ``broker`` is assigned a replica of."""
        return [tp for tp, replicas in self.assignments.items() if broker in replicas]

    def offline_partition_count(self) -> int:
        """Partitions with no live leader, not counting topics being deleted
        (Kafka's OfflinePartitionsCount; a shutting-down leader counts as gone)."""
        live = self.live
        count = 0
        for tp in self.assignments:
            state = self.states.get(tp)
            if state is None or (state.leader != LEADER_DURING_DELETE
                                 and state.leader not in live):
                count += 1
        return count
