"""Fetch: requests in, ``ReplicaManager.fetch`` (local and remote reads, the
delayed-fetch wait; see ``replication.fetch``), responses out.

Fetch sessions (KIP-227, v7+): a full request with epoch 0 opens a session
(when the cache has room), later requests of it are incremental and are
answered with the partitions that changed; see ``replication.fetch_session``
for the cases and the cache's rules. A request naming a session we do not
have gets FETCH_SESSION_ID_NOT_FOUND, one with the wrong epoch
INVALID_FETCH_SESSION_EPOCH, and the client starts over with a full request.

Topic ids (v13+): a request naming an unknown topic id gets UNKNOWN_TOPIC_ID
for those partitions. The replica id comes from the request body up to v14
and from ``replica_state`` from v15 (KIP-903).

A partition refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names
its current leader and the response that leader's endpoint (v16+, KIP-951;
see ``leader_discovery``).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import trio
from kafka.protocol.consumer import FetchRequest, FetchResponse

from broker import zero_copy
from broker.context import BrokerContext, Session
from broker.handlers import leader_discovery
from broker.zero_copy import SplicedResponse
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from protocol.fetch_fields import replica_id
from replication.fetch import FetchParams, FetchPartition, FetchResult
from replication.fetch_session import (
    FINAL_EPOCH,
    FIRST_SESSION_VERSION,
    INITIAL_EPOCH,
    NO_SESSION,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    SessionError,
)
from storage.log.file_slice import FileSlice

READ_COMMITTED = 1
# Topic-id based fetch starts at v13.
_TOPIC_ID_VERSION = 13
# Consumers name their rack from v11 (KIP-392), and may fetch from followers.
_CLIENT_METADATA_VERSION = 11


async def handle_fetch(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = FetchResponse[v]
    wanted, topic_ids = _resolve(ctx, req, v)
    params = FetchParams(wanted, max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes,
                         max_bytes=req.max_bytes,
                         read_committed=req.isolation_level == READ_COMMITTED,
                         replica_id=replica_id(req, v),
                         zero_copy=ctx.config["tierd.fetch.zero.copy"],
                         client_rack=(req.rack_id or "") if v >= _CLIENT_METADATA_VERSION else None)
    sessions = ctx.replicas.fetch_sessions
    session_id, epoch = ((req.session_id, req.session_epoch) if v >= FIRST_SESSION_VERSION
                         else (NO_SESSION, FINAL_EPOCH))
    now = trio.current_time()
    if epoch > INITIAL_EPOCH:
        try:
            incremental = sessions.incremental(session_id, epoch, now)
        except SessionError as exc:
            ctx.metrics.error("Fetch", exc.code)
            return resp(throttle_time_ms=0, error_code=exc.code, session_id=NO_SESSION,
                        responses=[])
        return await _incremental(ctx, resp, v, req, params, topic_ids, incremental,
                                  session.listener)
    if session_id != NO_SESSION:
        sessions.close(session_id)
    fetch_session: FetchSession | None = None
    if epoch == INITIAL_EPOCH:
        fetch_session = sessions.open(params.is_follower, len(wanted), now)
    if fetch_session is not None:
        # Watching before the read: an event from here on is read next time.
        _put(sessions, fetch_session, wanted, topic_ids)
    results = await ctx.replicas.fetch(params)
    if fetch_session is not None:
        for p, r in zip(wanted, results, strict=True):
            cached = fetch_session.partitions.get((p.topic, p.partition))
            if cached is not None:
                cached.must_respond(r.error, bool(r.records), r.high_watermark,
                                    r.last_stable_offset, r.log_start_offset,
                                    r.diverging_epoch is not None, r.preferred_read_replica)
    return _build(ctx, resp, v, params, topic_ids, results,
                  fetch_session.id if fetch_session is not None else NO_SESSION, session.listener)


async def _incremental(ctx: BrokerContext, resp: Any, v: int, req: Any, params: FetchParams,
                       topic_ids: list[uuid.UUID | None], session: FetchSession,
                       listener: str | None) -> Any:
    """An incremental request: the session updated with the request's partitions
    and forgotten topics, then answered with what changed."""
    sessions = ctx.replicas.fetch_sessions
    sessions.forget(session, _forgotten(ctx, req, v, session))
    refused = [(p, tid) for p, tid in zip(params.partitions, topic_ids, strict=True) if p.error]
    _put(sessions, session, params.partitions, topic_ids)
    requested = [(p.topic, p.partition) for p in params.partitions if not p.error]
    answered = await ctx.replicas.fetch_incremental(params, session, requested)
    parts = [p for p, _ in refused] + [p for p, _ in answered]
    ids = [tid for _, tid in refused] + [session.partitions[(p.topic, p.partition)].topic_id
                                         if (p.topic, p.partition) in session.partitions
                                         else None for p, _ in answered]
    results = [FetchResult(p.error) for p, _ in refused] + [r for _, r in answered]
    shown = dataclasses.replace(params, partitions=parts)
    return _build(ctx, resp, v, shown, ids, results, session.id, listener)


def _put(sessions: FetchSessionCache, session: FetchSession, wanted: list[FetchPartition],
         topic_ids: list[uuid.UUID | None]) -> None:
    for p, tid in zip(wanted, topic_ids, strict=True):
        if not p.error:
            sessions.put(session, (p.topic, p.partition), CachedPartition(
                tid, p.offset, p.max_bytes, p.current_leader_epoch, p.last_fetched_epoch))


def _forgotten(ctx: BrokerContext, req: Any, v: int, session: FetchSession
               ) -> list[tuple[str, int]]:
    """The partitions ``forgotten_topics_data`` names (by topic id from v13: a
    topic deleted meanwhile is found by the id the session kept)."""
    out: list[tuple[str, int]] = []
    for t in req.forgotten_topics_data or ():
        if v >= _TOPIC_ID_VERSION:
            info = ctx.metadata.topic_by_id(t.topic_id)
            if info is not None:
                name = info.name
            else:
                name = next((tp[0] for tp, c in session.partitions.items()
                             if c.topic_id == t.topic_id), "")
        else:
            name = t.topic
        out.extend((name, p) for p in t.partitions)
    return out


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
           topic_ids: list[uuid.UUID | None], results: list[FetchResult],
           session_id: int, listener: str | None) -> Any:
    """The response (leaders named as ``listener`` sees them); a
    ``SplicedResponse`` around it when local data comes as file slices (sent
    with sendfile)."""
    spliced = SplicedResponse(None)
    topic_cls = resp.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    hints = (leader_discovery.LeaderHints(ctx.metadata, listener)
             if v >= leader_discovery.FETCH_VERSION else None)
    # Each topic's partitions together, in the order the response encodes
    # them: the file slices' placeholders must be made in that order.
    grouped: dict[tuple[str, uuid.UUID | None], list[tuple[FetchPartition, FetchResult]]] = {}
    for p, topic_id, r in zip(params.partitions, topic_ids, results, strict=True):
        grouped.setdefault((p.topic, topic_id), []).append((p, r))
    topics = [topic_cls(topic=name, topic_id=tid, partitions=[
        _partition_answer(ctx, part_cls, params, hints, spliced, p, r) for p, r in answers])
        for (name, tid), answers in grouped.items()]
    if hints is None:
        response = resp(throttle_time_ms=0, error_code=0, session_id=session_id,
                        responses=topics)
    else:
        response = resp(throttle_time_ms=0, error_code=0, session_id=session_id,
                        responses=topics,
                        node_endpoints=hints.node_endpoints(resp.NodeEndpoint))
    if not spliced.slices:
        return response
    spliced.response = response
    return spliced


def _partition_answer(ctx: BrokerContext, part_cls: Any, params: FetchParams,
                      hints: leader_discovery.LeaderHints | None, spliced: SplicedResponse,
                      p: FetchPartition, r: FetchResult) -> Any:
    if r.error:
        ctx.metrics.error("Fetch", r.error)
    elif r.records:
        ctx.metrics.child(ctx.metrics.bytes_out, p.topic).inc(len(r.records))
    aborted = None
    if params.read_committed:
        aborted = [part_cls.AbortedTransaction(producer_id=t.producer_id,
                                               first_offset=t.first_offset)
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
    return part_cls(partition_index=p.partition, error_code=r.error,
                    high_watermark=r.high_watermark, last_stable_offset=r.last_stable_offset,
                    log_start_offset=r.log_start_offset, aborted_transactions=aborted,
                    preferred_read_replica=r.preferred_read_replica, records=data, **extra)


HANDLERS = {FetchRequest.API_KEY: handle_fetch}
