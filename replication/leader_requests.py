"""Client requests one broker sends another's partition leader: Produce (a
record batch, acks=all), Fetch (as a consumer, up to the high watermark) and
ListOffsets (earliest / earliest-local with the leader's epoch).

Used where a broker needs a partition it does not lead: the remote log
metadata manager writing and reading ``__remote_log_metadata``, and a
follower rebuilding its state from the remote tier.

Error handling: a partition-level error code comes back as ``KafkaApiError``
(with that code); a connection failure as ``PeerError``. Both are
retriable for the callers here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from protocol.errors import ErrorCode, KafkaApiError
from protocol.fetch_fields import CONSUMER_REPLICA_ID
from replication.peer import Peer

ACKS_ALL = -1
# Produce v9: flexible, topic names (v13 switches to ids).
PRODUCE_VERSION = 9
# Fetch v12: topic names, high watermark and log start in each answer.
FETCH_VERSION = 12
# ListOffsets v9: timestamps -4 (earliest local) and -5 (latest tiered); v11
# only for -6 (earliest pending upload, KIP-1023), so that the other lookups
# still work against a leader from before it during a rolling upgrade.
LIST_OFFSETS_VERSION = 9
PENDING_UPLOAD_VERSION = 11
EARLIEST_PENDING_UPLOAD = -6
# OffsetForLeaderEpoch v4: replica id, flexible.
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
NO_EPOCH = -1


def _raise_for(code: int, what: str) -> None:
    if code:
        try:
            error = ErrorCode(code)
        except ValueError:
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        raise KafkaApiError(error, f"{what}: {error.name}")


async def produce(peer: Peer, topic: str, partition: int, batch: bytes,
                  timeout_ms: int) -> int:
    """Append ``batch`` on the leader with acks=all; returns its base offset."""
    req = ProduceRequest[PRODUCE_VERSION]
    topic_cls = req.TopicProduceData
    body = req(transactional_id=None, acks=ACKS_ALL, timeout_ms=timeout_ms, topic_data=[
        topic_cls(name=topic, partition_data=[
            topic_cls.PartitionProduceData(index=partition, records=batch)])])
    resp = await peer.request(ProduceRequest, ProduceResponse, PRODUCE_VERSION, body,
                              timeout_s=timeout_ms / 1000 + 5)
    for t in resp.responses:
        for p in t.partition_responses:
            if p.index == partition:
                _raise_for(p.error_code, f"produce to {topic}-{partition}")
                return int(p.base_offset)
    raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")


async def fetch(peer: Peer, topic: str, partition: int, offset: int, max_bytes: int,
                replica_id: int = CONSUMER_REPLICA_ID) -> tuple[bytes, int]:
    """Read committed batches from ``offset``; (record bytes, high watermark)."""
    req = FetchRequest[FETCH_VERSION]
    topic_cls = req.FetchTopic
    body = req(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
               isolation_level=0, session_id=0, session_epoch=-1,
               topics=[topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(
                   partition=partition, current_leader_epoch=NO_EPOCH, fetch_offset=offset,
                   last_fetched_epoch=NO_EPOCH, log_start_offset=-1,
                   partition_max_bytes=max_bytes)])],
               forgotten_topics_data=[], rack_id="")
    resp = await peer.request(FetchRequest, FetchResponse, FETCH_VERSION, body)
    _raise_for(resp.error_code, f"fetch {topic}-{partition}")
    for t in resp.responses:
        for p in t.partitions:
            if p.partition_index == partition:
                _raise_for(p.error_code, f"fetch {topic}-{partition}")
                return bytes(p.records or b""), int(p.high_watermark)
    raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")


async def long_poll(peer: Peer, topic: str, positions: Mapping[int, int], max_wait_ms: int,
                    min_bytes: int, max_bytes: int, partition_max_bytes: int,
                    timeout_ms: int) -> dict[int, bytes]:
    """One consumer Fetch of several partitions of ``topic`` from ``positions``,
    parked on the leader up to ``max_wait_ms`` until ``min_bytes`` are there.

    Returns:
        partition -> record bytes (empty when nothing new).

    Raises:
        KafkaApiError: a request- or partition-level error (the first one).
    """
    req = FetchRequest[FETCH_VERSION]
    topic_cls = req.FetchTopic
    body = req(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
               max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
               topics=[topic_cls(topic=topic, partitions=[topic_cls.FetchPartition(
                   partition=p, current_leader_epoch=NO_EPOCH, fetch_offset=offset,
                   last_fetched_epoch=NO_EPOCH, log_start_offset=-1,
                   partition_max_bytes=partition_max_bytes)
                   for p, offset in sorted(positions.items())])],
               forgotten_topics_data=[], rack_id="")
    resp = await peer.request(FetchRequest, FetchResponse, FETCH_VERSION, body,
                              timeout_s=(max_wait_ms + timeout_ms) / 1000)
    _raise_for(resp.error_code, f"fetch {topic}")
    out: dict[int, bytes] = {}
    for t in resp.responses:
        for p in t.partitions:
            _raise_for(p.error_code, f"fetch {topic}-{p.partition_index}")
            out[int(p.partition_index)] = bytes(p.records or b"")
    return out


async def list_offset(peer: Peer, topic: str, partition: int, timestamp: int,
                      current_leader_epoch: int = NO_EPOCH,
                      replica_id: int = CONSUMER_REPLICA_ID) -> tuple[int, int]:
    """ListOffsets for one partition; (offset, leader epoch)."""
    topic_cls = ListOffsetsRequest.ListOffsetsTopic
    version = (PENDING_UPLOAD_VERSION if timestamp == EARLIEST_PENDING_UPLOAD
               else LIST_OFFSETS_VERSION)
    extra = ({"timeout_ms": int(peer.request_timeout * 1000)}
             if version >= PENDING_UPLOAD_VERSION else {})
    body = ListOffsetsRequest[version](
        replica_id=replica_id, isolation_level=0, topics=[topic_cls(name=topic, partitions=[
            topic_cls.ListOffsetsPartition(partition_index=partition,
                                           current_leader_epoch=current_leader_epoch,
                                           timestamp=timestamp)])], **extra)
    resp: Any = await peer.request(ListOffsetsRequest, ListOffsetsResponse, version, body)
    for t in resp.topics:
        for p in t.partitions:
            if p.partition_index == partition:
                _raise_for(p.error_code, f"list offsets of {topic}-{partition}")
                return int(p.offset), int(p.leader_epoch)
    raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")


async def end_offset_for_epoch(peer: Peer, topic: str, partition: int, leader_epoch: int,
                               current_leader_epoch: int = NO_EPOCH,
                               replica_id: int = CONSUMER_REPLICA_ID) -> tuple[int, int]:
    """OffsetForLeaderEpoch: (the largest epoch <= ``leader_epoch`` the leader
    knows, where it ends), (-1, -1) if none."""
    req = OffsetForLeaderEpochRequest[OFFSET_FOR_LEADER_EPOCH_VERSION]
    topic_cls = req.OffsetForLeaderTopic
    body = req(replica_id=replica_id, topics=[topic_cls(topic=topic, partitions=[
        topic_cls.OffsetForLeaderPartition(partition=partition,
                                           current_leader_epoch=current_leader_epoch,
                                           leader_epoch=leader_epoch)])])
    resp: Any = await peer.request(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                   OFFSET_FOR_LEADER_EPOCH_VERSION, body)
    for t in resp.topics:
        for p in t.partitions:
            if p.partition == partition:
                _raise_for(p.error_code, f"offset for leader epoch of {topic}-{partition}")
                return int(p.leader_epoch), int(p.end_offset)
    raise KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {topic}-{partition}")
