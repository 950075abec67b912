"""Deleting all of a partition's remote data: a deleted tiered topic, or
tiering turned off with remote.log.delete.on.disable=true (KIP-950).

Theory of operation
-------------------
A removal is recorded with KIP-405's partition delete states in the remote
log metadata, which is durable and replayed at start::

    DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> (every segment deleted)
                            -> DELETE_PARTITION_FINISHED

MARKED is written before anything is deleted, so after a crash the metadata
still says the removal is owed; FINISHED makes the metadata manager forget
the partition's segments, so a later re-enable of tiering starts from an
empty tier. A failed delete leaves the job queued; the next run retries it.

A job stays queued, and the partition counts as *pending*, until FINISHED is
written. While it is pending, the remote log manager must not copy for that
partition (``is_pending``): the removal deletes every segment it lists, and a
segment copied after a re-enable would be deleted with the old ones after
local retention already dropped its local copy.

Three kinds of job:

- a deleted topic in a cluster (``OWNED_DELETION``): the controller wrote
  MARKED once for each partition of the topic; the broker leading the
  metadata partition that holds the marker adopts the job (``adopt``, from
  ``owned_deletions``) and writes STARTED and FINISHED. A job whose marker
  is gone (FINISHED by a former leader) writes nothing; one whose
  metadata partition this broker no longer leads is dropped (the new leader
  adopts it). Replicas only drop their local copy;
- a deleted topic on a single node: always goes through the three states, then
  ``on_topic_partition_removed`` lets the broker clear its own record of the
  owed cleanup;
- tiering disabled: the same, but only if the partition has remote data or
  a removal already marked (a broker resuming at start every partition whose
  tiering is off writes nothing for those with an empty tier).

Concurrency: everything runs on the trio thread; ``run_once`` is called by
the remote log manager's loop between tiering cycles, never concurrently.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import structlog

from storage.remote.copier import delete_remote_segment
from storage.remote.metadata_cache import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.partition_state import RemoteServices
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

_P = RemotePartitionDeleteState
# Delete states in which a removal is owed but not finished.
_UNFINISHED = frozenset({_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED})


class Removal(enum.Enum):
    """Why a partition's remote data goes (a deleted topic outranks a disable)."""

    TIERING_DISABLED = 1
    TOPIC_DELETED = 2
    OWNED_DELETION = 3


class PartitionRemover:
    """The queue of partitions whose remote data must be deleted.

    Args:
        svc: the remote services (metadata manager, storage manager, pools).
        on_topic_partition_removed: awaited once a deleted topic's partition
            is gone from the tier.
    """

    def __init__(self, svc: RemoteServices,
                 on_topic_partition_removed: Callable[[TopicIdPartition], Awaitable[None]]
                 ) -> None:
        self.svc = svc
        self._on_removed = on_topic_partition_removed
        self._jobs: dict[TopicIdPartition, Removal] = {}

    def add(self, tip: TopicIdPartition, why: Removal) -> None:
        """Queue ``tip``'s removal (idempotent; a topic deletion wins over a disable)."""
        current = self._jobs.get(tip)
        if current is None or why.value > current.value:
            self._jobs[tip] = why

    def adopt(self, owned: list[TopicIdPartition]) -> tuple[list[TopicIdPartition],
                                                          list[TopicIdPartition]]:
        """Make the owned deletions (``owned``: marked, topic gone) this
        broker's jobs, and drop the adopted jobs not owned any more.

        Returns:
            (adopted now, dropped).
        """
        wanted = set(owned)
        dropped = [tip for tip, why in self._jobs.items()
                   if why is Removal.OWNED_DELETION and tip not in wanted]
        for tip in dropped:
            del self._jobs[tip]
        adopted = [tip for tip in owned if tip not in self._jobs]
        for tip in adopted:
            self._jobs[tip] = Removal.OWNED_DELETION
        return adopted, dropped

    def is_pending(self, tip: TopicIdPartition) -> bool:
        """Whether a removal of ``tip`` is queued or recorded and not finished.

        Raises:
            MetadataNotReady: the metadata of ``tip`` is not caught up.
        """
        return tip in self._jobs or self.svc.rlmm.partition_delete_state(tip) in _UNFINISHED

    async def run_once(self) -> list[TopicIdPartition]:
        """Try every queued removal once; returns the partitions now removed.

        Failures are logged and stay queued for the next run.
        """
        done = []
        for tip, why in list(self._jobs.items()):
            try:
                await self._remove(tip, why)
            except Exception as exc:
                log.warning("remote partition removal failed; will retry", partition=str(tip),
                            reason=why.name, error=str(exc))
                continue
            if self._jobs.get(tip) is why:
                del self._jobs[tip]
                done.append(tip)
        return done

    async def _remove(self, tip: TopicIdPartition, why: Removal) -> None:
        rlmm = self.svc.rlmm
        await rlmm.ensure_ready(tip)
        state = rlmm.partition_delete_state(tip)
        if why is Removal.OWNED_DELETION and state is None:
            return  # finished by the metadata partition's former leader
        if (why is Removal.TIERING_DISABLED and state is None
                and not rlmm.list_remote_log_segments(tip)):
            return
        if state is None:
            await self._record(tip, _P.DELETE_PARTITION_MARKED)
        if state is not _P.DELETE_PARTITION_STARTED:
            await self._record(tip, _P.DELETE_PARTITION_STARTED)
        deleted = 0
        for md in list(rlmm.list_remote_log_segments(tip)):
            await delete_remote_segment(self.svc, md)
            deleted += 1
        await self._record(tip, _P.DELETE_PARTITION_FINISHED)
        if why is Removal.TOPIC_DELETED:
            await self._on_removed(tip)
        log.info("remote partition deleted", partition=str(tip), reason=why.name,
                 segments=deleted)

    async def _record(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        await self.svc.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, self.svc.clock(), self.svc.node_id))
