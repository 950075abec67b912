"""The transaction request handlers in process: versions, error mapping, batching.

Requests are encoded and decoded with the advertised versions (so the
schemas match what clients send), then handed to the handlers with a real
broker context.
"""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from broker.context import NO_SESSION, BrokerContext
from broker.coordinator import GroupCoordinator
from broker.handlers import HANDLERS
from broker.metrics import BrokerMetrics
from broker.transactions import TransactionCoordinator
from broker.transactions.markers import MarkerWriter
from protocol.api import SUPPORTED, RequestHeader
from protocol.errors import ErrorCode as E
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock


@pytest.fixture
async def ctx(tmp_path, nursery) -> BrokerContext:
    config = make_config(tmp_path, transaction_state_log_num_partitions="2")
    node = make_node(config)
    await node.admin.create_topic("t", 2, 1, {})
    groups = GroupCoordinator(config, node.internal.offsets, trio_wall_clock)
    txns = TransactionCoordinator(config, node.internal.transactions, groups,
                                  MarkerWriter(0, node.replicas, node.metadata, 30_000),
                                  node.admin.allocate_producer_id, trio_wall_clock)
    await nursery.start(groups.run)
    await nursery.start(txns.run)
    return BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0,
                         groups, txns)


async def call(ctx: BrokerContext, req_cls, version: int, **fields):
    """Encode at ``version``, decode as the broker would, run the handler."""
    raw = req_cls[version](**fields).encode(version=version)
    req = SUPPORTED[req_cls.API_KEY].request.decode(raw, version=version)
    header = RequestHeader(req_cls.API_KEY, version, 1, "test", 0)
    return await HANDLERS[req_cls.API_KEY](ctx, header, req, NO_SESSION)


def test_versions_advertised():
    ranges = {SUPPORTED[r.API_KEY].name: (SUPPORTED[r.API_KEY].min_version,
                                          SUPPORTED[r.API_KEY].max_version)
              for r in (AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest,
                        TxnOffsetCommitRequest, InitProducerIdRequest)}
    assert ranges == {"AddPartitionsToTxn": (0, 5), "AddOffsetsToTxn": (0, 4), "EndTxn": (0, 5),
                      "TxnOffsetCommit": (0, 5), "InitProducerId": (0, 5)}


async def init(ctx, txn_id="tx", version=4, timeout=60_000):
    return await call(ctx, InitProducerIdRequest, version, transactional_id=txn_id,
                      transaction_timeout_ms=timeout, producer_id=-1, producer_epoch=-1)


async def test_init_producer_id_maps_fenced_by_version(ctx):
    first = await init(ctx)
    await init(ctx)
    stale = dict(transactional_id="tx", transaction_timeout_ms=60_000,
                 producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert (await call(ctx, InitProducerIdRequest, 4, **stale)).error_code == E.PRODUCER_FENCED
    assert (await call(ctx, InitProducerIdRequest, 3, **stale)).error_code == \
        E.INVALID_PRODUCER_EPOCH
    assert (await init(ctx, timeout=900_001)).error_code == E.INVALID_TRANSACTION_TIMEOUT


async def test_add_partitions_v4_batches_and_verifies(ctx):
    a, b = await init(ctx, "a"), await init(ctx, "b")
    req = AddPartitionsToTxnRequest[4]
    topic = req.AddPartitionsToTxnTopic

    def txn(txn_id, resp, verify, parts):
        return req.AddPartitionsToTxnTransaction(
            transactional_id=txn_id, producer_id=resp.producer_id,
            producer_epoch=resp.producer_epoch, verify_only=verify,
            topics=[topic(name="t", partitions=parts)])

    added = await call(ctx, AddPartitionsToTxnRequest, 4, transactions=[txn("a", a, False, [0])])
    assert added.error_code == 0
    out = await call(ctx, AddPartitionsToTxnRequest, 4,
                     transactions=[txn("a", a, True, [0, 1]), txn("b", b, True, [0])])
    codes = {(r.transactional_id, p.partition_index): p.partition_error_code
             for r in out.results_by_transaction for t in r.topic_results
             for p in t.results_by_partition}
    assert codes == {("a", 0): E.NONE, ("a", 1): E.INVALID_TXN_STATE, ("b", 0): E.INVALID_TXN_STATE}


async def test_full_transaction_through_the_handlers(ctx):
    p = await init(ctx)
    ids = dict(producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    req = AddPartitionsToTxnRequest[3]
    out = await call(ctx, AddPartitionsToTxnRequest, 3, v3_and_below_transactional_id="tx",
                     v3_and_below_producer_id=p.producer_id,
                     v3_and_below_producer_epoch=p.producer_epoch,
                     v3_and_below_topics=[req.AddPartitionsToTxnTopic(name="t", partitions=[0])])
    assert [x.partition_error_code for t in out.results_by_topic_v3_and_below
            for x in t.results_by_partition] == [E.NONE]
    assert (await call(ctx, AddOffsetsToTxnRequest, 3, transactional_id="tx", group_id="g",
                       **ids)).error_code == E.NONE
    commit = TxnOffsetCommitRequest[3]
    topics = [commit.TxnOffsetCommitRequestTopic(name=name, partitions=[
        commit.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_leader_epoch=-1,
            committed_metadata="")]) for name in ("t", "missing")]
    out = await call(ctx, TxnOffsetCommitRequest, 3, transactional_id="tx", group_id="g",
                     generation_id=-1, member_id="", group_instance_id=None, topics=topics, **ids)
    assert [(t.name, t.partitions[0].error_code) for t in out.topics] == \
        [("t", E.NONE), ("missing", E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert await fetch_offset(ctx, stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
    assert await fetch_offset(ctx, stable=False) == (E.NONE, -1)
    assert (await call(ctx, EndTxnRequest, 1, transactional_id="tx", committed=True,
                       producer_id=p.producer_id, producer_epoch=p.producer_epoch - 1)
            ).error_code == E.INVALID_PRODUCER_EPOCH
    assert (await call(ctx, EndTxnRequest, 3, transactional_id="tx", committed=True,
                       **ids)).error_code == E.NONE
    assert [(tp, v.offset) for tp, v in ctx.groups.offsets.fetch("g", None)] == [(("t", 0), 5)]
    assert await fetch_offset(ctx, stable=True) == (E.NONE, 5)


async def fetch_offset(ctx, stable: bool) -> tuple[int, int]:
    """OffsetFetch v7 of t-0 for group g: (error, offset)."""
    req = OffsetFetchRequest[7]
    out = await call(ctx, OffsetFetchRequest, 7, group_id="g", require_stable=stable,
                     topics=[req.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
    part = out.topics[0].partitions[0]
    return part.error_code, part.committed_offset
