"""DescribeCluster and DescribeLogDirs."""

from __future__ import annotations

import os
import shutil
from typing import Any

from kafka.protocol.admin import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)

from broker.context import BrokerContext, Session
from protocol.api import RequestHeader
from replication import partition_queries


async def handle_describe_cluster(ctx: BrokerContext, header: RequestHeader,
                                  req: Any, session: Session) -> Any:
    resp = DescribeClusterResponse[header.api_version]
    return resp(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
                cluster_id=ctx.cluster_id, controller_id=ctx.metadata.controller_id,
                brokers=[resp.DescribeClusterBroker(broker_id=b.node_id, host=b.host,
                                                    port=b.port, rack=b.rack)
                         for b in ctx.metadata.brokers(session.listener)],
                authorized_operations=None)


async def handle_describe_log_dirs(ctx: BrokerContext, header: RequestHeader,
                                   req: Any, session: Session) -> Any:
    resp = DescribeLogDirsResponse[header.api_version]
    result_cls = resp.DescribeLogDirsResult
    topic_cls = result_cls.DescribeLogDirsTopic
    part_cls = topic_cls.DescribeLogDirsPartition
    wanted: dict[str, set[int] | None] | None = None
    if req.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in req.topics}
    by_topic: dict[str, list[Any]] = {}
    for p in partition_queries.log_dir_partitions(ctx.replicas):
        if wanted is not None and (p.topic not in wanted
                                   or p.partition not in (wanted[p.topic] or ())):
            continue
        by_topic.setdefault(p.topic, []).append(part_cls(
            partition_index=p.partition, partition_size=p.size, offset_lag=p.offset_lag,
            is_future_key=False))
    log_dir = os.path.abspath(ctx.config.log_dir)
    usage = shutil.disk_usage(log_dir)
    return resp(throttle_time_ms=0, error_code=0, results=[result_cls(
        error_code=0, log_dir=log_dir,
        topics=[topic_cls(name=n, partitions=p) for n, p in by_topic.items()],
        total_bytes=usage.total, usable_bytes=usage.free)])


HANDLERS = {
    DescribeClusterRequest.API_KEY: handle_describe_cluster,
    DescribeLogDirsRequest.API_KEY: handle_describe_log_dirs,
}
