"""KIP-951 leader discovery: a "not leader" answer that names the leader.

When a Produce (v10+) or Fetch (v16+) partition fails because this broker
does not lead it (NOT_LEADER_OR_FOLLOWER, and for Fetch also
FENCED_LEADER_EPOCH), Kafka puts the partition's current leader id and epoch
in the partition's tagged field ``current_leader`` and that leader's endpoint
in the response's tagged field ``node_endpoints``. A client then goes
straight to the new leader instead of waiting for a metadata refresh, which
shortens failover.

As Kafka does, the leader is named even when it is unknown (-1, with the
epoch we know) and an endpoint is listed only for a live broker. The leader
comes from the metadata cache, the handlers' one view of who leads what.

Not a handler module: Produce and Fetch call it while building responses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.metadata_cache import NO_LEADER, BrokerEndpoint, MetadataCache

# Kafka's epoch for a partition it knows nothing about.
UNKNOWN_EPOCH = -1

# The versions whose responses carry current_leader / node_endpoints (KIP-951).
PRODUCE_VERSION = 10
FETCH_VERSION = 16

# The errors that send a client looking for the leader, per API.
PRODUCE_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})
FETCH_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclass(slots=True)
class LeaderHints:
    """The leaders named in one response, and the endpoints to list with it
    (as the request's listener sees them)."""

    metadata: MetadataCache
    listener: str | None
    endpoints: dict[int, BrokerEndpoint] = field(default_factory=dict)

    def current_leader(self, tp: TopicPartition, leader_cls: Any) -> Any:
        """``tp``'s leader and epoch as a ``LeaderIdAndEpoch`` of ``leader_cls``;
        the leader's endpoint is remembered for ``node_endpoints``."""
        state = self.metadata.partition(tp)
        leader, epoch = ((state.leader, state.leader_epoch) if state is not None
                         else (NO_LEADER, UNKNOWN_EPOCH))
        endpoint = self.metadata.broker(leader, self.listener)
        if endpoint is not None:
            self.endpoints[endpoint.node_id] = endpoint
        return leader_cls(leader_id=leader, leader_epoch=epoch)

    def node_endpoints(self, node_cls: Any) -> list[Any]:
        """The remembered endpoints as the response's ``NodeEndpoint`` entries."""
        return [node_cls(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                for _, e in sorted(self.endpoints.items())]
