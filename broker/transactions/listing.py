"""What the transaction coordinator tells operators (KIP-664): the ids it
coordinates (ListTransactions) and one id's current transaction
(DescribeTransactions).

Theory of operation: both read ``TransactionCoordinator.txns``, the ids of
the ``__transaction_state`` partitions this broker owns, without awaiting,
so an answer is one consistent view. As in Kafka, a listing while any
partition is still being replayed is COORDINATOR_LOAD_IN_PROGRESS (it would
be incomplete), and ids being expired (Dead) are left out of both answers.

Error handling: unknown state names in a filter are returned to the caller
(Kafka answers them in ``UnknownStateFilters`` and matches nothing for them);
everything else is an error code for the id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.transactions.state import TxnMetadata, TxnState
from protocol.errors import ErrorCode

E = ErrorCode
# Kafka's state names, as the filters and answers spell them.
BY_NAME = {state.kafka_name: state for state in TxnState}
# ListTransactions v1's DurationFilter: below zero, no filter.
NO_DURATION_FILTER = -1


@dataclass(frozen=True, slots=True)
class Listing:
    """A ListTransactions answer: an error, or the matching ids."""

    error: ErrorCode
    unknown_states: list[str]
    transactions: list[TxnMetadata]


def list_transactions(txns: Iterable[TxnMetadata], loading: bool, states: Iterable[str],
                      producer_ids: Iterable[int], duration_ms: int, now_ms: int) -> Listing:
    """The transactions matching every filter given (an empty filter matches all).

    Args:
        txns: the coordinator's current metadata, one per id.
        loading: a partition of ``__transaction_state`` is still being replayed.
        states: Kafka state names; unknown ones are returned, and match nothing.
        producer_ids: producer ids to keep.
        duration_ms: keep only transactions open longer than this (negative: all).
        now_ms: the wall clock, for ``duration_ms``.
    """
    state_names = list(states)
    unknown = [name for name in state_names if name not in BY_NAME]
    if loading:
        return Listing(E.COORDINATOR_LOAD_IN_PROGRESS, [], [])
    wanted_states = {BY_NAME[name] for name in state_names if name in BY_NAME}
    wanted_pids = set(producer_ids)

    def keep(txn: TxnMetadata) -> bool:
        if txn.state is TxnState.DEAD:
            return False
        if wanted_pids and txn.producer_id not in wanted_pids:
            return False
        if state_names and txn.state not in wanted_states:
            return False
        return duration_ms < 0 or now_ms - txn.start_timestamp > duration_ms

    return Listing(E.NONE, unknown, sorted((t for t in txns if keep(t)),
                                           key=lambda t: t.transactional_id))


def describe(txns: dict[str, TxnMetadata], check: ErrorCode, txn_id: str
             ) -> TxnMetadata | ErrorCode:
    """One id's metadata, or why there is none here.

    Args:
        check: the coordinator runtime's answer for the id (NONE if owned here).
    """
    if not txn_id:
        return E.INVALID_REQUEST
    if check is not E.NONE:
        return check
    txn = txns.get(txn_id)
    if txn is None or txn.state is TxnState.DEAD:
        return E.TRANSACTIONAL_ID_NOT_FOUND
    return txn
