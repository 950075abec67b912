"""The group coordinator: classic groups (JoinGroup/SyncGroup/Heartbeat),
KIP-848 consumer groups (ConsumerGroupHeartbeat), and their offsets.

``group`` holds the classic state machine, ``coordinator`` the entry points
and what every group protocol shares, ``classic`` the checks of the classic
protocol's requests, ``rebalance`` the rebalances and their timers;
``consumer_group`` the KIP-848 group state and reconciliation, ``consumer``
its heartbeat and timers, ``assignors`` the server-side assignors,
``topic_regex`` regular-expression subscriptions; ``migration`` the
online conversions between the two protocols, ``classic_members`` the
classic-protocol members inside a consumer group;
``offsets`` commits/fetches/retention, ``admin`` the
List/Describe/DeleteGroups views, ``records`` and ``offsets_store`` the
``__consumer_offsets`` formats and their replay. Partition ownership and the
log itself are shared with the transaction coordinator
(``broker.coordinator_runtime``, ``broker.coordinator_store``).
"""

from broker.coordinator.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
