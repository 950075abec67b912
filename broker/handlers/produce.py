"""Produce: validate, append, answer per partition (acks 0, 1, -1).

Every partition is appended by the ReplicaManager first; with acks=-1 the
request then waits once, for all its partitions together, in the
delayed-produce purgatory until the ISR has the records (at most the
request's timeout: REQUEST_TIMED_OUT). With one replica that is at once,
exactly as Kafka behaves with replication factor 1. acks=0 gets no response
at all. Per-partition errors (unknown partition, not leader, too few in-sync
replicas, corrupt batch, too large) are answered for that partition; the
others still append.

Transactional batches (KIP-890, ``txn_checks``): before the first batch of
a transaction on a partition this broker leads, the transaction coordinator
adds the partition (Produce v12+, transactions v2) or verifies it is in the
open transaction (older versions, with
transaction.partition.verification.enable); a refused partition gets the
coordinator's answer (INVALID_TXN_STATE: not in the transaction).

A partition refused with NOT_LEADER_OR_FOLLOWER names its current leader and
the response that leader's endpoint (v10+, KIP-951; see ``leader_discovery``).
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from broker.context import BrokerContext, Session
from broker.deferred import Deferred
from broker.handlers import leader_discovery, txn_checks
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.replica_manager import ACKS_ALL, VALID_ACKS

log = structlog.get_logger(__name__)

# Errors a client meets in normal operation (metadata refresh): no log line.
_QUIET_ERRORS = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           ErrorCode.NOT_LEADER_OR_FOLLOWER})


async def handle_produce(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = ProduceResponse[v]
    topic_cls = resp.TopicProduceResponse
    part_cls = topic_cls.PartitionProduceResponse
    acks_ok = req.acks in VALID_ACKS
    topics = []
    # acks=all partitions appended: (topic, partition) -> (their list, index, offset to reach)
    waiting: dict[tuple[str, int], tuple[list[Any], int, int]] = {}
    refused = await txn_checks.check_produce(ctx, v, req) if acks_ok else {}
    for topic in req.topic_data:
        parts = []
        for pd in topic.partition_data:
            if not acks_ok:
                parts.append(_error(ctx, part_cls, pd.index, ErrorCode.INVALID_REQUIRED_ACKS, ""))
                continue
            if code := refused.get((topic.name, pd.index)):
                log.info("transactional produce rejected", topic=topic.name, partition=pd.index,
                         transactional_id=req.transactional_id, error=code.name)
                parts.append(_error(ctx, part_cls, pd.index, code,
                                    f"transactional batch refused: {code.name}"))
                continue
            answer, next_offset = _append(ctx, part_cls, topic.name, pd, req.acks)
            parts.append(answer)
            if req.acks == ACKS_ALL and next_offset is not None:
                waiting[(topic.name, pd.index)] = (parts, len(parts) - 1, next_offset)
        topics.append(topic_cls(name=topic.name, partition_responses=parts))
    if req.acks == 0:
        return None
    if not waiting:
        return _response(ctx, resp, v, topics, session.listener)

    async def replicated() -> Any:
        required = {tp: offset for tp, (_, _, offset) in waiting.items()}
        errors = await ctx.replicas.followers.wait_replicated(required, req.timeout_ms)
        for tp, code in errors.items():
            if code:
                parts, i, _ = waiting[tp]
                log.info("acks=all produce failed", topic=tp[0], partition=tp[1],
                         error=code.name)
                parts[i] = _error(ctx, part_cls, tp[1], code, code.name)
        return _response(ctx, resp, v, topics, session.listener)

    # Appended in request order; the connection goes on with its next request
    # while this one waits for the ISR (see ``broker.deferred``).
    return Deferred(replicated)


def _response(ctx: BrokerContext, resp: Any, v: int, topics: list[Any],
              listener: str | None) -> Any:
    if v < leader_discovery.PRODUCE_VERSION:
        return resp(responses=topics, throttle_time_ms=0)
    return resp(responses=topics, throttle_time_ms=0,
                node_endpoints=_name_leaders(ctx, resp, topics, listener))


def _name_leaders(ctx: BrokerContext, resp: Any, topics: list[Any], listener: str | None
                  ) -> list[Any]:
    """KIP-951: the current leader of every partition refused as not led here;
    returns the leaders' endpoints (as ``listener`` sees them) for the response."""
    hints = leader_discovery.LeaderHints(ctx.metadata, listener)
    leader_cls = resp.TopicProduceResponse.PartitionProduceResponse.LeaderIdAndEpoch
    for topic in topics:
        for part in topic.partition_responses:
            if part.error_code in leader_discovery.PRODUCE_ERRORS:
                part.current_leader = hints.current_leader((topic.name, part.index), leader_cls)
    return hints.node_endpoints(resp.NodeEndpoint)


def _append(ctx: BrokerContext, part_cls: Any, topic: str, pd: Any,
            acks: int) -> tuple[Any, int | None]:
    """Append one partition's records; returns its answer and, if appended, the
    offset the ISR must reach for acks=all."""
    records = pd.records
    if records is None:
        return _error(ctx, part_cls, pd.index, ErrorCode.CORRUPT_MESSAGE, "null record set"), None
    try:
        result = ctx.replicas.append_local((topic, pd.index), bytearray(records),
                                           required_acks=acks)
    except KafkaApiError as exc:
        if exc.code not in _QUIET_ERRORS:
            log.info("produce rejected", topic=topic, partition=pd.index, error=exc.code.name,
                     detail=exc.message)
        return _error(ctx, part_cls, pd.index, exc.code, exc.message), None
    ctx.metrics.bytes_in.labels(topic).inc(len(records))
    ctx.metrics.messages_in.labels(topic).inc(result.last_offset - result.first_offset + 1)
    return part_cls(index=pd.index, error_code=0, base_offset=result.first_offset,
                    log_append_time_ms=result.log_append_time,
                    log_start_offset=result.log_start_offset, record_errors=[],
                    error_message=None), result.last_offset + 1


def _error(ctx: BrokerContext, part_cls: Any, index: int, code: ErrorCode, message: str) -> Any:
    ctx.metrics.error("Produce", code)
    return part_cls(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                    log_start_offset=-1, record_errors=[], error_message=message or None)


HANDLERS = {ProduceRequest.API_KEY: handle_produce}
