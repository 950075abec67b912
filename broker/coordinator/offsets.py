"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention.

Commits are validated as Kafka's GroupCoordinator validates them, written
to the group's ``__consumer_offsets`` partition, and only then made visible
in the group's cache (so OffsetFetch never returns an offset the log lacks).

Retention (offsets.retention.minutes, checked every
offsets.retention.check.interval.ms), Kafka's rules:

* a group with a protocol type that is Empty: offsets expire once the group
  has been empty for the retention time;
* a Stable consumer group: offsets of topics no member subscribes to expire
  by their commit time;
* a group that only stores offsets (no protocol type, e.g. assign() users):
  each offset expires by its commit time;
* a commit that carried an explicit retention (OffsetCommit v2-v4) expires
  at the time it named;
* a KIP-848 consumer group with members: offsets of topics no member
  subscribes to expire by their commit time (its offsets live in a classic
  ``Group`` with no members, which stays as long as the consumer group has
  members).

An Empty group left without offsets becomes Dead and its metadata gets a
tombstone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog
import trio

from broker.coordinator.group import CONSUMER_PROTOCOL_TYPE, Group, GroupState
from broker.coordinator.offsets_store import group_tombstone, offset_record
from broker.coordinator.records import NO_TIMESTAMP, OffsetCommitValue
from broker.coordinator_store import CoordinatorStore
from config import BrokerConfig
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition

log = structlog.get_logger(__name__)

LONG_MAX = 2**63 - 1
# Strings in __consumer_offsets records have an int16 length, whatever
# offset.metadata.max.bytes says.
MAX_RECORD_STRING_BYTES = 2**15 - 1

S = GroupState
E = ErrorCode


@dataclass(slots=True)
class PartitionCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


class OffsetManager:
    def __init__(self, config: BrokerConfig, groups: dict[str, Group], store: CoordinatorStore,
                 wall_clock: Callable[[], int],
                 consumer_topics: Callable[[str], set[str] | None] = lambda group_id: None,
                 after_expiry: Callable[[], None] = lambda: None) -> None:
        """Args:
            consumer_topics: the topics a KIP-848 consumer group with members
                subscribes to; None if there is no such group of that id.
            after_expiry: called after each expiry pass (the coordinator drops
                empty consumer groups whose offsets are gone).
        """
        self.config = config
        self.groups = groups
        self.store = store
        self.wall_clock = wall_clock
        self.consumer_topics = consumer_topics
        self.after_expiry = after_expiry

    # -- OffsetCommit ----------------------------------------------------------

    def commit(self, group_id: str | None, generation_id: int, member_id: str,
               group_instance_id: str | None, retention_ms: int,
               commits: list[PartitionCommit]) -> list[ErrorCode]:
        """Commit offsets; one error code per entry of ``commits``.

        ``generation_id`` -1 with an empty ``member_id`` is a commit from
        outside group management (assign() users, admin tools), allowed
        while the group has no members.
        """
        if group_id is None:  # null in a non-nullable field
            return [E.INVALID_GROUP_ID] * len(commits)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return [E.ILLEGAL_GENERATION] * len(commits)
            group = self.groups[group_id] = Group(group_id, S.EMPTY, self.wall_clock())
        error = self._validate(group, generation_id, member_id, group_instance_id)
        if error is not E.NONE:
            return [error] * len(commits)
        member = group.members.get(member_id)
        if member is not None:
            member.touch(trio.current_time())
        now = self.wall_clock()
        # Kafka adds in wrapping long arithmetic, so Long.MAX ("forever") would wrap
        # negative and expire at the next check; we clamp to the largest timestamp.
        expire = min(now + retention_ms, LONG_MAX) if retention_ms >= 0 else NO_TIMESTAMP
        max_metadata = min(self.config["offset.metadata.max.bytes"], MAX_RECORD_STRING_BYTES)
        results: list[ErrorCode] = []
        accepted: dict[TopicPartition, OffsetCommitValue] = {}
        for c in commits:
            if c.metadata is not None and len(c.metadata.encode("utf-8")) > max_metadata:
                results.append(E.OFFSET_METADATA_TOO_LARGE)
                continue
            accepted[(c.topic, c.partition)] = OffsetCommitValue(
                c.offset, c.leader_epoch, c.metadata or "", now, expire)
            results.append(E.NONE)
        error = self.store.append(group_id, [offset_record(group_id, tp, v)
                                             for tp, v in accepted.items()])
        if error is not E.NONE:
            return [error if r is E.NONE else r for r in results]
        group.offsets.update(accepted)
        return results

    def _validate(self, group: Group, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is not E.NONE:
                return error
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.COMPLETING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def apply_transactional(self, group_id: str,
                            offsets: dict[TopicPartition, OffsetCommitValue]) -> None:
        """Make a committed transaction's offsets visible (TxnOffsetCommit, KIP-98).

        Their records and COMMIT marker are already in __consumer_offsets
        (written by ``broker.transactions``), so nothing is appended here.
        """
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, S.EMPTY, self.wall_clock())
        group.offsets.update(offsets)

    # -- OffsetFetch -----------------------------------------------------------

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None
              ) -> list[tuple[TopicPartition, OffsetCommitValue | None]]:
        """Committed offsets of ``partitions`` (None: every partition with one)."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_in(S.DEAD) else {}
        if partitions is None:
            return sorted(offsets.items())
        return [(tp, offsets.get(tp)) for tp in partitions]

    # -- OffsetDelete ----------------------------------------------------------

    def delete(self, group_id: str, partitions: list[TopicPartition]
               ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Delete committed offsets; the group-level error and one per partition."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, []
        subscribed = self.consumer_topics(group_id) or set()
        if not group.is_in(S.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return E.NON_EMPTY_GROUP, []
            subscribed = group.subscribed_topics() or set()
        errors = [E.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else E.NONE
                  for tp in partitions]
        doomed = [tp for tp, err in zip(partitions, errors, strict=True)
                  if err is E.NONE and tp in group.offsets]
        error = self.store.append(group_id, [offset_record(group_id, tp, None) for tp in doomed])
        if error is not E.NONE:
            return error, []
        for tp in doomed:
            del group.offsets[tp]
        return E.NONE, errors

    def delete_group(self, group: Group) -> ErrorCode:
        """Tombstone an Empty group and its offsets (DeleteGroups), then forget it."""
        records = [offset_record(group.group_id, tp, None) for tp in group.offsets]
        records.append(group_tombstone(group.group_id))
        error = self.store.append(group.group_id, records)
        if error is E.NONE:
            group.transition(S.DEAD, self.wall_clock())
            group.offsets.clear()
            del self.groups[group.group_id]
        return error

    # -- retention -------------------------------------------------------------

    async def run_expiry(self) -> None:
        """Every offsets.retention.check.interval.ms, drop expired offsets and groups."""
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval)
            try:
                self.expire()
                self.after_expiry()
            except Exception:
                log.exception("offset expiry failed")

    def expire(self) -> None:
        now = self.wall_clock()
        retention = self.config["offsets.retention.minutes"] * 60_000
        for group in list(self.groups.values()):
            subscribed = self.consumer_topics(group.group_id)
            if subscribed is None:
                expired = _expired(group, now, retention)
            else:
                expired = _older_than(group, now, retention, subscribed,
                                      lambda v: v.commit_timestamp)
            records = [offset_record(group.group_id, tp, None) for tp in expired]
            for tp in expired:
                del group.offsets[tp]
            dead = (group.is_in(S.EMPTY) and not group.offsets and not group.pending_members
                    and subscribed is None)
            if dead:
                group.transition(S.DEAD, now)
                del self.groups[group.group_id]
                records.append(group_tombstone(group.group_id))
            if expired or dead:
                log.info("expired group offsets", group=group.group_id, offsets=len(expired),
                         group_removed=dead)
            # As in Kafka the cache is cleaned even if the tombstones fail to land.
            self.store.append(group.group_id, records)


def _expired(group: Group, now: int, retention_ms: int) -> list[TopicPartition]:
    """The offsets Kafka's GroupMetadata.removeExpiredOffsets would drop."""
    if group.protocol_type is not None and group.is_in(S.EMPTY):
        empty_since = group.state_timestamp_ms
        return _older_than(group, now, retention_ms, set(),
                           lambda v: empty_since if empty_since >= 0 else v.commit_timestamp)
    if group.protocol_type is None:
        return _older_than(group, now, retention_ms, set(), lambda v: v.commit_timestamp)
    subscribed = group.subscribed_topics() if group.is_in(S.STABLE) else None
    if group.protocol_type == CONSUMER_PROTOCOL_TYPE and subscribed is not None:
        return _older_than(group, now, retention_ms, subscribed, lambda v: v.commit_timestamp)
    return []


def _older_than(group: Group, now: int, retention_ms: int, keep_topics: set[str],
                base: Callable[[OffsetCommitValue], int]) -> list[TopicPartition]:
    out = []
    for tp, v in group.offsets.items():
        if tp[0] in keep_topics:
            continue
        if v.expire_timestamp != NO_TIMESTAMP:
            if now >= v.expire_timestamp:
                out.append(tp)
        elif now - base(v) >= retention_ms:
            out.append(tp)
    return out
