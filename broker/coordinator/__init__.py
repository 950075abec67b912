"""The classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat, offsets).

``group`` holds the state machine, ``coordinator`` the entry points and
what every group protocol shares, ``classic`` the checks of the classic
protocol's requests, ``rebalance`` the rebalances and their timers,
``offsets`` commits/fetches/retention, ``admin`` the
List/Describe/DeleteGroups views, ``records`` and ``offsets_store`` the
``__consumer_offsets`` formats and their replay. Partition ownership and the
log itself are shared with the transaction coordinator
(``broker.coordinator_runtime``, ``broker.coordinator_store``).
"""

from broker.coordinator.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
