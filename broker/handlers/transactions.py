"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and
WriteTxnMarkers: requests in, ``broker.transactions`` calls, responses out.

WriteTxnMarkers comes from another broker's transaction coordinator: each
partition's marker is appended here as its leader and answered once the
in-sync replicas have it (``markers.write_local``), the partitions of one
request in parallel.

As Kafka's request layer: partitions of topics this broker lacks are
answered UNKNOWN_TOPIC_OR_PARTITION before the coordinator sees the request
(AddPartitionsToTxn then answers OPERATION_NOT_ATTEMPTED for the others, so
a transaction is never half-extended); PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH for request versions older than the one that
introduced it (v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn).

AddPartitionsToTxn v0-v3 is the client form; v4+ is the batched broker form,
with ``verify_only`` answering whether each partition is already in the
transaction (KIP-890 part 1), or adding it for a transactions-v2 client's
Produce (``verify_only`` false). Transactions v2 (KIP-890 part 2): EndTxn v5
bumps the producer epoch and answers the producer id and epoch to go on
with; TxnOffsetCommit v5 adds the group's offsets partition to the
transaction itself (no AddOffsetsToTxn).
"""

from __future__ import annotations

from typing import Any

import trio
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from broker.context import BrokerContext, Session
from broker.coordinator.offsets import PartitionCommit
from broker.handlers.groups import not_here
from broker.handlers.txn_checks import TXN_OFFSET_COMMIT_ADDS_SINCE, add_offsets_partition
from broker.transactions import TransactionCoordinator
from broker.transactions.markers import Marker, write_local
from protocol.api import RequestHeader
from protocol.errors import ErrorCode
from storage.log.manager import now_ms

E = ErrorCode
# First request version that may carry PRODUCER_FENCED (older ones get INVALID_PRODUCER_EPOCH).
_FENCED_SINCE = 2
_BATCHED_VERSION = 4
# First EndTxn version of transactions v2.
_END_TXN_V2 = 5
NO_EPOCH = -1


def coordinator(ctx: BrokerContext) -> TransactionCoordinator:
    """The broker's transaction coordinator (a wiring bug if missing)."""
    if ctx.transactions is None:
        raise RuntimeError("broker context has no transaction coordinator")
    return ctx.transactions


def fenced_for(code: ErrorCode, version: int, since: int = _FENCED_SINCE) -> ErrorCode:
    """PRODUCER_FENCED as the request version knows it."""
    if code is E.PRODUCER_FENCED and version < since:
        return E.INVALID_PRODUCER_EPOCH
    return code


def _count(ctx: BrokerContext, api: str, code: ErrorCode) -> ErrorCode:
    if code:
        ctx.metrics.error(api, code)
    return code


# -- AddPartitionsToTxn ---------------------------------------------------------------


async def handle_add_partitions(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    resp = AddPartitionsToTxnResponse[v]
    if v < _BATCHED_VERSION:
        topics = await _add_one(ctx, resp, v, req.v3_and_below_transactional_id,
                          req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                          req.v3_and_below_topics, verify_only=False)
        return resp(throttle_time_ms=0, results_by_topic_v3_and_below=topics)
    results = [resp.AddPartitionsToTxnResult(
        transactional_id=t.transactional_id,
        topic_results=await _add_one(ctx, resp, v, t.transactional_id, t.producer_id,
                                     t.producer_epoch, t.topics, verify_only=t.verify_only,
                                     tv2=not t.verify_only))
        for t in req.transactions]
    return resp(throttle_time_ms=0, error_code=0, results_by_transaction=results)


async def _add_one(ctx: BrokerContext, resp: Any, v: int, txn_id: str, producer_id: int,
                   epoch: int, topics: Any, verify_only: bool, tv2: bool = False) -> list[Any]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    known = {tp: ctx.metadata.has_partition(tp) for tp in wanted}
    coord = coordinator(ctx)
    if not all(known.values()):
        errors = {tp: E.OPERATION_NOT_ATTEMPTED if ok else E.UNKNOWN_TOPIC_OR_PARTITION
                  for tp, ok in known.items()}
    elif verify_only:
        errors = coord.verify_partitions(txn_id, producer_id, epoch, set(wanted))
    else:
        code = await coord.add_partitions(txn_id, producer_id, epoch, set(wanted), tv2=tv2)
        errors = dict.fromkeys(wanted, fenced_for(code, v))
    by_topic: dict[str, list[Any]] = {}
    part_cls = resp.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(part_cls(
            partition_index=partition,
            partition_error_code=_count(ctx, "AddPartitionsToTxn", code)))
    return [resp.AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts)
            for name, parts in by_topic.items()]


# -- AddOffsetsToTxn / EndTxn -----------------------------------------------------------


async def handle_add_offsets(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    code = await coordinator(ctx).add_offsets(req.transactional_id, req.producer_id,
                                        req.producer_epoch, req.group_id)
    code = _count(ctx, "AddOffsetsToTxn", fenced_for(code, header.api_version))
    return AddOffsetsToTxnResponse[header.api_version](throttle_time_ms=0, error_code=code)


async def handle_end_txn(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    v = header.api_version
    result = await coordinator(ctx).end_transaction(
        req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed),
        tv2=v >= _END_TXN_V2)
    code = _count(ctx, "EndTxn", fenced_for(result.error, v))
    if v < _END_TXN_V2:
        return EndTxnResponse[v](throttle_time_ms=0, error_code=code)
    return EndTxnResponse[v](throttle_time_ms=0, error_code=code,
                             producer_id=result.producer_id,
                             producer_epoch=result.producer_epoch)


# -- TxnOffsetCommit ----------------------------------------------------------------------


async def handle_txn_offset_commit(ctx: BrokerContext, header: RequestHeader,
                                   req: Any, session: Session) -> Any:
    v = header.api_version
    resp = TxnOffsetCommitResponse[v]
    topic_cls = resp.TxnOffsetCommitResponseTopic
    part_cls = topic_cls.TxnOffsetCommitResponsePartition
    commits = [PartitionCommit(t.name, p.partition_index, p.committed_offset,
                               p.committed_leader_epoch if v >= 2 else NO_EPOCH,
                               p.committed_metadata)
               for t in req.topics for p in t.partitions
               if ctx.metadata.has_partition((t.name, p.partition_index))]
    code = not_here(ctx, req.group_id) if commits else E.NONE
    if not code and commits and v >= TXN_OFFSET_COMMIT_ADDS_SINCE:
        tp = coordinator(ctx).offsets_partition(req.group_id)
        code = E.COORDINATOR_NOT_AVAILABLE if tp is None else await add_offsets_partition(
            ctx, req.transactional_id, req.producer_id, req.producer_epoch, tp)
    if code:
        errors = iter([code] * len(commits))
    else:
        errors = iter(await coordinator(ctx).txn_offset_commit(
            req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
            req.generation_id if v >= 3 else -1, req.member_id if v >= 3 else "",
            req.group_instance_id if v >= 3 else None, commits) if commits else [])
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code = next(errors) if ctx.metadata.has_partition((t.name, p.partition_index)) \
                else E.UNKNOWN_TOPIC_OR_PARTITION
            parts.append(part_cls(partition_index=p.partition_index,
                                  error_code=_count(ctx, "TxnOffsetCommit", code)))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


# -- WriteTxnMarkers ------------------------------------------------------------------


async def handle_write_txn_markers(ctx: BrokerContext, header: RequestHeader,
                                   req: Any, session: Session) -> Any:
    resp = WriteTxnMarkersResponse[header.api_version]
    result_cls = resp.WritableTxnMarkerResult
    topic_cls = result_cls.WritableTxnMarkerTopicResult
    part_cls = topic_cls.WritableTxnMarkerPartitionResult
    complete = ctx.groups.txn_offsets.complete if ctx.groups is not None else None
    timeout_ms = int(ctx.config["request.timeout.ms"])
    codes: dict[tuple[int, str, int], ErrorCode] = {}

    async def one(index: int, marker: Marker, tp: tuple[str, int]) -> None:
        if not ctx.metadata.has_partition(tp):
            codes[(index, *tp)] = E.UNKNOWN_TOPIC_OR_PARTITION
            return
        codes[(index, *tp)] = await write_local(ctx.replicas, complete, tp, marker, now_ms(),
                                                timeout_ms)

    async with trio.open_nursery() as nursery:
        for index, m in enumerate(req.markers):
            marker = Marker(m.producer_id, m.producer_epoch, bool(m.transaction_result),
                            m.coordinator_epoch)
            for t in m.topics:
                for p in t.partition_indexes:
                    nursery.start_soon(one, index, marker, (t.name, p))
    return resp(markers=[result_cls(producer_id=m.producer_id, topics=[
        topic_cls(name=t.name, partitions=[
            part_cls(partition_index=p,
                     error_code=_count(ctx, "WriteTxnMarkers", codes[(index, t.name, p)]))
            for p in t.partition_indexes])
        for t in m.topics]) for index, m in enumerate(req.markers)])


HANDLERS = {
    WriteTxnMarkersRequest.API_KEY: handle_write_txn_markers,
    AddPartitionsToTxnRequest.API_KEY: handle_add_partitions,
    AddOffsetsToTxnRequest.API_KEY: handle_add_offsets,
    EndTxnRequest.API_KEY: handle_end_txn,
    TxnOffsetCommitRequest.API_KEY: handle_txn_offset_commit,
}
