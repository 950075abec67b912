"""The ``__remote_log_metadata`` topic as the remote log metadata manager sees it.

Adapts tierd's ReplicaManager and Log to storage.remote.rlmm.MetadataLog:
records are appended as single-record batches with a null key, read back
up to the high watermark (committed), and the topic is created on first use
as an internal topic with cleanup.policy=delete, tiering off and
rlmm.config.remote.log.metadata.topic.retention.ms (default -1).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from protocol import records
from replication.replica_manager import ReplicaManager
from storage.remote.rlmm import TOPIC_NAME


class ReplicaMetadataLog:
    def __init__(self, replicas: ReplicaManager, retention_ms: int) -> None:
        self.replicas = replicas
        self.retention_ms = retention_ms

    async def ensure_topic(self, num_partitions: int) -> int:
        info = self.replicas.store.get(TOPIC_NAME)
        if info is None:
            info = await self.replicas.create_topic(
                TOPIC_NAME, num_partitions,
                {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)},
                internal=True)
        return info.partitions

    async def append(self, partition: int, record: bytes) -> int:
        batch = bytearray(records.build_batch([(None, record)],
                                              timestamp=int(time.time() * 1000)))
        return self.replicas.append((TOPIC_NAME, partition), batch).first_offset

    async def read(self, partition: int, from_offset: int,
                   max_bytes: int) -> Sequence[tuple[int, bytes]]:
        part = self.replicas.partition((TOPIC_NAME, partition))
        lg = part.log
        start = max(from_offset, lg.log_start_offset)
        got = lg.read(start, max_bytes, part.high_watermark, min_one_batch=True)
        out: list[tuple[int, bytes]] = []
        for header in records.iter_headers(got.data):
            for rec in records.decode_records(got.data, header):
                if rec.offset >= from_offset and rec.value is not None:
                    out.append((rec.offset, rec.value))
        return out

    def end_offset(self, partition: int) -> int:
        return self.replicas.partition((TOPIC_NAME, partition)).high_watermark
