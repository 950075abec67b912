"""The transaction coordinator (KIP-98): transactional producers and exactly-once.

``state`` holds the per-id state machine, ``coordinator`` the request logic
and timers, ``records`` and ``log_store`` the ``__transaction_state`` formats
and their replay (the log itself is shared with the group coordinator:
``broker.coordinator_store``), ``markers`` the in-process WriteTxnMarkers;
``broker.coordinator.txn_offsets`` holds the transactional offset commits
handed to the group coordinator.
"""

from broker.transactions.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]
