"""Transactions v2 (KIP-890 part 2) in the coordinator: the epoch bump of every
EndTxn v5, retries of it, implicit adds, and the partition leader's fencing
of the old epoch; over a real ReplicaManager (test_coordinator's ``Broker``)."""

from __future__ import annotations

import dataclasses

import pytest

from broker.transactions import end_rules
from broker.transactions.end_rules import EndAction
from broker.transactions.state import MAX_PRODUCER_EPOCH, TxnMetadata, TxnState
from broker.transactions.verifier import PartitionVerifier
from protocol.errors import ErrorCode as E
from protocol.errors import KafkaApiError
from tests.transactions.test_coordinator import T0, T1, TIMEOUT_MS, Broker

S = TxnState


@pytest.fixture
async def broker(tmp_path, nursery) -> Broker:
    b = Broker(tmp_path, nursery)
    await b.start()
    return b


async def init(b, txn_id: str = "tx") -> tuple[int, int]:
    result = await b.txns.init_producer_id(txn_id, TIMEOUT_MS, None)
    assert result.error is E.NONE
    return result.producer_id, result.producer_epoch


async def produce_v2(b, pid: int, epoch: int, tp=T0, seq: int = 0) -> int:
    """What a leader does for a Produce v12 batch: the coordinator adds the
    partition, then the batch is appended."""
    verifier = PartitionVerifier(0, b.txns, b.node.metadata, TIMEOUT_MS)
    assert await verifier.check("tx", pid, epoch, [tp], add=True) == {tp: E.NONE}
    return b.produce(tp, pid, epoch, seq)


async def test_commit_bumps_the_epoch_and_the_old_epoch_is_fenced(broker):
    pid, epoch = await init(broker)
    await produce_v2(broker, pid, epoch)
    assert broker.txns.txns["tx"].partitions == {T0}
    done = await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    assert (done.error, done.producer_id, done.producer_epoch) == (E.NONE, pid, epoch + 1)
    txn = broker.txns.txns["tx"]
    assert (txn.state, txn.producer_epoch, txn.last_producer_epoch) == \
        (S.COMPLETE_COMMIT, epoch + 1, epoch)
    assert broker.lso(T0) == broker.hw(T0)  # the marker (epoch + 1) closed it

    # A zombie still at the old epoch: the coordinator refuses to add, the log to append.
    verifier = PartitionVerifier(0, broker.txns, broker.node.metadata, TIMEOUT_MS)
    assert await verifier.check("tx", pid, epoch, [T0], add=True) == {T0: E.PRODUCER_FENCED}
    with pytest.raises(KafkaApiError) as refused:
        broker.produce(T0, pid, epoch, seq=1)
    assert refused.value.code is E.INVALID_PRODUCER_EPOCH

    # The next transaction runs at the new epoch, sequences from 0.
    await produce_v2(broker, pid, epoch + 1)
    aborted = await broker.txns.end_transaction("tx", pid, epoch + 1, False, tv2=True)
    assert (aborted.error, aborted.producer_epoch) == (E.NONE, epoch + 2)
    assert broker.txns.txns["tx"].state is S.COMPLETE_ABORT


async def test_a_retried_end_txn_gets_the_bumped_epoch_again(broker):
    pid, epoch = await init(broker)
    await produce_v2(broker, pid, epoch)
    await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    retry = await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, pid, epoch + 1)
    wrong = await broker.txns.end_transaction("tx", pid, epoch, False, tv2=True)
    assert wrong.error is E.INVALID_TXN_STATE
    older = await broker.txns.end_transaction("tx", pid, epoch - 1, True, tv2=True)
    assert older.error is E.PRODUCER_FENCED
    # Committing again at the new epoch with nothing open is a client bug.
    again = await broker.txns.end_transaction("tx", pid, epoch + 1, True, tv2=True)
    assert again.error is E.INVALID_TXN_STATE


async def test_a_retry_is_recognised_after_the_coordinator_reloads(broker):
    pid, epoch = await init(broker)
    await produce_v2(broker, pid, epoch)
    await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    await broker.restart()  # replays __transaction_state (value version 1 keeps the v2 client)
    assert broker.txns.txns["tx"].client_tv2
    retry = await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    assert (retry.error, retry.producer_epoch) == (E.NONE, epoch + 1)


async def test_a_v1_client_after_a_v2_one_keeps_v1_rules(broker):
    pid, epoch = await init(broker)
    await produce_v2(broker, pid, epoch)
    await broker.txns.end_transaction("tx", pid, epoch, True, tv2=True)
    pid, epoch = await init(broker)  # a new instance, transactions v1
    assert not broker.txns.txns["tx"].client_tv2
    assert await broker.txns.add_partitions("tx", pid, epoch, {T1}) is E.NONE
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE  # a v1 retry


async def test_an_abort_with_nothing_added_still_bumps_the_epoch(broker):
    pid, epoch = await init(broker)
    done = await broker.txns.end_transaction("tx", pid, epoch, False, tv2=True)
    assert (done.error, done.producer_epoch) == (E.NONE, epoch + 1)
    assert broker.txns.txns["tx"].state is S.COMPLETE_ABORT
    # A v1 client may not end a transaction it never began.
    pid2, epoch2 = await init(broker, "v1")
    assert await broker.txns.end_txn("v1", pid2, epoch2, False) is E.INVALID_TXN_STATE


async def test_v1_end_txn_keeps_the_epoch(broker):
    pid, epoch = await init(broker)
    assert await broker.txns.add_partitions("tx", pid, epoch, {T1}) is E.NONE
    done = await broker.txns.end_transaction("tx", pid, epoch, True)
    assert (done.error, done.producer_epoch) == (E.NONE, epoch)
    assert broker.txns.txns["tx"].producer_epoch == epoch


async def test_an_exhausted_epoch_moves_to_a_new_producer_id(broker):
    pid, epoch = await init(broker)
    await produce_v2(broker, pid, epoch)
    txn = broker.txns.txns["tx"]
    last = MAX_PRODUCER_EPOCH - 1
    broker.txns.txns["tx"] = dataclasses.replace(txn, producer_epoch=last)
    done = await broker.txns.end_transaction("tx", pid, last, True, tv2=True)
    assert done.error is E.NONE and done.producer_id != pid and done.producer_epoch == 0
    txn = broker.txns.txns["tx"]
    assert (txn.producer_id, txn.producer_epoch, txn.state) == \
        (done.producer_id, 0, S.COMPLETE_COMMIT)


def meta(state: TxnState, epoch: int = 5, last: int = 4, tv2: bool = True) -> TxnMetadata:
    return TxnMetadata("tx", 1, epoch, TIMEOUT_MS, state, last_producer_epoch=last,
                       client_tv2=tv2)


@pytest.mark.parametrize("txn, epoch, committed, tv2, expected", [
    (meta(S.ONGOING), 5, True, True, (EndAction.PREPARE, E.NONE, True)),
    (meta(S.ONGOING, tv2=False), 5, True, False, (EndAction.PREPARE, E.NONE, False)),
    (meta(S.ONGOING), 4, True, True, (EndAction.ANSWER, E.PRODUCER_FENCED, False)),
    (meta(S.PREPARE_COMMIT), 4, True, True, (EndAction.ANSWER, E.CONCURRENT_TRANSACTIONS, False)),
    (meta(S.COMPLETE_COMMIT), 4, True, True, (EndAction.ANSWER, E.NONE, False)),
    (meta(S.COMPLETE_COMMIT), 3, True, True, (EndAction.ANSWER, E.PRODUCER_FENCED, False)),
    (meta(S.COMPLETE_COMMIT), 5, False, True, (EndAction.PREPARE, E.NONE, True)),
    (meta(S.EMPTY), 5, False, False, (EndAction.ANSWER, E.INVALID_TXN_STATE, False)),
    (meta(S.COMPLETE_ABORT, tv2=False), 5, False, False, (EndAction.ANSWER, E.NONE, False)),
])
def test_end_rules(txn, epoch, committed, tv2, expected):
    d = end_rules.decide(txn, 1, epoch, committed, tv2)
    assert (d.action, d.error, d.bump_epoch) == expected
    assert end_rules.decide(txn, 2, epoch, committed, tv2).error is E.INVALID_PRODUCER_ID_MAPPING
