"""The transaction state machine: Kafka's state ids and names, and the transition table."""

from __future__ import annotations

import pytest

from broker.transactions.state import (
    TRANSITIONS,
    IllegalTxnTransition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)

S = TxnState

# Kafka's TransactionState.validPreviousStates, with transactions v2's aborts
# from Empty/Complete* (an abort with no partition added still bumps the epoch).
KAFKA_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                      S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def meta(state: TxnState = S.EMPTY) -> TxnMetadata:
    return TxnMetadata("t", 7, 0, 60_000, state)


def test_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


def test_table_is_kafkas_valid_previous_states_inverted():
    inverted = {s: {prev for prev, nexts in TRANSITIONS.items() if s in nexts} for s in S}
    assert inverted == KAFKA_PREVIOUS


@pytest.mark.parametrize("src", list(S))
@pytest.mark.parametrize("dst", list(S))
def test_every_move_is_allowed_or_raises(src, dst):
    if dst in TRANSITIONS[src]:
        assert meta(src).prepare(dst).state is dst
    else:
        with pytest.raises(IllegalTxnTransition):
            meta(src).prepare(dst)


def test_prepare_returns_a_new_version_and_leaves_the_old_one():
    old = meta(S.EMPTY)
    new = old.prepare(S.ONGOING, partitions=frozenset({("a", 0)}), start_timestamp=5)
    assert (old.state, old.partitions, old.start_timestamp) == (S.EMPTY, frozenset(), -1)
    assert (new.state, new.partitions, new.start_timestamp) == (S.ONGOING, {("a", 0)}, 5)
    assert new.with_partitions(frozenset()).state is S.ONGOING


def test_epoch_exhaustion_leaves_room_for_one_fence():
    assert not epoch_exhausted(32765)
    assert epoch_exhausted(32766)
    assert epoch_exhausted(32767)
