"""The ``__remote_log_metadata`` topic as the remote log metadata manager sees it.

Adapts an ``InternalTopic`` to storage.remote.rlmm.MetadataLog: records are
appended as single-record batches with a null key and read back up to the
high watermark (committed). The topic (cleanup.policy=delete, tiering off,
retention rlmm.config.remote.log.metadata.topic.retention.ms, default -1)
is created on first use.
"""

from __future__ import annotations

from collections.abc import Sequence

from replication.internal_topics import InternalTopic


class ReplicaMetadataLog:
    def __init__(self, topic: InternalTopic) -> None:
        self.topic = topic

    async def ensure_topic(self, num_partitions: int) -> int:
        self.topic.configured_partitions = num_partitions
        return await self.topic.ensure()

    async def append(self, partition: int, record: bytes) -> int:
        return self.topic.append_records(partition, [(None, record)]).first_offset

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[tuple[int, bytes]]:
        return self.topic.read_values(partition, from_offset, max_bytes)

    def end_offset(self, partition: int) -> int:
        return self.topic.end_offset(partition)
