"""TransactionCoordinator over a real ReplicaManager, timed by trio's MockClock.

Tests that wait take ``autojump_clock`` (pytest-trio only sees a clock the
test itself requests): timers (transaction timeouts, the cleanup tasks) fire
as soon as every task is blocked, so a test "waits" minutes in no real
time. The coordinators' wall clock follows trio's clock.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import structlog
import structlog.testing
import trio

from broker.coordinator import GroupCoordinator
from broker.coordinator.offsets import PartitionCommit
from broker.transactions import TransactionCoordinator
from broker.transactions.log_store import txn_record
from broker.transactions.markers import MarkerWriter
from broker.transactions.state import TxnState
from broker.transactions.verifier import PartitionVerifier, for_produce
from protocol import records
from protocol.errors import ErrorCode as E
from protocol.errors import KafkaApiError
from replication.internal_topics import OFFSETS_TOPIC, TRANSACTION_TOPIC
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock

S = TxnState
T0, T1 = ("t", 0), ("t", 1)
TIMEOUT_MS = 60_000


class Broker:
    """A single-node broker core with both coordinators, restartable over the same directory."""

    def __init__(self, tmp_path: Path, nursery: trio.Nursery, **overrides: str) -> None:
        self.config = make_config(tmp_path, transaction_state_log_num_partitions="3",
                                  **overrides)
        self.nursery = nursery
        self.pids = itertools.count(1000)
        self.scopes: list[trio.CancelScope] = []

    async def start(self) -> None:
        self.node = make_node(self.config)
        self.replicas = self.node.replicas
        if self.node.metadata.topic("t") is None:
            await self.node.admin.create_topic("t", 2, 1, {})
        self.groups = GroupCoordinator(self.config, self.node.internal.offsets, trio_wall_clock)
        self.txns = TransactionCoordinator(self.config, self.node.internal.transactions,
                                           self.groups, MarkerWriter(
                                               0, self.replicas, self.node.metadata, TIMEOUT_MS),
                                           self._allocate, trio_wall_clock)
        scope = trio.CancelScope()
        self.scopes.append(scope)

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await _run_both(self.groups, self.txns, task_status)

        await self.nursery.start(run)

    async def _allocate(self) -> int:
        return next(self.pids)

    async def restart(self) -> None:
        self.scopes[-1].cancel()
        await self.replicas.shutdown()
        await self.start()

    def lso(self, tp) -> int:
        return self.replicas.partition(tp).last_stable_offset

    def hw(self, tp) -> int:
        return self.replicas.partition(tp).high_watermark

    def produce(self, tp, pid: int, epoch: int, seq: int = 0, value: bytes = b"v") -> int:
        data = records.build_batch([(None, value)], timestamp=trio_wall_clock(), producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq,
                                   attributes=records.ATTR_TRANSACTIONAL)
        return self.replicas.append_local(tp, bytearray(data)).first_offset


async def _run_both(groups, txns, task_status) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        await nursery.start(txns.run)
        task_status.started()


@pytest.fixture
async def broker(tmp_path, nursery) -> Broker:
    b = Broker(tmp_path, nursery)
    await b.start()
    return b


async def begin(b: Broker, txn_id: str = "tx", tps=(T0, T1)) -> tuple[int, int]:
    init = await b.txns.init_producer_id(txn_id, TIMEOUT_MS, None)
    assert init.error is E.NONE
    assert await b.txns.add_partitions(txn_id, init.producer_id, init.producer_epoch, set(tps)) is E.NONE
    return init.producer_id, init.producer_epoch


# -- InitProducerId ---------------------------------------------------------------------


async def test_init_allocates_then_bumps_the_epoch(broker):
    first = await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    assert (first.error, first.producer_id, first.producer_epoch) == (E.NONE, 1000, 0)
    again = await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    assert (again.producer_id, again.producer_epoch) == (1000, 1)
    assert broker.txns.txns["tx"].state is S.EMPTY


@pytest.mark.parametrize("txn_id, timeout, error", [
    ("", TIMEOUT_MS, E.INVALID_REQUEST),
    ("tx", 0, E.INVALID_TRANSACTION_TIMEOUT),
    ("tx", 900_001, E.INVALID_TRANSACTION_TIMEOUT),
])
async def test_init_rejects_bad_input(broker, txn_id, timeout, error):
    assert (await broker.txns.init_producer_id(txn_id, timeout, None)).error is error


async def test_init_with_a_stale_producer_is_fenced(broker):
    await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    assert (await broker.txns.init_producer_id("tx", TIMEOUT_MS, (999, 0))).error \
        is E.PRODUCER_FENCED
    bumped = await broker.txns.init_producer_id("tx", TIMEOUT_MS, (1000, 1))
    assert (bumped.error, bumped.producer_epoch) == (E.NONE, 2)
    retried = await broker.txns.init_producer_id("tx", TIMEOUT_MS, (1000, 1))
    assert (retried.error, retried.producer_epoch) == (E.NONE, 2)  # a retry, not a new bump
    assert (await broker.txns.init_producer_id("tx", TIMEOUT_MS, (1000, 0))).error \
        is E.PRODUCER_FENCED


async def test_a_new_instance_fences_and_aborts_the_old_ones_transaction(broker):
    pid, epoch = await begin(broker)
    broker.produce(T0, pid, epoch)
    assert broker.lso(T0) == 0
    second = await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    assert second.error is E.CONCURRENT_TRANSACTIONS  # Kafka: the client retries
    assert broker.txns.txns["tx"].state is S.COMPLETE_ABORT
    assert broker.lso(T0) == broker.hw(T0)
    assert broker.replicas.partition(T0).log.collect_aborted(0, broker.hw(T0))
    retry = await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    assert (retry.error, retry.producer_epoch) == (E.NONE, epoch + 2)
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.PRODUCER_FENCED
    with pytest.raises(KafkaApiError) as info:
        broker.produce(T0, pid, epoch, seq=1)
    assert info.value.code is E.INVALID_PRODUCER_EPOCH


# -- AddPartitionsToTxn / EndTxn ----------------------------------------------------------


async def test_commit_writes_markers_and_releases_the_lso(broker):
    pid, epoch = await begin(broker)
    broker.produce(T0, pid, epoch)
    broker.produce(T1, pid, epoch)
    assert broker.lso(T0) == broker.lso(T1) == 0
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    txn = broker.txns.txns["tx"]
    assert (txn.state, txn.partitions) == (S.COMPLETE_COMMIT, frozenset())
    for tp in (T0, T1):
        assert broker.lso(tp) == broker.hw(tp) == 2
        assert broker.replicas.partition(tp).log.collect_aborted(0, 2) == []
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE  # a retry
    assert await broker.txns.end_txn("tx", pid, epoch, False) is E.INVALID_TXN_STATE


async def test_abort_is_indexed(broker):
    pid, epoch = await begin(broker, tps=(T0,))
    broker.produce(T0, pid, epoch)
    assert await broker.txns.end_txn("tx", pid, epoch, False) is E.NONE
    aborted = broker.replicas.partition(T0).log.collect_aborted(0, broker.hw(T0))
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(pid, 0, 1)]


async def test_end_txn_errors(broker):
    assert await broker.txns.end_txn("nobody", 1, 0, True) is E.INVALID_PRODUCER_ID_MAPPING
    init = await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await broker.txns.end_txn("tx", pid + 1, epoch, True) is E.INVALID_PRODUCER_ID_MAPPING
    assert await broker.txns.end_txn("tx", pid, epoch + 1, True) is E.PRODUCER_FENCED
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.INVALID_TXN_STATE  # Empty
    assert await broker.txns.end_txn("", pid, epoch, True) is E.INVALID_REQUEST


async def test_add_partitions_errors_and_verification(broker):
    pid, epoch = await begin(broker, tps=(T0,))
    assert await broker.txns.add_partitions("tx", pid, epoch - 1, {T1}) is E.PRODUCER_FENCED
    assert await broker.txns.add_partitions("zz", pid, epoch, {T1}) is E.INVALID_PRODUCER_ID_MAPPING
    assert broker.txns.verify_partitions("tx", pid, epoch, {T0, T1}) == \
        {T0: E.NONE, T1: E.INVALID_TXN_STATE}
    # A leader's verification before a transactional append (the coordinator is local here).
    verifier = PartitionVerifier(0, broker.txns, broker.node.metadata, TIMEOUT_MS)
    assert await verifier.check("tx", pid, epoch, [T0, T1], add=False) == \
        {T0: E.NONE, T1: E.INVALID_TXN_STATE}
    assert await verifier.check("tx", pid, epoch - 1, [T0], add=False) == {T0: E.PRODUCER_FENCED}
    assert for_produce(E.PRODUCER_FENCED) is E.INVALID_PRODUCER_EPOCH
    assert for_produce(E.NOT_COORDINATOR) is E.NOT_ENOUGH_REPLICAS
    assert await verifier.check(None, pid, epoch, [T0], add=False) == {T0: E.INVALID_TXN_STATE}


async def test_owed_markers_are_retried_and_block_the_id_meanwhile(broker, monkeypatch,
                                                                  autojump_clock):
    pid, epoch = await begin(broker)
    broker.produce(T0, pid, epoch)
    real = broker.txns.markers.write

    async def owe_all(txn, *args):
        return frozenset(txn.partitions)

    monkeypatch.setattr(broker.txns.markers, "write", owe_all)
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    assert broker.txns.txns["tx"].state is S.PREPARE_COMMIT
    assert await broker.txns.add_partitions("tx", pid, epoch, {T0}) is E.CONCURRENT_TRANSACTIONS
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.CONCURRENT_TRANSACTIONS
    assert (await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)).error \
        is E.CONCURRENT_TRANSACTIONS
    monkeypatch.setattr(broker.txns.markers, "write", real)
    await trio.sleep(10.5)  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    assert broker.txns.txns["tx"].state is S.COMPLETE_COMMIT
    assert broker.lso(T0) == broker.hw(T0)


# -- timeouts and expiry -----------------------------------------------------------------


async def test_a_timed_out_transaction_is_fenced_and_aborted(broker, autojump_clock):
    init = await broker.txns.init_producer_id("tx", 5_000, None)
    pid, epoch = init.producer_id, init.producer_epoch
    await broker.txns.add_partitions("tx", pid, epoch, {T0})
    broker.produce(T0, pid, epoch)
    await trio.sleep(9)
    assert broker.txns.txns["tx"].state is S.ONGOING  # the check runs every 10 s
    await trio.sleep(2)
    txn = broker.txns.txns["tx"]
    assert (txn.state, txn.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
    assert broker.lso(T0) == broker.hw(T0)
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.PRODUCER_FENCED


async def test_idle_transactional_ids_expire(tmp_path, nursery, autojump_clock):
    b = Broker(tmp_path, nursery, transactional_id_expiration_ms="60000",
               transaction_remove_expired_transaction_cleanup_interval_ms="30000")
    await b.start()
    await b.txns.init_producer_id("tx", TIMEOUT_MS, None)
    with structlog.testing.capture_logs() as logs:
        await trio.sleep(95)
    assert "tx" not in b.txns.txns
    # The cleanup task itself ran cleanly (it once logged a failure every run).
    assert [e for e in logs if e["log_level"] == "error"] == []
    await b.restart()
    assert "tx" not in b.txns.txns


# -- restart -------------------------------------------------------------------------------


async def test_an_open_transaction_survives_a_restart_and_commits(broker):
    pid, epoch = await begin(broker)
    broker.produce(T0, pid, epoch)
    await broker.restart()
    txn = broker.txns.txns["tx"]
    assert (txn.state, txn.partitions) == (S.ONGOING, frozenset({T0, T1}))
    assert broker.lso(T0) == 0
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    assert broker.lso(T0) == broker.hw(T0)


async def test_a_prepared_transaction_is_completed_on_load(broker):
    pid, epoch = await begin(broker)
    broker.produce(T0, pid, epoch)
    prepared = broker.txns.txns["tx"].prepare(S.PREPARE_ABORT)
    assert broker.txns.store.append("tx", [txn_record("tx", prepared)]) is E.NONE  # crash right after this
    await broker.restart()
    assert broker.txns.txns["tx"].state is S.COMPLETE_ABORT
    assert broker.lso(T0) == broker.hw(T0)
    assert broker.replicas.partition(T0).log.collect_aborted(0, broker.hw(T0))


async def test_state_records_are_kafka_formatted_in_the_ids_partition(broker):
    await broker.txns.init_producer_id("tx", TIMEOUT_MS, None)
    index = broker.txns.store.partition_of("tx")
    assert broker.hw((TRANSACTION_TOPIC, index)) == 1
    assert sum(broker.hw((TRANSACTION_TOPIC, i)) for i in range(3)) == 1


# -- transactional offsets -----------------------------------------------------------------


def fetched(b: Broker, group: str) -> dict:
    return {tp: v.offset for tp, v in b.groups.offsets.fetch(group, None)}


async def commit_offsets(b: Broker, txn_id: str, group: str, offset: int) -> tuple[int, int]:
    pid, epoch = await begin(b, txn_id, tps=(T1,))
    assert await b.txns.add_offsets(txn_id, pid, epoch, group) is E.NONE
    errors = await b.txns.txn_offset_commit(txn_id, group, pid, epoch, -1, "", None,
                                      [PartitionCommit("t", 0, offset, -1, "m")])
    assert errors == [E.NONE]
    return pid, epoch


async def test_offsets_become_visible_only_on_commit(broker):
    pid, epoch = await commit_offsets(broker, "tx", "g", 42)
    assert fetched(broker, "g") == {}
    offsets_tp = (OFFSETS_TOPIC, broker.groups.store.partition_of("g"))
    assert broker.lso(offsets_tp) < broker.hw(offsets_tp)
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    assert fetched(broker, "g") == {("t", 0): 42}
    assert broker.lso(offsets_tp) == broker.hw(offsets_tp)
    pid, epoch = await commit_offsets(broker, "tx", "g", 50)
    assert await broker.txns.end_txn("tx", pid, epoch, False) is E.NONE
    assert fetched(broker, "g") == {("t", 0): 42}
    await broker.restart()
    assert fetched(broker, "g") == {("t", 0): 42}


async def test_pending_offsets_survive_a_restart(broker):
    pid, epoch = await commit_offsets(broker, "tx", "g", 7)
    await broker.restart()
    assert fetched(broker, "g") == {}
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NONE
    assert fetched(broker, "g") == {("t", 0): 7}


async def test_a_later_plain_commit_wins_over_replayed_transactional_offsets(broker):
    pid, epoch = await commit_offsets(broker, "tx", "g", 7)
    await broker.txns.end_txn("tx", pid, epoch, True)
    assert broker.groups.offsets.commit("g", -1, "", None, -1,
                                        [PartitionCommit("t", 0, 9, -1, "")]) == [E.NONE]
    await broker.restart()
    assert fetched(broker, "g") == {("t", 0): 9}


async def test_txn_offset_commit_errors(broker):
    pid, epoch = await begin(broker, tps=(T1,))
    commit = [PartitionCommit("t", 0, 1, -1, None)]
    assert await broker.txns.txn_offset_commit("tx", "g", pid, epoch, -1, "", None, commit) == \
        [E.INVALID_TXN_STATE]  # no AddOffsetsToTxn
    await broker.txns.add_offsets("tx", pid, epoch, "g")
    assert await broker.txns.txn_offset_commit("tx", "g", pid, epoch - 1, -1, "", None, commit) == \
        [E.INVALID_PRODUCER_EPOCH]
    assert await broker.txns.txn_offset_commit("zz", "g", pid, epoch, -1, "", None, commit) == \
        [E.INVALID_PRODUCER_ID_MAPPING]
    assert await broker.txns.txn_offset_commit("tx", "g", pid, epoch, 3, "", None, commit) == \
        [E.ILLEGAL_GENERATION]
    big = [PartitionCommit("t", 0, 1, -1, "x" * 5000)]
    assert await broker.txns.txn_offset_commit("tx", "g", pid, epoch, -1, "", None, big) == \
        [E.OFFSET_METADATA_TOO_LARGE]


# -- storage errors (Kafka's TransactionStateManager / GroupMetadataManager answers) --------


def _disk_gone(*args: object, **kwargs: object) -> None:
    raise OSError("disk gone")


async def test_a_storage_error_on_the_state_log_is_answered_not_coordinator(broker,
                                                                            monkeypatch):
    pid, epoch = await begin(broker)
    monkeypatch.setattr(broker.txns.store.topic, "append_records", _disk_gone)
    assert await broker.txns.end_txn("tx", pid, epoch, True) is E.NOT_COORDINATOR
    assert broker.txns.txns["tx"].state is S.ONGOING  # nothing installed
    assert (await broker.txns.init_producer_id("other", TIMEOUT_MS, None)).error \
        is E.NOT_COORDINATOR


async def test_a_storage_error_on_transactional_offsets_is_answered_not_coordinator(
        broker, monkeypatch):
    pid, epoch = await begin(broker, tps=(T1,))
    assert await broker.txns.add_offsets("tx", pid, epoch, "g") is E.NONE
    monkeypatch.setattr(broker.groups.store.topic, "append", _disk_gone)
    commit = [PartitionCommit("t", 0, 1, -1, None)]
    assert await broker.txns.txn_offset_commit("tx", "g", pid, epoch, -1, "", None, commit) == \
        [E.NOT_COORDINATOR]
    assert not broker.groups.txn_offsets.pending
