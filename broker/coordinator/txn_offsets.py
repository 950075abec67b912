"""Transactional offset commits (TxnOffsetCommit / sendOffsetsToTransaction).

Theory of operation: as in Kafka, the offsets are written to the group's
``__consumer_offsets`` partition at once, as a *transactional* batch under
the producer's id and epoch (AddOffsetsToTxn put that partition into the
transaction), and held here as pending, invisible to OffsetFetch. When the
transaction ends, its marker lands on that partition like on any other;
on COMMIT the pending offsets are handed to the group coordinator
(``OffsetManager.apply_transactional``), on ABORT they are dropped.

The marker is what completes them, on the broker that leads the group's
partition (``complete``, called where the marker is appended: in process,
or by the WriteTxnMarkers handler in cluster mode), since the transaction
coordinator may be another broker.

Replay when the group coordinator loads a partition: its own replay skips
transactional batches; ``replay_partition`` here reads them, keeps each
producer's offsets until its marker, and applies committed ones. Precedence
is by position in the log: a committed transaction's offsets take effect at
its COMMIT marker, and a plain commit of the same partition written after
that marker wins (Kafka compares the offsets' batch positions instead; the
two differ only for a plain commit landing between a transaction's
TxnOffsetCommit and its marker). Transactions still open at the end of the
log stay pending until the coordinator ends them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from broker.coordinator import records as grec
from broker.coordinator.group import Group, GroupState
from broker.coordinator.offsets import OffsetManager, PartitionCommit
from broker.coordinator.offsets_store import offset_record
from broker.coordinator_store import CoordinatorStore
from config import BrokerConfig
from protocol import control
from protocol import records as batches
from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from replication.internal_topics import OFFSETS_TOPIC
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

E = ErrorCode

# producer id -> group -> partition -> offset
Pending = dict[int, dict[str, dict[TopicPartition, grec.OffsetCommitValue]]]


class Groups(Protocol):
    """What transactional offsets read of the group coordinator
    (``broker.coordinator.coordinator``): its settings, groups and offsets."""

    config: BrokerConfig
    groups: dict[str, Group]
    offsets: OffsetManager


class TxnOffsets:
    def __init__(self, store: CoordinatorStore, groups: Groups,
                 wall_clock: Callable[[], int]) -> None:
        self.store = store
        self.groups = groups
        self.wall_clock = wall_clock
        self.pending: Pending = {}

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return OFFSETS_TOPIC, self.store.partition_of(group_id)

    def validate_member(self, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None) -> ErrorCode:
        """Kafka's GroupCoordinator.doTxnCommitOffsets checks (TxnOffsetCommit v3+)."""
        group = self.groups.groups.get(group_id)
        if group is None:
            return E.ILLEGAL_GENERATION if generation_id >= 0 else E.NONE
        if group.is_in(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is not E.NONE:
                return error
        if generation_id >= 0 and generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def stage(self, group_id: str, producer_id: int, producer_epoch: int,
              commits: list[PartitionCommit]) -> list[ErrorCode]:
        """Write the offsets as a transactional batch and hold them until the marker.

        Returns:
            One error code per entry of ``commits``.
        """
        now = self.wall_clock()
        max_metadata = self.groups.config["offset.metadata.max.bytes"]
        results: list[ErrorCode] = []
        accepted: dict[TopicPartition, grec.OffsetCommitValue] = {}
        for c in commits:
            if c.metadata is not None and len(c.metadata.encode("utf-8")) > max_metadata:
                results.append(E.OFFSET_METADATA_TOO_LARGE)
                continue
            accepted[(c.topic, c.partition)] = grec.OffsetCommitValue(
                c.offset, c.leader_epoch, c.metadata or "", now)
            results.append(E.NONE)
        if not accepted:
            return results
        batch = batches.build_batch(
            [offset_record(group_id, tp, v) for tp, v in accepted.items()], timestamp=now,
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
            attributes=batches.ATTR_TRANSACTIONAL)
        error = self.store.append_batch(group_id, batch, AppendOrigin.COORDINATOR)
        if error is not E.NONE:
            log.warning("transactional offset commit not written", group=group_id,
                        producer_id=producer_id, error=error.name)
            return [error if r is E.NONE else r for r in results]
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(accepted)
        return results

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self.pending.values())

    def complete(self, producer_id: int, committed: bool, partition: int) -> None:
        """The producer's marker landed on ``partition`` of __consumer_offsets:
        apply (COMMIT) or drop (ABORT) its offsets for the groups living there."""
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.store.partition_of(g) == partition]:
            offsets = by_group.pop(group_id)
            if committed:
                self.groups.offsets.apply_transactional(group_id, offsets)
                log.info("transactional offsets committed", group=group_id,
                         producer_id=producer_id, partitions=len(offsets))
        if not by_group:
            del self.pending[producer_id]

    def unload(self, partition: int) -> None:
        """Forget the pending offsets of groups living in ``partition``."""
        for producer_id, by_group in list(self.pending.items()):
            for group_id in [g for g in by_group if self.store.partition_of(g) == partition]:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]

    # -- replay ------------------------------------------------------------------

    def replay_partition(self, partition: int) -> None:
        """Rebuild pending and committed transactional offsets of one partition."""
        # Only transactional batches carry a producer id in this topic.
        if not self.store.topic.has_producers(partition):
            return
        applied = self._replay_partition((OFFSETS_TOPIC, partition))
        if applied or self.pending:
            log.info("transactional offsets loaded", partition=partition, committed=applied,
                     pending_producers=len(self.pending))

    def _replay_partition(self, tp: TopicPartition) -> int:
        pending: Pending = {}
        # (group, partition) -> (log position, value) of the latest write
        latest: dict[tuple[str, TopicPartition], tuple[int, grec.OffsetCommitValue | None]] = {}
        txn_keys: set[tuple[str, TopicPartition]] = set()
        for header, data in self.store.topic.replay(tp[1]):
            if header.is_control:
                self._replay_marker(header, data, pending, latest, txn_keys)
                continue
            for group_id, key, value in _offset_records(header, data):
                if header.is_transactional:
                    if value is not None:
                        pending.setdefault(header.producer_id, {}).setdefault(group_id, {})[key] = value
                else:
                    latest[(group_id, key)] = (header.base_offset, value)
        for pid, by_group in pending.items():
            for group_id, offsets in by_group.items():
                self.pending.setdefault(pid, {}).setdefault(group_id, {}).update(offsets)
        committed: dict[str, dict[TopicPartition, grec.OffsetCommitValue]] = {}
        for (group_id, key) in txn_keys:
            value = latest[(group_id, key)][1]
            if value is not None:
                committed.setdefault(group_id, {})[key] = value
        for group_id, offsets in committed.items():
            self.groups.offsets.apply_transactional(group_id, offsets)
        return sum(len(o) for o in committed.values())

    @staticmethod
    def _replay_marker(header: batches.BatchHeader, data: bytes, pending: Pending,
                       latest: dict[tuple[str, TopicPartition],
                                    tuple[int, grec.OffsetCommitValue | None]],
                       txn_keys: set[tuple[str, TopicPartition]]) -> None:
        try:
            marker = control.read_marker(data, header)
        except KafkaApiError as exc:
            log.warning("skipping unreadable marker", offset=header.base_offset, error=exc.message)
            return
        by_group = pending.pop(header.producer_id, {}) if marker is not None else {}
        if marker is None or not marker.committed:
            return
        for group_id, offsets in by_group.items():
            for key, value in offsets.items():
                latest[(group_id, key)] = (header.base_offset, value)
                txn_keys.add((group_id, key))


def _offset_records(header: batches.BatchHeader, data: bytes
                    ) -> list[tuple[str, TopicPartition, grec.OffsetCommitValue | None]]:
    """The offset commit records of a batch (group metadata records are skipped)."""
    out: list[tuple[str, TopicPartition, grec.OffsetCommitValue | None]] = []
    try:
        decoded = batches.decode_records(data, header)
    except KafkaApiError as exc:
        log.warning("skipping undecodable offsets batch", offset=header.base_offset,
                    error=exc.message)
        return out
    for r in decoded:
        if r.key is None:
            continue
        try:
            key = grec.decode_key(r.key)
            if not isinstance(key, grec.OffsetCommitKey):
                continue
            value = None if r.value is None else grec.decode_offset_commit_value(r.value)
        except grec.RecordFormatError as exc:
            log.warning("skipping unreadable offsets record", offset=header.base_offset,
                        error=str(exc))
            continue
        out.append((key.group, (key.topic, key.partition), value))
    return out
