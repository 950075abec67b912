"""DescribeProducers, ListTransactions and DescribeTransactions: what an
operator (``kafka-transactions``, ``tierd admin transactions``) reads to find
a hanging transaction (KIP-664). Aborting one is WriteTxnMarkers, in
``broker.handlers.transactions``.

DescribeProducers is answered by a partition's leader from its log's
producer state: every producer id the log remembers, with its epoch, last
sequence and timestamp, the coordinator epoch of its last marker and the
first offset of its open transaction (-1: none). A partition this broker
hosts but does not lead is NOT_LEADER_OR_FOLLOWER (Kafka would answer from
a follower's log too; the Admin client asks leaders unless told a broker).

ListTransactions and DescribeTransactions are answered by the transaction
coordinator from ``broker.transactions.listing``. Authorization (topics,
transactional ids) is the guards' job (``broker.security.txn_guards``).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from broker.context import BrokerContext, Session
from broker.handlers.transactions import coordinator
from broker.transactions import listing
from broker.transactions.state import TxnMetadata
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.metadata import validate_topic_name

E = ErrorCode
# DescribeTransactions answers these for an id that has no transaction here.
NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_TIMESTAMP = -1


# -- DescribeProducers ----------------------------------------------------------------


async def handle_describe_producers(ctx: BrokerContext, header: RequestHeader, req: Any,
                                   session: Session) -> Any:
    resp = DescribeProducersResponse[header.api_version]
    topic_cls = resp.TopicResponse
    topics = []
    for t in req.topics:
        code = _topic_error(ctx, t.name)
        parts = [_producers(ctx, topic_cls, t.name, p) if code is E.NONE
                 else _partition_error(ctx, topic_cls, p, code, code.name)
                 for p in t.partition_indexes]
        topics.append(topic_cls(name=t.name, partitions=parts))
    return resp(throttle_time_ms=0, topics=topics)


def _topic_error(ctx: BrokerContext, name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaApiError as exc:
        return exc.code
    return E.NONE if ctx.metadata.topic(name) is not None else E.UNKNOWN_TOPIC_OR_PARTITION


def _producers(ctx: BrokerContext, topic_cls: Any, topic: str, partition: int) -> Any:
    part_cls = topic_cls.PartitionResponse
    try:
        part = ctx.replicas.leader_partition((topic, partition))
    except KafkaApiError as exc:
        return _partition_error(ctx, topic_cls, partition, exc.code, exc.message)
    state_cls = part_cls.ProducerState
    active = [state_cls(producer_id=pid, producer_epoch=entry.epoch,
                        last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset)
              for pid, entry in sorted(part.log.producers.producers.items())]
    return part_cls(partition_index=partition, error_code=0, error_message=None,
                    active_producers=active)


def _partition_error(ctx: BrokerContext, topic_cls: Any, partition: int, code: ErrorCode,
                     message: str | None) -> Any:
    ctx.metrics.error("DescribeProducers", code)
    return topic_cls.PartitionResponse(partition_index=partition, error_code=code,
                                       error_message=message or None, active_producers=[])


# -- ListTransactions -----------------------------------------------------------------


async def handle_list_transactions(ctx: BrokerContext, header: RequestHeader, req: Any,
                                   session: Session) -> Any:
    v = header.api_version
    resp = ListTransactionsResponse[v]
    coord = coordinator(ctx)
    duration = req.duration_filter if v >= 1 else listing.NO_DURATION_FILTER
    found = listing.list_transactions(coord.txns.values(), coord.partitions.loading(),
                                      req.state_filters, req.producer_id_filters, duration,
                                      coord.wall_clock())
    if found.error:
        ctx.metrics.error("ListTransactions", found.error)
    return resp(throttle_time_ms=0, error_code=found.error,
                unknown_state_filters=found.unknown_states,
                transaction_states=[resp.TransactionState(
                    transactional_id=t.transactional_id, producer_id=t.producer_id,
                    transaction_state=t.state.kafka_name) for t in found.transactions])


# -- DescribeTransactions -------------------------------------------------------------


async def handle_describe_transactions(ctx: BrokerContext, header: RequestHeader, req: Any,
                                       session: Session) -> Any:
    resp = DescribeTransactionsResponse[header.api_version]
    coord = coordinator(ctx)
    return resp(throttle_time_ms=0, transaction_states=[
        _described(ctx, resp.TransactionState, txn_id, listing.describe(
            coord.txns, coord.partitions.check(txn_id) if txn_id else E.INVALID_REQUEST, txn_id))
        for txn_id in req.transactional_ids])


def _described(ctx: BrokerContext, state_cls: Any, txn_id: str,
               found: TxnMetadata | ErrorCode) -> Any:
    if isinstance(found, ErrorCode):
        ctx.metrics.error("DescribeTransactions", found)
        return state_cls(error_code=found, transactional_id=txn_id, transaction_state="",
                         transaction_timeout_ms=0, transaction_start_time_ms=NO_TIMESTAMP,
                         producer_id=NO_PRODUCER_ID, producer_epoch=NO_EPOCH, topics=[])
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(found.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return state_cls(error_code=0, transactional_id=txn_id,
                     transaction_state=found.state.kafka_name,
                     transaction_timeout_ms=found.timeout_ms,
                     transaction_start_time_ms=found.start_timestamp,
                     producer_id=found.producer_id, producer_epoch=found.producer_epoch,
                     topics=[state_cls.TopicData(topic=t, partitions=ps)
                             for t, ps in by_topic.items()])


HANDLERS = {
    DescribeProducersRequest.API_KEY: handle_describe_producers,
    ListTransactionsRequest.API_KEY: handle_list_transactions,
    DescribeTransactionsRequest.API_KEY: handle_describe_transactions,
}
