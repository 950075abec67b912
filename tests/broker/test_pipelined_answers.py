"""A connection's pipelined acks=all produces (``broker.deferred``): each is
appended as soon as it is read, without waiting for the one before it to
be replicated, and the answers still go out in request order.

A real single-node core and a real ``Connection`` on a loopback socket; the
partitions' ISR includes a pretend follower (broker 2) whose progress the
test reports, as its fetches would.
"""

from __future__ import annotations

import struct

import trio
import trio.testing
from kafka.protocol.producer import ProduceRequest

from broker.context import BrokerContext
from broker.metrics import BrokerMetrics
from broker.server import Connection
from protocol import records
from replication.metadata_cache import PartitionState
from tests.coordinator.conftest import make_config, make_node

TOPIC = "t"
FOLLOWER = 2
VERSION = 9
WAIT_S = 10.0


def produce_frame(partition: int, correlation_id: int) -> bytes:
    topic_cls = ProduceRequest.TopicProduceData
    req = ProduceRequest[VERSION](
        transactional_id=None, acks=-1, timeout_ms=30_000,
        topic_data=[topic_cls(name=TOPIC, partition_data=[topic_cls.PartitionProduceData(
            index=partition, records=records.build_batch([(None, b"v")], timestamp=1))])])
    req.with_header(correlation_id=correlation_id, client_id="test")
    return bytes(req.encode(version=VERSION, header=True, framed=True))


async def read_answer(stream: trio.SocketStream, buffer: bytearray) -> int:
    """The correlation id of the next answer."""
    while len(buffer) < 8 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed"
        buffer += chunk
    size, correlation_id = struct.unpack_from(">ii", buffer)
    del buffer[:4 + size]
    return int(correlation_id)


async def test_pipelined_produces_append_at_once_and_answer_in_order(tmp_path) -> None:
    config = make_config(tmp_path)
    node = make_node(config)
    await node.admin.create_topic(TOPIC, 2, 1, {})
    info = node.metadata.topic(TOPIC)
    assert info is not None
    for p in (0, 1):
        part = node.replicas.partition((TOPIC, p))
        node.replicas.become_leader((TOPIC, p), info.topic_id, part.log.config,
                                    PartitionState(0, 1, [0, FOLLOWER], [0, FOLLOWER]))
    ctx = BrokerContext(config, node.metadata, node.replicas, node.admin, BrokerMetrics(), 0)
    [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client = await trio.testing.open_stream_to_socket_listener(listener)
    server = await listener.accept()
    ends = [node.replicas.partition((TOPIC, p)).log for p in (0, 1)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Connection(ctx, server).serve)
        await client.send_all(produce_frame(0, 1) + produce_frame(1, 2))
        with trio.fail_after(WAIT_S):
            while not all(lg.end_offset == 1 for lg in ends):
                await trio.sleep(0.01)
        # Both appended while neither is replicated. The second one's ISR
        # catches up first: its answer still waits for the first one's.
        node.replicas.followers.update_follower((TOPIC, 1), FOLLOWER, 1)
        buffer = bytearray()
        with trio.move_on_after(0.3) as early:
            await read_answer(client, buffer)
        assert early.cancelled_caught, "an answer overtook the one before it"
        node.replicas.followers.update_follower((TOPIC, 0), FOLLOWER, 1)
        with trio.fail_after(WAIT_S):
            assert [await read_answer(client, buffer) for _ in range(2)] == [1, 2]
        nursery.cancel_scope.cancel()
