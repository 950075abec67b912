"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, transaction timeouts and transactional-id expiry.

Theory of operation: this broker coordinates every transactional id (all of
``__transaction_state`` is local). Requests run on the event loop; apart from
allocating a new producer id, nothing here awaits, so each request sees and
leaves the state consistent, and Kafka's "pending transition" bookkeeping
(needed there because log appends complete asynchronously) is not needed:
a new ``TxnMetadata`` version is appended to ``__transaction_state`` and
installed only if the append succeeded.

Ending a transaction runs to completion in the request: PrepareCommit /
PrepareAbort is written, the markers are appended to every partition of the
transaction (in process, ``markers.write_markers``), transactional offsets
are handed to the group coordinator on commit, and CompleteCommit /
CompleteAbort is written. A marker that could not be written leaves the
transaction prepared with the partitions still owed a marker; the periodic
task retries them, and until then requests for the id get
CONCURRENT_TRANSACTIONS, as in Kafka. On start, prepared transactions found
in the log get their markers (again).

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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from broker.coordinator import GroupCoordinator
from broker.coordinator.offsets import PartitionCommit
from broker.transactions.log_store import TxnLogStore
from broker.transactions.markers import AppendMarker, write_markers
from broker.transactions.state import (
    EXPIRABLE,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    PREPARED,
    TopicPartition,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)
from broker.transactions.txn_offsets import TxnOffsets
from config import BrokerConfig
from protocol.errors import ErrorCode
from replication.internal_topics import InternalTopic
from storage.log.manager import now_ms

log = structlog.get_logger(__name__)

S = TxnState
E = ErrorCode


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, topic: InternalTopic,
                 groups: GroupCoordinator | None, append_marker: AppendMarker,
                 allocate_producer_id: Callable[[], Awaitable[int]],
                 wall_clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.append_marker = append_marker
        self.wall_clock = wall_clock
        self.allocate_producer_id = allocate_producer_id
        self.log = TxnLogStore(topic, wall_clock)
        self.offsets = (TxnOffsets(groups.store.topic, groups, wall_clock)
                        if groups is not None else None)
        self.txns: dict[str, TxnMetadata] = {}
        self.loaded = False

    # -- lifecycle ---------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Create/load ``__transaction_state``, finish prepared transactions, run timers.

        Start after the group coordinator has loaded (transactional offsets
        are replayed into it).
        """
        await self.log.ensure_topic()
        self.txns = self.log.load()
        if self.offsets is not None:
            self.offsets.replay()
        self.retry_markers()
        self.loaded = True
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._every,
                               "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                               self.abort_timed_out)
            nursery.start_soon(self._every,
                               "transaction.remove.expired.transaction.cleanup.interval.ms",
                               self.expire_transactional_ids)

    async def _every(self, interval_key: str, task: Callable[[], None]) -> None:
        interval = max(int(self.config[interval_key]), 1) / 1000
        while True:
            await trio.sleep(interval)
            try:
                task()
            except Exception:
                log.exception("transaction coordinator task failed", task=task.__name__)

    def abort_timed_out(self) -> None:
        """Fence and abort Ongoing transactions past their timeout; retry owed markers."""
        self.retry_markers()
        now = self.wall_clock()
        for txn in list(self.txns.values()):
            if txn.state is S.ONGOING and txn.start_timestamp + txn.timeout_ms < now:
                log.info("aborting timed-out transaction", transactional_id=txn.transactional_id,
                         producer_id=txn.producer_id, epoch=txn.producer_epoch,
                         timeout_ms=txn.timeout_ms, age_ms=now - txn.start_timestamp)
                self._fence_and_abort(txn)

    def retry_markers(self) -> None:
        for txn in list(self.txns.values()):
            if txn.state in PREPARED:
                self._send_markers(txn)

    def expire_transactional_ids(self) -> None:
        """Drop ids idle for transactional.id.expiration.ms (tombstone first)."""
        now = self.wall_clock()
        expiration = self.config["transactional.id.expiration.ms"]
        for txn_id, txn in list(self.txns.items()):
            if txn.state not in EXPIRABLE or txn.last_update_timestamp + expiration > now:
                continue
            txn.prepare(S.DEAD)  # checks the move; Dead is never stored, a tombstone is
            if self.log.append(None, txn_id) is E.NONE:
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
        if not self.loaded:
            return InitResult(E.COORDINATOR_LOAD_IN_PROGRESS)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        if txn_id not in self.txns:
            pid = await self.allocate_producer_id()
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
            error = self._fence_and_abort(txn)
            return InitResult(error if error is not E.NONE else E.CONCURRENT_TRANSACTIONS)
        if epoch_exhausted(txn.producer_epoch) and (expected is None
                                                    or expected[1] == txn.producer_epoch):
            pid = await self.allocate_producer_id()
            if self.txns.get(txn_id) is not txn:
                return InitResult(E.CONCURRENT_TRANSACTIONS)
            epoch, last = 0, txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        else:
            pid = txn.producer_id
            bumped = _bump_epoch(txn, None if expected is None else expected[1])
            if bumped is None:
                return InitResult(E.PRODUCER_FENCED)
            epoch, last = bumped
        new = txn.prepare(S.EMPTY, producer_id=pid, producer_epoch=epoch, last_producer_epoch=last,
                          timeout_ms=timeout_ms, partitions=frozenset(), start_timestamp=-1,
                          last_update_timestamp=self.wall_clock())
        error = self._install(new)
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
        if not self.loaded:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        return txn

    def add_partitions(self, txn_id: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition]) -> ErrorCode:
        txn = self._current(txn_id, producer_id, epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state in PREPARED:
            return E.CONCURRENT_TRANSACTIONS
        if txn.state is S.ONGOING and partitions <= txn.partitions:
            return E.NONE
        now = self.wall_clock()
        start = txn.start_timestamp if txn.state is S.ONGOING else now
        return self._install(txn.prepare(S.ONGOING, partitions=txn.partitions | partitions,
                                         start_timestamp=start, last_update_timestamp=now))

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

    def add_offsets(self, txn_id: str, producer_id: int, epoch: int, group_id: str) -> ErrorCode:
        """Add the group's __consumer_offsets partition to the transaction."""
        if self.offsets is None:
            return E.COORDINATOR_NOT_AVAILABLE
        return self.add_partitions(txn_id, producer_id, epoch,
                                   {self.offsets.offsets_partition(group_id)})

    # -- EndTxn --------------------------------------------------------------------

    def end_txn(self, txn_id: str, producer_id: int, epoch: int, committed: bool) -> ErrorCode:
        """Kafka's handleEndTransaction from a client (strict epoch equality)."""
        txn = self._current(txn_id, producer_id, epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state is S.ONGOING:
            return self._end(txn, committed)
        done, prepared = ((S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if committed
                          else (S.COMPLETE_ABORT, S.PREPARE_ABORT))
        if txn.state is done:
            return E.NONE  # a retry of an EndTxn that already completed
        if txn.state is prepared:
            return E.CONCURRENT_TRANSACTIONS
        log.info("EndTxn in wrong state", transactional_id=txn_id, state=txn.state.kafka_name,
                 commit=committed)
        return E.INVALID_TXN_STATE

    def _fence_and_abort(self, txn: TxnMetadata) -> ErrorCode:
        bumped = txn.producer_epoch if txn.producer_epoch >= MAX_PRODUCER_EPOCH \
            else txn.producer_epoch + 1
        fenced = txn.prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=bumped,
                             last_producer_epoch=NO_PRODUCER_EPOCH)
        return self._end(fenced, committed=False)

    def _end(self, txn: TxnMetadata, committed: bool) -> ErrorCode:
        prepared = txn.prepare(S.PREPARE_COMMIT if committed else S.PREPARE_ABORT,
                               last_update_timestamp=self.wall_clock())
        error = self._install(prepared)
        if error is E.NONE:
            self._send_markers(prepared)
        return error

    def _send_markers(self, txn: TxnMetadata) -> None:
        """Write the markers still owed; once all landed, complete the transaction."""
        committed = txn.state is S.PREPARE_COMMIT
        txn_id = txn.transactional_id
        now = self.wall_clock()
        owed = write_markers(self.append_marker, txn, committed,
                             self.log.coordinator_epoch(txn_id), now)
        if owed:
            self.txns[txn_id] = txn.with_partitions(owed)
            return
        if self.offsets is not None:
            self.offsets.complete(txn.producer_id, committed)
        done = txn.prepare(S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT,
                           partitions=frozenset(), last_update_timestamp=now)
        if self._install(done) is not E.NONE:
            # Markers are all written; the periodic task writes Complete* again.
            self.txns[txn_id] = txn.with_partitions(frozenset())
            return
        log.info("transaction completed", transactional_id=txn_id, producer_id=txn.producer_id,
                 epoch=txn.producer_epoch, committed=committed, partitions=len(txn.partitions))

    def _install(self, txn: TxnMetadata) -> ErrorCode:
        """Append ``txn`` to the log and, if that worked, make it current."""
        error = self.log.append(txn, txn.transactional_id)
        if error is E.NONE:
            self.txns[txn.transactional_id] = txn
        return error

    # -- TxnOffsetCommit and produce verification ----------------------------------

    def offsets_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of ``tp`` for the group (KIP-447)."""
        return self.offsets is not None and self.offsets.has_pending(group_id, tp)

    def txn_offset_commit(self, txn_id: str, group_id: str, producer_id: int, epoch: int,
                          generation_id: int, member_id: str, group_instance_id: str | None,
                          commits: list[PartitionCommit]) -> list[ErrorCode]:
        """Stage offsets in the open transaction; one error per entry of ``commits``.

        The producer must be the id's current one (INVALID_PRODUCER_ID_MAPPING /
        INVALID_PRODUCER_EPOCH, what the log answers Kafka's group coordinator)
        and must have added the group with AddOffsetsToTxn (INVALID_TXN_STATE).
        """
        if self.offsets is None:
            return [E.COORDINATOR_NOT_AVAILABLE] * len(commits)
        txn = self._current(txn_id, producer_id, epoch)
        if txn is E.PRODUCER_FENCED:
            txn = E.INVALID_PRODUCER_EPOCH
        if isinstance(txn, ErrorCode):
            return [txn] * len(commits)
        if txn.state is not S.ONGOING or self.offsets.offsets_partition(group_id) not in txn.partitions:
            return [E.INVALID_TXN_STATE] * len(commits)
        error = self.offsets.validate_member(group_id, generation_id, member_id, group_instance_id)
        if error is not E.NONE:
            return [error] * len(commits)
        return self.offsets.stage(group_id, producer_id, epoch, commits)

    def verify_produce(self, txn_id: str | None, producer_id: int, epoch: int,
                       tp: TopicPartition) -> ErrorCode:
        """May this producer write a transactional batch to ``tp`` now?

        A simplified KIP-890 verification: the partition must be in the id's
        open transaction (INVALID_TXN_STATE otherwise); an old epoch is
        INVALID_PRODUCER_EPOCH, an unknown id or producer id
        INVALID_PRODUCER_ID_MAPPING.
        """
        if not txn_id:
            return E.INVALID_TXN_STATE
        txn = self._current(txn_id, producer_id, epoch)
        if txn is E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state is not S.ONGOING or tp not in txn.partitions:
            return E.INVALID_TXN_STATE
        return E.NONE


def _bump_epoch(txn: TxnMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """Kafka's prepareIncrementProducerEpoch: (new epoch, last epoch), None if fenced."""
    if expected_epoch is None:
        return txn.producer_epoch + 1, NO_PRODUCER_EPOCH
    if txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
        return txn.producer_epoch + 1, txn.producer_epoch
    if expected_epoch == txn.last_producer_epoch:
        return txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump that worked
    return None
