"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, transaction timeouts and transactional-id expiry.

Theory of operation: a transactional id belongs to the broker leading its
partition of ``__transaction_state``. Which partitions this broker owns,
loading them and unloading them is the shared coordinator runtime's job
(``broker.coordinator_runtime``; requests for ids of a partition not owned
here get NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS until it is
replayed). Once a partition is loaded and owned, the coordinator sends the
markers its prepared transactions still owe; losing leadership drops its
ids at once.

State changes are made without awaiting in between: a new ``TxnMetadata``
version is appended to the local log and installed only if that append
worked, so the in-memory state always matches the local log. The request
is answered once the in-sync replicas have the write (``_install_durably``);
if they never do, its error is answered and the client retries (on a new
coordinator after a failover, which rebuilds from its own log).

Ending a transaction: PrepareCommit / PrepareAbort is written and made
durable, then the markers go to every partition's leader
(``markers.MarkerWriter``: in process or WriteTxnMarkers), and
CompleteCommit / CompleteAbort is written. Markers are sent only for a
durable Prepare*, so a coordinator that dies before the Prepare is
replicated leaves no partition with a marker. A marker that could not be
written leaves the transaction prepared with the partitions still owed a
marker; the periodic task retries them, and until then requests for the id
get CONCURRENT_TRANSACTIONS, as in Kafka. At most one marker round runs per
id at a time (``_in_flight``).

Timers: every transaction.abort.timed.out.transaction.cleanup.interval.ms
an Ongoing transaction older than its timeout is fenced (epoch bump) and
aborted, as Kafka does; every
transaction.remove.expired.transaction.cleanup.interval.ms idle ids older
than transactional.id.expiration.ms are removed. Both sleep on trio's clock
and read the wall clock given to the constructor, so tests run them under
``MockClock``.

Error handling: client mistakes are answered with Kafka's codes (PRODUCER_FENCED
here; handlers turn it into INVALID_PRODUCER_EPOCH for request versions that
predate it). An exception in a periodic task is our bug: logged, the task
goes on.

Why one module at ~450 lines: one coordinator, each method a request or a
timer of Kafka's transaction protocol; ownership and storage are already
shared (``broker.coordinator_runtime``, ``broker.coordinator_store``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from broker.coordinator import GroupCoordinator
from broker.coordinator.offsets import PartitionCommit
from broker.coordinator_runtime import CoordinatorRuntime
from broker.transactions import end_rules
from broker.transactions.end_rules import EndAction
from broker.transactions.log_store import load_txns, txn_record, txn_store
from broker.transactions.markers import MarkerWriter
from broker.transactions.state import (
    EXPIRABLE,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
    init_epoch_bump,
)
from config import BrokerConfig
from protocol.errors import ErrorCode
from replication.internal_topics import OFFSETS_TOPIC, InternalTopic
from storage.log.manager import now_ms

log = structlog.get_logger(__name__)

S = TxnState
E = ErrorCode


@dataclass(frozen=True, slots=True)
class InitResult:
    """InitProducerId's (and EndTxn v5's) answer: an error or the producer's id and epoch."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, topic: InternalTopic,
                 groups: GroupCoordinator | None, markers: MarkerWriter,
                 allocate_producer_id: Callable[[], Awaitable[int]],
                 wall_clock: Callable[[], int] = now_ms, follow_leadership: bool = False) -> None:
        """Args:
            follow_leadership: cluster mode: own only the partitions this broker
                leads, as ``on_leadership`` reports them (else: all, at start).
        """
        self.config = config
        self.markers = markers
        self.wall_clock = wall_clock
        self.allocate_producer_id = allocate_producer_id
        self.store = txn_store(topic, wall_clock)
        self.groups = groups
        if groups is not None:
            markers.complete_offsets = groups.txn_offsets.complete
        self.txns: dict[str, TxnMetadata] = {}
        self._in_flight: set[str] = set()
        self.partitions: CoordinatorRuntime[list[TxnMetadata]] = CoordinatorRuntime(
            "transaction coordinator", self.store, self._load, self._unload,
            after_load=self._complete_prepared, follow_leadership=follow_leadership)

    @property
    def timeout_ms(self) -> int:
        return int(self.config["request.timeout.ms"])

    # -- lifecycle ---------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run timers, partition loads and marker rounds until cancelled. On one
        broker, first create ``__transaction_state`` and load all of it."""
        async with trio.open_nursery() as nursery:
            await self.partitions.start(nursery)
            task_status.started()
            nursery.start_soon(self._every,
                               "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                               self.abort_timed_out)
            nursery.start_soon(self._every,
                               "transaction.remove.expired.transaction.cleanup.interval.ms",
                               self.expire_transactional_ids)

    def on_leadership(self, tp: tuple[str, int], leader: bool) -> None:
        """This broker became (or stopped being) the leader of ``tp``."""
        self.partitions.on_leadership(tp, leader)

    def _load(self, partition: int) -> list[TxnMetadata]:
        """Replay one partition; returns the transactions it left prepared."""
        loaded = load_txns(self.store, partition)
        self.txns.update(loaded)
        prepared = [t for t in loaded.values() if t.state in PREPARED]
        log.info("transaction coordinator loaded partition", partition=partition,
                 transactional_ids=len(loaded), prepared=len(prepared))
        return prepared

    async def _complete_prepared(self, prepared: list[TxnMetadata]) -> None:
        """Finish the transactions a loaded partition left prepared."""
        for txn in prepared:
            await self._send_markers(txn)

    def _unload(self, partition: int) -> int:
        """Drop the ids of a partition this broker no longer leads; how many."""
        doomed = [i for i in self.txns if self.store.partition_of(i) == partition]
        for txn_id in doomed:
            del self.txns[txn_id]
        return len(doomed)

    def owns(self, txn_id: str) -> bool:
        return self.partitions.owns(txn_id)

    async def _every(self, interval_key: str, task: Callable[[], Awaitable[None]]) -> None:
        interval = max(int(self.config[interval_key]), 1) / 1000
        while True:
            await trio.sleep(interval)
            try:
                await task()
            except Exception:
                log.exception("transaction coordinator task failed", task=task.__name__)

    async def abort_timed_out(self) -> None:
        """Fence and abort Ongoing transactions past their timeout; retry owed markers."""
        await self.retry_markers()
        now = self.wall_clock()
        for txn in list(self.txns.values()):
            if txn.state is S.ONGOING and txn.start_timestamp + txn.timeout_ms < now \
                    and self.txns.get(txn.transactional_id) is txn:
                log.info("aborting timed-out transaction", transactional_id=txn.transactional_id,
                         producer_id=txn.producer_id, epoch=txn.producer_epoch,
                         timeout_ms=txn.timeout_ms, age_ms=now - txn.start_timestamp)
                await self._fence_and_abort(txn)

    async def retry_markers(self) -> None:
        for txn in list(self.txns.values()):
            if txn.state in PREPARED and self.txns.get(txn.transactional_id) is txn:
                await self._send_markers(txn)

    async def expire_transactional_ids(self) -> None:
        """Drop ids idle for transactional.id.expiration.ms (tombstone first)."""
        now = self.wall_clock()
        expiration = self.config["transactional.id.expiration.ms"]
        for txn_id, txn in list(self.txns.items()):
            if txn.state not in EXPIRABLE or txn.last_update_timestamp + expiration > now:
                continue
            if txn_id in self._in_flight:
                continue
            txn.prepare(S.DEAD)  # checks the move; Dead is never stored, a tombstone is
            if self.store.append(txn_id, [txn_record(txn_id, None)]) is E.NONE:
                del self.txns[txn_id]
                log.info("transactional id expired", transactional_id=txn_id,
                         producer_id=txn.producer_id)

    # -- InitProducerId ----------------------------------------------------------

    async def init_producer_id(self, txn_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> InitResult:
        """Kafka's handleInitProducerId for a transactional id.

        Args:
            expected: (producer id, epoch) the client holds (InitProducerId v3+), if any.
        """
        if not txn_id:
            return InitResult(E.INVALID_REQUEST)
        if (code := self.partitions.check(txn_id)) is not E.NONE:
            return InitResult(code)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        if txn_id not in self.txns:
            pid = await self.allocate_producer_id()
            if (code := self.partitions.check(txn_id)) is not E.NONE:
                return InitResult(code)
            self.txns.setdefault(txn_id, TxnMetadata(txn_id, pid, NO_PRODUCER_EPOCH, timeout_ms,
                                                     S.EMPTY, last_update_timestamp=self.wall_clock()))
        txn = self.txns[txn_id]
        if expected is not None and txn.producer_epoch != NO_PRODUCER_EPOCH \
                and expected[0] != txn.producer_id:
            return InitResult(E.PRODUCER_FENCED)
        if txn.state in PREPARED:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if txn.state is S.ONGOING:
            # Abort the previous instance's transaction under a bumped epoch; the
            # client retries and gets the next one (Kafka's PrepareEpochFence).
            error = await self._fence_and_abort(txn)
            return InitResult(error if error is not E.NONE else E.CONCURRENT_TRANSACTIONS)
        if epoch_exhausted(txn.producer_epoch) and (expected is None
                                                    or expected[1] == txn.producer_epoch):
            pid = await self.allocate_producer_id()
            if self.txns.get(txn_id) is not txn:
                return InitResult(E.CONCURRENT_TRANSACTIONS)
            epoch, last = 0, txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        else:
            pid = txn.producer_id
            bumped = init_epoch_bump(txn, None if expected is None else expected[1])
            if bumped is None:
                return InitResult(E.PRODUCER_FENCED)
            epoch, last = bumped
        new = txn.prepare(S.EMPTY, producer_id=pid, producer_epoch=epoch, last_producer_epoch=last,
                          timeout_ms=timeout_ms, partitions=frozenset(), start_timestamp=-1,
                          last_update_timestamp=self.wall_clock(), client_tv2=False,
                          next_producer_id=NO_PRODUCER_ID)
        error = await self._install_durably(new)
        if error is not E.NONE:
            return InitResult(error)
        log.info("initialized transactional id", transactional_id=txn_id, producer_id=pid,
                 epoch=epoch)
        return InitResult(E.NONE, pid, epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------

    def _current(self, txn_id: str, producer_id: int, epoch: int) -> TxnMetadata | ErrorCode:
        """The id's metadata if the producer is its current one, else the error."""
        if not txn_id:
            return E.INVALID_REQUEST
        if (code := self.partitions.check(txn_id)) is not E.NONE:
            return code
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        return txn

    async def add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                             partitions: set[TopicPartition], tv2: bool = False) -> ErrorCode:
        """Add ``partitions`` to the open transaction (starting one if none is).

        Args:
            tv2: added implicitly for a transactions-v2 client (its Produce v12
                or TxnOffsetCommit v5, through the partition's leader).
        """
        txn = self._current(txn_id, producer_id, epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state in PREPARED:
            return E.CONCURRENT_TRANSACTIONS
        if txn.state is S.ONGOING and partitions <= txn.partitions:
            return E.NONE
        now = self.wall_clock()
        start = txn.start_timestamp if txn.state is S.ONGOING else now
        return await self._install_durably(txn.prepare(
            S.ONGOING, partitions=txn.partitions | partitions, start_timestamp=start,
            last_update_timestamp=now, client_tv2=tv2))

    def verify_partitions(self, txn_id: str, producer_id: int, epoch: int,
                          partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4 verify-only: is each partition in the open transaction?"""
        txn = self._current(txn_id, producer_id, epoch)
        if isinstance(txn, ErrorCode):
            return dict.fromkeys(partitions, txn)
        if txn.state in PREPARED:
            return dict.fromkeys(partitions, E.CONCURRENT_TRANSACTIONS)
        return {tp: E.NONE if txn.state is S.ONGOING and tp in txn.partitions
                else E.INVALID_TXN_STATE for tp in partitions}

    def offsets_partition(self, group_id: str) -> TopicPartition | None:
        """The group's __consumer_offsets partition (None: no group coordinator)."""
        if self.groups is None:
            return None
        return OFFSETS_TOPIC, self.groups.store.partition_of(group_id)

    async def add_offsets(self, txn_id: str, producer_id: int, epoch: int,
                          group_id: str) -> ErrorCode:
        """Add the group's __consumer_offsets partition to the transaction."""
        tp = self.offsets_partition(group_id)
        if tp is None:
            return E.COORDINATOR_NOT_AVAILABLE
        return await self.add_partitions(txn_id, producer_id, epoch, {tp})

    # -- EndTxn --------------------------------------------------------------------

    async def end_txn(self, txn_id: str, producer_id: int, epoch: int,
                      committed: bool) -> ErrorCode:
        """EndTxn v0-v4 (transactions v1): just the error."""
        return (await self.end_transaction(txn_id, producer_id, epoch, committed)).error

    async def end_transaction(self, txn_id: str, producer_id: int, epoch: int, committed: bool,
                              tv2: bool = False) -> InitResult:
        """Kafka's handleEndTransaction from a client (rules: ``end_rules``).

        Args:
            tv2: EndTxn v5+: the epoch is bumped, and the answer carries the
                producer id and epoch the client goes on with.
        """
        txn = self._current(txn_id, producer_id, epoch)
        if txn is E.PRODUCER_FENCED:
            txn = self.txns[txn_id]  # an old epoch may be a v2 client's retry
        if isinstance(txn, ErrorCode):
            return InitResult(txn)
        decision = end_rules.decide(txn, producer_id, epoch, committed, tv2)
        if decision.action is EndAction.ANSWER:
            if decision.error is E.INVALID_TXN_STATE:
                log.info("EndTxn in wrong state", transactional_id=txn_id,
                         state=txn.state.kafka_name, commit=committed)
            if decision.error is not E.NONE:
                return InitResult(decision.error)
            return InitResult(E.NONE, txn.producer_id, txn.producer_epoch)
        if not decision.bump_epoch:  # a v1 client's EndTxn
            error = await self._end(dataclasses.replace(txn, client_tv2=False), committed)
            return InitResult(error) if error else InitResult(error, txn.producer_id,
                                                              txn.producer_epoch)
        next_pid = NO_PRODUCER_ID
        if epoch_exhausted(txn.producer_epoch):
            next_pid = await self.allocate_producer_id()
            if self.txns.get(txn_id) is not txn:
                return InitResult(E.CONCURRENT_TRANSACTIONS)
        bumped = dataclasses.replace(txn, producer_epoch=txn.producer_epoch + 1,
                                     last_producer_epoch=txn.producer_epoch, client_tv2=True,
                                     next_producer_id=next_pid)
        if txn.state is not S.ONGOING:
            bumped = dataclasses.replace(bumped, partitions=frozenset(),
                                         start_timestamp=self.wall_clock())
        error = await self._end(bumped, committed)
        if error is not E.NONE:
            return InitResult(error)
        if next_pid != NO_PRODUCER_ID:
            return InitResult(E.NONE, next_pid, 0)
        return InitResult(E.NONE, bumped.producer_id, bumped.producer_epoch)

    async def _fence_and_abort(self, txn: TxnMetadata) -> ErrorCode:
        bumped = txn.producer_epoch if txn.producer_epoch >= MAX_PRODUCER_EPOCH \
            else txn.producer_epoch + 1
        fenced = txn.prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=bumped,
                             last_producer_epoch=NO_PRODUCER_EPOCH, client_tv2=False)
        return await self._end(fenced, committed=False)

    async def _end(self, txn: TxnMetadata, committed: bool) -> ErrorCode:
        prepared = txn.prepare(S.PREPARE_COMMIT if committed else S.PREPARE_ABORT,
                               last_update_timestamp=self.wall_clock())
        error = await self._install_durably(prepared)
        if error is E.NONE:
            await self._send_markers(prepared)
        return error

    async def _send_markers(self, txn: TxnMetadata) -> None:
        """Write the markers still owed; once all landed, complete the transaction.

        Only for a Prepare* the in-sync replicas have; one round per id at a time.
        """
        txn_id = txn.transactional_id
        if txn_id in self._in_flight:
            return
        self._in_flight.add(txn_id)
        try:
            await self._marker_round(txn)
        finally:
            self._in_flight.discard(txn_id)

    async def _marker_round(self, txn: TxnMetadata) -> None:
        txn_id = txn.transactional_id
        if await self.store.wait_durable(txn_id, self.timeout_ms) is not E.NONE:
            return  # retried by the periodic task while we still own the id
        committed = txn.state is S.PREPARE_COMMIT
        coordinator_epoch = self.store.leader_epoch(txn_id)
        owed = await self.markers.write(txn, committed, coordinator_epoch, self.wall_clock())
        if self.txns.get(txn_id) is not txn:
            return  # unloaded (leadership moved) or replaced while the markers were out
        if owed:
            self.txns[txn_id] = txn.with_partitions(owed)
            return
        done = txn.prepare(S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT,
                           partitions=frozenset(), last_update_timestamp=self.wall_clock())
        if done.next_producer_id != NO_PRODUCER_ID:
            # Transactions v2 ran out of epochs: go on with the new producer id.
            done = dataclasses.replace(done, producer_id=done.next_producer_id, producer_epoch=0,
                                       last_producer_epoch=NO_PRODUCER_EPOCH,
                                       next_producer_id=NO_PRODUCER_ID)
        if self._install(done) is not E.NONE:
            # Markers are all written; the periodic task writes Complete* again.
            self.txns[txn_id] = txn.with_partitions(frozenset())
            return
        log.info("transaction completed", transactional_id=txn_id, producer_id=txn.producer_id,
                 epoch=txn.producer_epoch, committed=committed, partitions=len(txn.partitions))
        await self.store.wait_durable(txn_id, self.timeout_ms)

    def _install(self, txn: TxnMetadata) -> ErrorCode:
        """Append ``txn`` to the local log and, if that worked, make it current."""
        error = self.store.append(txn.transactional_id, [txn_record(txn.transactional_id, txn)])
        if error is E.NONE:
            self.txns[txn.transactional_id] = txn
        return error

    async def _install_durably(self, txn: TxnMetadata) -> ErrorCode:
        """``_install``, then wait until the in-sync replicas have it."""
        error = self._install(txn)
        if error is not E.NONE:
            return error
        return await self.store.wait_durable(txn.transactional_id, self.timeout_ms)

    # -- TxnOffsetCommit ---------------------------------------------------------------

    async def txn_offset_commit(self, txn_id: str, group_id: str, producer_id: int, epoch: int,
                                generation_id: int, member_id: str,
                                group_instance_id: str | None,
                                commits: list[PartitionCommit]) -> list[ErrorCode]:
        """Stage offsets in the open transaction; one error per entry of ``commits``.

        This is the group coordinator's request (the caller checked that this
        broker coordinates the group). When this broker also coordinates the
        transactional id, the producer must be the id's current one
        (INVALID_PRODUCER_ID_MAPPING / INVALID_PRODUCER_EPOCH) and must have
        added the group with AddOffsetsToTxn (INVALID_TXN_STATE); otherwise, as
        in Kafka, the producer epoch is checked by the log append.
        """
        tp = self.offsets_partition(group_id)
        if tp is None or self.groups is None:
            return [E.COORDINATOR_NOT_AVAILABLE] * len(commits)
        if self.owns(txn_id):
            txn = self._current(txn_id, producer_id, epoch)
            if txn is E.PRODUCER_FENCED:
                txn = E.INVALID_PRODUCER_EPOCH
            if isinstance(txn, ErrorCode):
                return [txn] * len(commits)
            if txn.state is not S.ONGOING or tp not in txn.partitions:
                return [E.INVALID_TXN_STATE] * len(commits)
        return await self.groups.txn_offset_commit(group_id, producer_id, epoch, generation_id,
                                                   member_id, group_instance_id, commits)
