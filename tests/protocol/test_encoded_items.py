"""Responses with their array items encoded ahead of time equal the plain
encoding, for every Metadata version tierd speaks."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from protocol import api, encoded_items

METADATA_KEY = 3


def _topics(version: int, count: int, partitions: int) -> list[object]:
    topic_cls = MetadataResponse[version].MetadataResponseTopic
    part_cls = topic_cls.MetadataResponsePartition
    # Names and partition counts around the varint length boundaries.
    return [topic_cls(error_code=3 if n == 1 else 0, name=f"topic-{n}-" + "x" * (n * 61 % 200),
                      topic_id=uuid.UUID(int=n + 1), is_internal=n == 2,
                      partitions=[part_cls(error_code=0, partition_index=i, leader_id=i % 3,
                                           leader_epoch=7, replica_nodes=[0, 1, 2],
                                           isr_nodes=[0, 1], offline_replicas=[2])
                                  for i in range(partitions * n)],
                      authorized_operations=None)
            for n in range(count)]


def _response(version: int, topics: list[object]) -> object:
    resp = MetadataResponse[version]
    brokers = [resp.MetadataResponseBroker(node_id=i, host=f"127.0.0.{i + 1}", port=9092 + i,
                                           rack=None if i else "r1") for i in range(3)]
    return resp(throttle_time_ms=0, brokers=brokers, cluster_id="cluster-a", controller_id=1,
                topics=topics)


@pytest.mark.parametrize("version", range(1, 13))
@pytest.mark.parametrize("count", [0, 1, 5, 130])
def test_spliced_items_give_the_plain_encoding(version: int, count: int) -> None:
    header = api.RequestHeader(api_key=METADATA_KEY, api_version=version, correlation_id=9,
                               client_id="c", size=0)
    flexible = api.SUPPORTED[METADATA_KEY].is_flexible(version)
    topics = _topics(version, count, 1 if count > 5 else 70)
    plain = api.encode_response(header, _response(version, topics))
    layout = encoded_items.layout(MetadataResponse[version], "topics", version, flexible)
    items = [layout.item_bytes(t) for t in topics]
    assert layout.encode(header, _response(version, []), items) == plain


def test_a_message_with_items_of_its_own_is_refused() -> None:
    header = api.RequestHeader(api_key=METADATA_KEY, api_version=12, correlation_id=1,
                               client_id=None, size=0)
    layout = encoded_items.layout(MetadataResponse[12], "topics", 12, True)
    with pytest.raises(ValueError, match="must be empty"):
        layout.encode(header, _response(12, _topics(12, 1, 1)), [])
