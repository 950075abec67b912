"""DescribeTiering (tierd's own API, ``protocol.tierd_apis``): the local view
of every hosted partition's data placement, from
``replication.tiering_status``. Partitions named but not hosted here answer
UNKNOWN_TOPIC_OR_PARTITION (another broker hosts them, or none does)."""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.tierd_apis import DescribeTieringRequest, DescribeTieringResponse
from replication import tiering_status
from replication.tiering_status import PartitionTiering


async def handle_describe_tiering(ctx: BrokerContext, header: RequestHeader,
                                  req: Any, session: Session) -> Any:
    resp = DescribeTieringResponse[header.api_version]
    topic_cls = resp.TopicResult
    part_cls = topic_cls.PartitionResult
    wanted: set[tuple[str, int]] | None = None
    named_topics: set[str] = set()
    if req.topics is not None:
        wanted = set()
        for t in req.topics:
            hosted = [p.index for p in ctx.replicas.hosted() if p.topic == t.name]
            indexes = list(t.partition_indexes) or hosted
            named_topics.add(t.name)
            wanted.update((t.name, p) for p in indexes)
    follower_info = ctx.cluster.fetchers.describe if ctx.cluster is not None else None
    rows = tiering_status.describe(ctx.replicas, wanted, follower_info)
    topics = [topic_cls(name=name, topic_id=parts[0].topic_id,
                        partitions=[_partition(part_cls, r) for r in parts])
              for name, parts in tiering_status.by_topic(rows).items()]
    found = {(r.topic, r.partition) for r in rows}
    missing: dict[str, list[Any]] = {}
    for name, index in sorted((wanted or set()) - found):
        ctx.metrics.error("DescribeTiering", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        missing.setdefault(name, []).append(_unknown(part_cls, index))
    for name in sorted(named_topics - {n for n, _ in found} - set(missing)):
        ctx.metrics.error("DescribeTiering", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        missing.setdefault(name, []).append(_unknown(part_cls, -1))
    topics += [topic_cls(name=name, topic_id=None, partitions=parts)
               for name, parts in missing.items()]
    return resp(throttle_time_ms=0, error_code=0, node_id=ctx.node_id, topics=topics)


def _partition(cls: Any, r: PartitionTiering) -> Any:
    return cls(partition_index=r.partition, error_code=0, role=r.role, leader_id=r.leader_id,
               leader_epoch=r.leader_epoch, remote_storage_enabled=r.remote_storage_enabled,
               log_start_offset=r.log_start_offset,
               local_log_start_offset=r.local_log_start_offset,
               highest_tiered_offset=r.highest_tiered_offset, high_watermark=r.high_watermark,
               log_end_offset=r.log_end_offset, local_bytes=r.local_bytes,
               local_segments=r.local_segments, copy_lag_bytes=r.copy_lag_bytes,
               copy_lag_segments=r.copy_lag_segments, remote_bytes=r.remote_bytes,
               remote_segments=r.remote_segments, follower_state=r.follower_state,
               aux_state_failures=r.aux_state_failures, aux_state_error=r.aux_state_error,
               metadata_rebuilding=r.metadata_rebuilding)


def _unknown(cls: Any, index: int) -> Any:
    return cls(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
               role="", leader_id=-1, leader_epoch=-1, remote_storage_enabled=False,
               log_start_offset=-1, local_log_start_offset=-1, highest_tiered_offset=-1,
               high_watermark=-1, log_end_offset=-1, local_bytes=-1, local_segments=-1,
               copy_lag_bytes=-1, copy_lag_segments=-1, remote_bytes=-1, remote_segments=-1,
               follower_state=None, aux_state_failures=0, aux_state_error=None,
               metadata_rebuilding=False)


HANDLERS = {DescribeTieringRequest.API_KEY: handle_describe_tiering}
