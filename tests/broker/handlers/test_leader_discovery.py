"""KIP-951 in process: Produce v10+ and Fetch v16+ refused as not led here
name the current leader (``current_leader``) and its endpoint
(``node_endpoints``); older versions carry neither.

A real single-node core; the partition is handed to another (pretend)
broker the way a LeaderAndIsr would, and the metadata cache told who leads it.
"""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest

from broker.context import NO_SESSION, BrokerContext
from broker.handlers import HANDLERS
from broker.metrics import BrokerMetrics
from protocol import records
from protocol.api import SUPPORTED, RequestHeader
from protocol.errors import ErrorCode as E
from replication.metadata_cache import BrokerEndpoint, PartitionState
from tests.coordinator.conftest import make_config, make_node

TOPIC = "t"
OTHER = BrokerEndpoint(node_id=2, host="127.0.0.2", port=9093, rack="r2")
MOVED = PartitionState(leader=OTHER.node_id, leader_epoch=7, replicas=[0, 2], isr=[0, 2])


@pytest.fixture
async def ctx(tmp_path) -> BrokerContext:
    config = make_config(tmp_path)
    node = make_node(config)
    await node.admin.create_topic(TOPIC, 2, 1, {})
    info = node.metadata.topic(TOPIC)
    assert info is not None
    node.metadata.set_brokers([BrokerEndpoint(0, "127.0.0.1", 9092), OTHER])
    # Partition 0 now follows broker 2; partition 1 stays led here.
    moved = node.replicas.partition((TOPIC, 0))
    node.replicas.become_follower((TOPIC, 0), info.topic_id, moved.log.config, MOVED)
    node.metadata.put_partition((TOPIC, 0), MOVED)
    return BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0)


async def call(ctx: BrokerContext, req_cls, version: int, req):
    """Encode at ``version``, decode as the broker would, run the handler, and
    put the answer through the wire format too."""
    raw = req.encode(version=version)
    decoded = SUPPORTED[req_cls.API_KEY].request.decode(raw, version=version)
    header = RequestHeader(req_cls.API_KEY, version, 1, "test", 0)
    resp = await HANDLERS[req_cls.API_KEY](ctx, header, decoded, NO_SESSION)
    return SUPPORTED[req_cls.API_KEY].response.decode(resp.encode(version=version),
                                                      version=version)


def produce(version: int):
    topic_cls = ProduceRequest.TopicProduceData
    batch = records.build_batch([(None, b"v")], timestamp=1)
    return ProduceRequest[version](
        transactional_id=None, acks=1, timeout_ms=1000,
        topic_data=[topic_cls(name=TOPIC, partition_data=[
            topic_cls.PartitionProduceData(index=p, records=batch) for p in (0, 1)])])


def fetch(ctx: BrokerContext, version: int):
    topic_cls = FetchRequest.FetchTopic
    info = ctx.metadata.topic(TOPIC)
    assert info is not None
    parts = [topic_cls.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                      last_fetched_epoch=-1, log_start_offset=-1,
                                      partition_max_bytes=1 << 20) for p in (0, 1)]
    return FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[topic_cls(topic=TOPIC, topic_id=info.topic_id, partitions=parts)],
        forgotten_topics_data=[], rack_id="")


def endpoints(resp) -> list[tuple[int, str, int, str | None]]:
    return [(e.node_id, e.host, e.port, e.rack) for e in resp.node_endpoints]


async def test_produce_v10_plus_names_the_leader(ctx):
    resp = await call(ctx, ProduceRequest, 11, produce(11))
    moved, led = resp.responses[0].partition_responses
    assert moved.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 7)
    assert led.error_code == E.NONE and led.current_leader is None
    assert endpoints(resp) == [(2, "127.0.0.2", 9093, "r2")]


async def test_produce_before_v10_names_no_leader(ctx):
    resp = await call(ctx, ProduceRequest, 9, produce(9))
    moved = resp.responses[0].partition_responses[0]
    assert moved.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert getattr(moved, "current_leader", None) is None
    assert not getattr(resp, "node_endpoints", None)


def behind_the_follower(req):
    """Partition 0 asked with epoch 6: the follower here knows 7 (a consumer
    may read a follower from Fetch v11, KIP-392, but not on a stale epoch)."""
    req.topics[0].partitions[0].current_leader_epoch = MOVED.leader_epoch - 1
    return req


async def test_fetch_v16_plus_names_the_leader(ctx):
    resp = await call(ctx, FetchRequest, 16, behind_the_follower(fetch(ctx, 16)))
    moved, led = resp.responses[0].partitions
    assert moved.error_code == E.FENCED_LEADER_EPOCH
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 7)
    assert led.error_code == E.NONE and led.current_leader is None
    assert endpoints(resp) == [(2, "127.0.0.2", 9093, "r2")]


async def test_fetch_fenced_epoch_names_the_leader(ctx):
    # Partition 1 is led here, now in epoch 3; the client still thinks 2.
    ctx.replicas.partition((TOPIC, 1)).leader_epoch = 3
    ctx.metadata.put_partition((TOPIC, 1), PartitionState(0, 3, [0], [0]))
    req = fetch(ctx, 17)
    stale = req.topics[0].partitions[1]
    stale.current_leader_epoch = 2
    req.topics[0].partitions = [stale]
    resp = await call(ctx, FetchRequest, 17, req)
    [fenced] = resp.responses[0].partitions
    assert fenced.error_code == E.FENCED_LEADER_EPOCH
    assert (fenced.current_leader.leader_id, fenced.current_leader.leader_epoch) == (0, 3)
    assert endpoints(resp) == [(0, "127.0.0.1", 9092, None)]


async def test_fetch_before_v16_names_no_leader(ctx):
    resp = await call(ctx, FetchRequest, 15, behind_the_follower(fetch(ctx, 15)))
    moved = resp.responses[0].partitions[0]
    assert moved.error_code == E.FENCED_LEADER_EPOCH
    assert moved.current_leader is None
    assert not getattr(resp, "node_endpoints", None)


async def test_a_follower_serves_consumers_from_fetch_v11_only(ctx):
    """KIP-392: a Fetch carrying client metadata (v11+) may read a follower;
    an older one is sent to the leader."""
    old = (await call(ctx, FetchRequest, 10, fetch(ctx, 10))).responses[0].partitions[0]
    assert old.error_code == E.NOT_LEADER_OR_FOLLOWER
    new = (await call(ctx, FetchRequest, 11, fetch(ctx, 11))).responses[0].partitions[0]
    assert new.error_code == E.NONE and new.preferred_read_replica == -1
