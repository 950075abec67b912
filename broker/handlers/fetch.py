"""Fetch: requests in, ``ReplicaManager.fetch`` (local and remote reads, the
delayed-fetch wait; see ``replication.fetch``), responses out.

Fetch sessions (KIP-227): tierd answers every fetch as a full, session-less
fetch (session id 0), which the protocol defines as correct; clients then
keep sending full requests. A request naming a session id we never gave out
gets FETCH_SESSION_ID_NOT_FOUND.

Topic ids (v13+): a request naming an unknown topic id gets UNKNOWN_TOPIC_ID
for those partitions. The replica id comes from the request body up to v14
and from ``replica_state`` from v15 (KIP-903).

A partition refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names
its current leader and the response that leader's endpoint (v16+, KIP-951;
see ``leader_discovery``).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from broker import zero_copy
from broker.context import BrokerContext
from broker.handlers import leader_discovery
from broker.zero_copy import SplicedResponse
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from replication.fetch import CONSUMER_REPLICA_ID, FetchParams, FetchPartition, FetchResult
from storage.log.file_slice import FileSlice

READ_COMMITTED = 1
# Topic-id based fetch starts at v13.
_TOPIC_ID_VERSION = 13
# The replica id moved into replica_state at v15 (KIP-903).
_REPLICA_STATE_VERSION = 15


async def handle_fetch(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
    v = header.api_version
    resp = FetchResponse[v]
    if req.session_id != 0:
        ctx.metrics.error("Fetch", ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        return resp(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                    session_id=0, responses=[])
    wanted, topic_ids = _resolve(ctx, req, v)
    params = FetchParams(wanted, max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes,
                         max_bytes=req.max_bytes,
                         read_committed=req.isolation_level == READ_COMMITTED,
                         replica_id=replica_id(req, v),
                         zero_copy=ctx.config["tierd.fetch.zero.copy"])
    results = await ctx.replicas.fetch(params)
    return _build(ctx, resp, v, params, topic_ids, results)


def replica_id(req: Any, v: int) -> int:
    if v >= _REPLICA_STATE_VERSION:
        state = getattr(req, "replica_state", None)
        return state.replica_id if state is not None else CONSUMER_REPLICA_ID
    return getattr(req, "replica_id", CONSUMER_REPLICA_ID)


def _resolve(ctx: BrokerContext, req: Any, v: int
             ) -> tuple[list[FetchPartition], list[uuid.UUID | None]]:
    wanted: list[FetchPartition] = []
    topic_ids: list[uuid.UUID | None] = []
    for t in req.topics:
        if v >= _TOPIC_ID_VERSION:
            info = ctx.metadata.topic_by_id(t.topic_id)
            name = info.name if info else ""
            err = ErrorCode.NONE if info else ErrorCode.UNKNOWN_TOPIC_ID
            topic_id = t.topic_id
        else:
            name, err, topic_id = t.topic, ErrorCode.NONE, None
        for p in t.partitions:
            wanted.append(FetchPartition(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                         p.current_leader_epoch, err,
                                         getattr(p, "last_fetched_epoch", -1)))
            topic_ids.append(topic_id)
    return wanted, topic_ids


def _build(ctx: BrokerContext, resp: Any, v: int, params: FetchParams,
           topic_ids: list[uuid.UUID | None], results: list[FetchResult]) -> Any:
    """The response; a ``SplicedResponse`` around it when local data comes as
    file slices (sent with sendfile)."""
    spliced = SplicedResponse(None)
    topic_cls = resp.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    aborted_cls = part_cls.AbortedTransaction
    hints = (leader_discovery.LeaderHints(ctx.metadata)
             if v >= leader_discovery.FETCH_VERSION else None)
    by_topic: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for p, topic_id, r in zip(params.partitions, topic_ids, results, strict=True):
        if r.error:
            ctx.metrics.error("Fetch", r.error)
        elif r.records:
            ctx.metrics.child(ctx.metrics.bytes_out, p.topic).inc(len(r.records))
        aborted = None
        if params.read_committed:
            aborted = [aborted_cls(producer_id=t.producer_id, first_offset=t.first_offset)
                       for t in r.aborted or ()]
        extra = {}
        if r.diverging_epoch is not None:
            epoch, end = r.diverging_epoch
            extra["diverging_epoch"] = part_cls.EpochEndOffset(epoch=epoch, end_offset=end)
        if hints is not None and r.error in leader_discovery.FETCH_ERRORS:
            extra["current_leader"] = hints.current_leader((p.topic, p.partition),
                                                           part_cls.LeaderIdAndEpoch)
        data = r.records
        if isinstance(data, FileSlice) or (params.zero_copy
                                           and len(data) >= zero_copy.SEND_APART_BYTES):
            data = spliced.placeholder(data)
        by_topic.setdefault((p.topic, topic_id), []).append(part_cls(
            partition_index=p.partition, error_code=r.error, high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
            aborted_transactions=aborted, preferred_read_replica=-1, records=data,
            **extra))
    topics = [topic_cls(topic=name, topic_id=tid, partitions=parts)
              for (name, tid), parts in by_topic.items()]
    if hints is None:
        response = resp(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    else:
        response = resp(throttle_time_ms=0, error_code=0, session_id=0, responses=topics,
                        node_endpoints=hints.node_endpoints(resp.NodeEndpoint))
    if not spliced.slices:
        return response
    spliced.response = response
    return spliced


HANDLERS = {FetchRequest.API_KEY: handle_fetch}
