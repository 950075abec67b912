"""The controller's part in deleting a tiered topic's remote data (KIP-405).

Theory of operation
-------------------
A deleted topic's remote segments are shared by all its replicas, so no
replica may remove them on its own (three replicas would race, and a replica
moved away by a reassignment must leave them). As in KIP-405, the controller
publishes DELETE_PARTITION_MARKED for every partition of a deleted topic
whose remote.storage.enable is true, once; the broker leading the metadata
partition that holds a marker removes the objects and writes
DELETE_PARTITION_STARTED and DELETE_PARTITION_FINISHED
(``storage.remote.remover``); replicas only drop their local copy.

A topic leaves /admin/delete_topics only once all its markers are written:
a controller that dies before that leaves the topic there, and the next
controller marks again (marking a marked partition writes nothing). So no
deleted tiered topic leaves its remote data behind unmarked, and a marker
names the topic id: a topic re-created with the same name is another id,
and its data is never touched.

Error handling: a marker that cannot be written (the metadata manager not
started yet, its partition without a leader) keeps the topic for the next
attempt; the caller retries after ``RETRY_S``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import structlog

from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

# How soon the controller tries again to mark the partitions of a deleted
# tiered topic whose markers could not all be written.
RETRY_S = 1.0
REMOTE_STORAGE_ENABLE = "remote.storage.enable"

# Writes DELETE_PARTITION_MARKED for each partition (see the module doc).
MarkDeleted = Callable[[list[TopicIdPartition]], Awaitable[None]]


async def mark_deleted_topic(mark: MarkDeleted | None, topic: str, topic_id: object,
                             partitions: int, config: dict[str, str]) -> bool:
    """Mark a deleted topic's partitions for remote deletion if it is tiered.

    Args:
        mark: the metadata manager's marking, None on a broker without tiering.
        topic_id: as the controller read it from ZooKeeper (None: unknown).
        config: the topic's configuration overrides (from ZooKeeper).

    Returns:
        Whether the topic may leave /admin/delete_topics now.
    """
    if (config.get(REMOTE_STORAGE_ENABLE, "false").lower() != "true"
            or not isinstance(topic_id, uuid.UUID)):
        return True
    if mark is None:
        log.error("deleting a tiered topic on a controller without tiered storage: its "
                  "remote data is not removed", topic=topic)
        return True
    try:
        await mark([TopicIdPartition(topic_id, topic, i) for i in range(partitions)])
    except Exception as exc:  # retriable: the manager is starting, a leader moved
        log.warning("cannot mark a deleted topic's remote data yet; retrying", topic=topic,
                    error=repr(exc))
        return False
    log.info("deleted topic marked for remote deletion", topic=topic, partitions=partitions)
    return True
