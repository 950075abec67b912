"""The transaction coordinator (KIP-98): transactional producers and exactly-once.

``state`` holds the per-id state machine, ``coordinator`` the request logic
and timers, ``records`` and ``log_store`` the ``__transaction_state`` formats
and their replay, ``markers`` the in-process WriteTxnMarkers;
``broker.coordinator.txn_offsets`` holds the transactional offset commits
handed to the group coordinator. Partition ownership and the log itself are
shared with the group coordinator (``broker.coordinator_runtime``,
``broker.coordinator_store``).
"""

from broker.transactions.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]
