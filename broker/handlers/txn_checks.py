"""The transaction coordinator's say before transactional appends (KIP-890):
which partitions of a Produce request, or which ``__consumer_offsets``
partition of a TxnOffsetCommit, must be refused.

Produce v12+ comes from a transactions-v2 client, which sends no
AddPartitionsToTxn: the coordinator adds each partition of the first batch
of a transaction on it. Older versions are verified instead (the partition
must already be in the transaction), when
transaction.partition.verification.enable is on. Only the first batch of
a transaction on a partition is checked: once the partition's producer
state has the producer's transaction open at that epoch, the partition is
known to be in it. The coordinator is asked through
``broker.transactions.verifier``.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.transactions.verifier import for_produce
from protocol import records as batches
from protocol.errors import ErrorCode
from protocol.partition import TopicPartition

# First Produce / TxnOffsetCommit versions whose transactional writes add
# their partitions to the transaction (transactions v2).
PRODUCE_ADDS_SINCE = 12
TXN_OFFSET_COMMIT_ADDS_SINCE = 5


async def check_produce(ctx: BrokerContext, version: int, req: Any
                        ) -> dict[TopicPartition, ErrorCode]:
    """The partitions of ``req`` refused by the coordinator, with their error."""
    verifier = ctx.txn_verifier
    add = version >= PRODUCE_ADDS_SINCE
    if verifier is None or not (add or ctx.config["transaction.partition.verification.enable"]):
        return {}
    # (producer id, epoch) -> the partitions whose first batch opens its transaction
    opening: dict[tuple[int, int], set[TopicPartition]] = {}
    for topic in req.topic_data:
        for pd in topic.partition_data:
            tp = (topic.name, pd.index)
            data = pd.records
            if data is None or len(data) < batches.HEADER_SIZE or not ctx.replicas.leads(tp):
                continue
            head = batches.parse_header(data, 0)
            if not head.is_transactional or head.is_control:
                continue
            part = ctx.replicas.get(tp)
            if part is not None and part.log.producers.in_transaction(head.producer_id,
                                                                     head.producer_epoch):
                continue
            opening.setdefault((head.producer_id, head.producer_epoch), set()).add(tp)
    refused: dict[TopicPartition, ErrorCode] = {}
    for (producer_id, epoch), tps in opening.items():
        answers = await verifier.check(req.transactional_id, producer_id, epoch, tps, add)
        refused.update({tp: for_produce(code) for tp, code in answers.items() if code})
    return refused


async def add_offsets_partition(ctx: BrokerContext, txn_id: str, producer_id: int, epoch: int,
                                tp: TopicPartition) -> ErrorCode:
    """TxnOffsetCommit v5: add the group's offsets partition to the transaction."""
    if ctx.txn_verifier is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    answers = await ctx.txn_verifier.check(txn_id, producer_id, epoch, [tp], add=True)
    return for_produce(answers[tp], ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
