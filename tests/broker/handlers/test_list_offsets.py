"""ListOffsets v10-v11 in process: v11's -6 (earliest pending upload, KIP-1023)
answered per partition, older versions refused with UNSUPPORTED_VERSION; v10's
timeout_ms (KIP-1075) bounds a lookup that waits (a remote one), which then
answers REQUEST_TIMED_OUT instead of holding the request.

A real single-node core over a topic that is not tiered; the slow lookup is a
stand-in for a remote index read, under trio's autojump clock.
"""

from __future__ import annotations

import pytest
import trio
from kafka.protocol.consumer import ListOffsetsRequest

from broker.context import BrokerContext
from broker.metrics import BrokerMetrics
from protocol.errors import ErrorCode as E
from replication import partition_queries
from tests.broker.handlers.test_leader_discovery import call
from tests.coordinator.conftest import make_config, make_node

TOPIC = "t"
EARLIEST_PENDING_UPLOAD = -6
# How long the stand-in remote lookup takes, against timeouts below and above it.
SLOW_LOOKUP_S = 5.0


@pytest.fixture
async def ctx(tmp_path) -> BrokerContext:
    config = make_config(tmp_path)
    node = make_node(config)
    await node.admin.create_topic(TOPIC, 1, 1, {})
    return BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0)


def request(version: int, timestamp: int, timeout_ms: int = 30_000):
    cls = ListOffsetsRequest.ListOffsetsTopic
    extra = {"timeout_ms": timeout_ms} if version >= 10 else {}
    return ListOffsetsRequest[version](replica_id=-1, isolation_level=0, topics=[cls(
        name=TOPIC, partitions=[cls.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])], **extra)


async def answer(ctx: BrokerContext, version: int, timestamp: int, **kw) -> tuple[int, int]:
    resp = await call(ctx, ListOffsetsRequest, version, request(version, timestamp, **kw))
    part = resp.topics[0].partitions[0]
    return part.error_code, part.offset


async def test_earliest_pending_upload_needs_v11(ctx):
    # Not tiered: "none", as -5 answers.
    assert await answer(ctx, 11, EARLIEST_PENDING_UPLOAD) == (E.NONE, -1)
    assert await answer(ctx, 10, EARLIEST_PENDING_UPLOAD) == (E.UNSUPPORTED_VERSION, -1)
    assert await answer(ctx, 9, EARLIEST_PENDING_UPLOAD) == (E.UNSUPPORTED_VERSION, -1)


async def test_timeout_ms_bounds_a_slow_lookup(ctx, monkeypatch, autojump_clock):
    real = partition_queries.list_offset

    async def slow(*args):
        await trio.sleep(SLOW_LOOKUP_S)
        return await real(*args)

    monkeypatch.setattr(partition_queries, "list_offset", slow)
    started = trio.current_time()
    assert await answer(ctx, 10, -1, timeout_ms=100) == (E.REQUEST_TIMED_OUT, -1)
    assert trio.current_time() - started == pytest.approx(0.1)
    assert await answer(ctx, 10, -1, timeout_ms=int(SLOW_LOOKUP_S * 2000)) == (E.NONE, 0)
    assert await answer(ctx, 9, -1) == (E.NONE, 0)  # no timeout before v10
