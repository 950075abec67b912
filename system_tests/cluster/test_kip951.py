"""KIP-951 leader discovery across real brokers, over a raw socket.

Produce v10+ sent to a broker that does not lead the partition is refused
with NOT_LEADER_OR_FOLLOWER, and the answer names the current leader and its
epoch (tagged ``current_leader``) and lists that leader's endpoint (tagged
``node_endpoints``). A consumer's Fetch (v11+) may read a follower (KIP-392);
Fetch v16+ refused for a stale epoch names the leader the same way. After the
leader is killed, the answers name the new leader in its new epoch, whether
the old epoch reaches the new leader or a follower. Requests and responses are
kafka-python's schema classes.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from protocol.errors import ErrorCode
from protocol.records import build_batch
from system_tests._proc import RawClient, metadata_request, produce_request
from system_tests.cluster.cluster import Cluster, wait_for

# The first versions that carry the hints (KIP-951), and the newest we offer.
PRODUCE_VERSION = 10
FETCH_VERSION = 16
LATEST_FETCH_VERSION = 17
METADATA_VERSION = 12


def _client(cluster: Cluster, node: int) -> RawClient:
    broker = cluster.brokers[node]
    return RawClient(broker.host, broker.port)


def leader_and_epoch(cluster: Cluster, node: int, topic: str) -> tuple[int, int, uuid.UUID]:
    """(leader, leader epoch, topic id) of partition 0 as ``node``'s Metadata says."""
    with _client(cluster, node) as client:
        resp = client.request(metadata_request([topic], METADATA_VERSION), METADATA_VERSION,
                              MetadataResponse)
    [t] = resp.topics
    [p] = [p for p in t.partitions if p.partition_index == 0]
    return p.leader_id, p.leader_epoch, t.topic_id


def produce_to(cluster: Cluster, node: int, topic: str, version: int) -> Any:
    req = produce_request(topic, 0, build_batch([(None, b"kip-951")], timestamp=0),
                          version=version)
    with _client(cluster, node) as client:
        return client.request(req, version, ProduceResponse)


def fetch_from(cluster: Cluster, node: int, topic_id: uuid.UUID, version: int,
               leader_epoch: int = -1) -> Any:
    topic_cls = FetchRequest.FetchTopic
    part = topic_cls.FetchPartition(partition=0, current_leader_epoch=leader_epoch,
                                    fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                                    partition_max_bytes=1 << 20)
    req = FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[topic_cls(topic_id=topic_id, partitions=[part])],
        forgotten_topics_data=[], rack_id="")
    with _client(cluster, node) as client:
        return client.request(req, version, FetchResponse)


def hint(resp: Any, part: Any) -> tuple[int, int, list[tuple[int, str, int]]]:
    """(leader id, leader epoch, endpoints) a refused partition names."""
    return (part.current_leader.leader_id, part.current_leader.leader_epoch,
            [(e.node_id, e.host, e.port) for e in resp.node_endpoints])


def endpoint(cluster: Cluster, node: int) -> list[tuple[int, str, int]]:
    broker = cluster.brokers[node]
    return [(node, broker.host, broker.port)]


def test_not_leader_answers_name_the_current_leader(cluster: Cluster, topic: str):
    cluster.start()
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader, epoch, topic_id = wait_for("a leader", lambda: (
        found := leader_and_epoch(cluster, 1, topic))[0] > 0 and found)
    follower = next(n for n in (1, 2, 3) if n != leader)

    for version in (PRODUCE_VERSION, 11):
        resp = produce_to(cluster, follower, topic, version)
        [part] = resp.responses[0].partition_responses
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert hint(resp, part) == (leader, epoch, endpoint(cluster, leader))
    for version in (FETCH_VERSION, LATEST_FETCH_VERSION):
        # A consumer may read a follower: served, no hint.
        resp = fetch_from(cluster, follower, topic_id, version)
        [part] = resp.responses[0].partitions
        assert part.error_code == ErrorCode.NONE and part.current_leader is None
    # A broker that leads answers without a hint.
    led = produce_to(cluster, leader, topic, PRODUCE_VERSION)
    assert led.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert led.responses[0].partition_responses[0].current_leader is None
    assert not led.node_endpoints

    cluster.brokers[leader].kill()
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader, new_epoch, _ = wait_for("a new leader", lambda: (
        found := leader_and_epoch(cluster, survivors[0], topic))[0] in survivors and found)
    assert new_epoch > epoch
    other = next(n for n in survivors if n != new_leader)
    resp = wait_for("the other survivor naming the new leader", lambda: (
        r := produce_to(cluster, other, topic, 11)).responses[0].partition_responses[0]
        .current_leader.leader_id == new_leader and r)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert hint(resp, part) == (new_leader, new_epoch, endpoint(cluster, new_leader))
    # The old epoch at the new leader, or at the follower once it knows the
    # new epoch: fenced, with the same hint.
    resp = fetch_from(cluster, new_leader, topic_id, LATEST_FETCH_VERSION, leader_epoch=epoch)
    [part] = resp.responses[0].partitions
    assert part.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert hint(resp, part) == (new_leader, new_epoch, endpoint(cluster, new_leader))
    for version in (FETCH_VERSION, LATEST_FETCH_VERSION):
        resp = wait_for("the follower fencing the old epoch", lambda v=version: (
            r := fetch_from(cluster, other, topic_id, v, leader_epoch=epoch))
            .responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH and r)
        [part] = resp.responses[0].partitions
        assert hint(resp, part) == (new_leader, new_epoch, endpoint(cluster, new_leader))
    # Older versions have no room for the hint.
    old = fetch_from(cluster, other, topic_id, FETCH_VERSION - 1, leader_epoch=epoch)
    assert old.responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert old.responses[0].partitions[0].current_leader is None
