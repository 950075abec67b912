"""ListTransactions' filters and DescribeTransactions' answers
(``broker.transactions.listing``), on hand-made metadata."""

from __future__ import annotations

from broker.transactions.listing import describe, list_transactions
from broker.transactions.state import TxnMetadata, TxnState
from protocol.errors import ErrorCode as E

S = TxnState
NOW = 100_000
TXNS = {
    "a": TxnMetadata("a", 1, 0, 60_000, S.ONGOING, frozenset({("t", 0)}), start_timestamp=NOW - 50),
    "b": TxnMetadata("b", 2, 3, 60_000, S.ONGOING, frozenset({("t", 1)}),
                     start_timestamp=NOW - 5_000),
    "c": TxnMetadata("c", 3, 1, 60_000, S.COMPLETE_COMMIT, start_timestamp=NOW - 9_000),
    "d": TxnMetadata("d", 4, 0, 60_000, S.DEAD),
}


def ids(**filters: object) -> list[str]:
    args = {"states": [], "producer_ids": [], "duration_ms": -1, "now_ms": NOW, **filters}
    found = list_transactions(TXNS.values(), False, **args)
    assert found.error is E.NONE
    return [t.transactional_id for t in found.transactions]


def test_no_filter_lists_all_but_dead_ids() -> None:
    assert ids() == ["a", "b", "c"]


def test_filters_combine() -> None:
    assert ids(states=["Ongoing"]) == ["a", "b"]
    assert ids(states=["Ongoing", "CompleteCommit"], producer_ids=[2, 3]) == ["b", "c"]
    assert ids(duration_ms=1_000) == ["b", "c"]
    assert ids(duration_ms=5_000) == ["c"]  # strictly longer than the filter
    assert ids(states=["Dead"]) == []


def test_unknown_states_are_returned_and_match_nothing() -> None:
    found = list_transactions(TXNS.values(), False, ["Hanging"], [], -1, NOW)
    assert (found.error, found.unknown_states, found.transactions) == (E.NONE, ["Hanging"], [])


def test_a_partition_still_loading_refuses_the_listing() -> None:
    found = list_transactions(TXNS.values(), True, [], [], -1, NOW)
    assert (found.error, found.transactions) == (E.COORDINATOR_LOAD_IN_PROGRESS, [])


def test_describe() -> None:
    assert describe(TXNS, E.NONE, "a") is TXNS["a"]
    assert describe(TXNS, E.NONE, "d") is E.TRANSACTIONAL_ID_NOT_FOUND
    assert describe(TXNS, E.NONE, "zz") is E.TRANSACTIONAL_ID_NOT_FOUND
    assert describe(TXNS, E.NOT_COORDINATOR, "a") is E.NOT_COORDINATOR
    assert describe(TXNS, E.COORDINATOR_LOAD_IN_PROGRESS, "a") is E.COORDINATOR_LOAD_IN_PROGRESS
    assert describe(TXNS, E.NONE, "") is E.INVALID_REQUEST
