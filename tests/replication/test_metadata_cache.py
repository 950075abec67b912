"""The metadata cache's stamps: a topic's stamp moves on every change to it or
its partitions and on nothing else; the broker stamp moves when the live
brokers change."""

from __future__ import annotations

import uuid

from replication.metadata import TopicInfo
from replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState


def _topic(name: str, partitions: int = 2) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), partitions, {})


def test_a_topic_stamp_moves_with_its_partitions_only() -> None:
    cache = MetadataCache("c")
    cache.put_topic(_topic("a"))
    cache.put_topic(_topic("b"))
    cache.put_partition(("a", 0), PartitionState(1, 3, [1, 2], [1, 2]))
    a, b = cache.topic_stamp("a"), cache.topic_stamp("b")
    cache.put_partition(("a", 0), PartitionState(1, 3, [1, 2], [1, 2]))  # the same state
    assert cache.topic_stamp("a") == a
    cache.put_partition(("a", 0), PartitionState(1, 3, [1, 2], [1]))  # ISR shrank
    assert cache.topic_stamp("a") != a and cache.topic_stamp("b") == b


def test_a_topic_created_again_never_has_an_old_stamp() -> None:
    cache = MetadataCache("c")
    cache.put_topic(_topic("a"))
    first = cache.topic_stamp("a")
    cache.remove_topic("a")
    assert cache.topic_stamp("a") != first
    cache.put_topic(_topic("a"))
    assert cache.topic_stamp("a") not in (first, (0, 0))


def test_the_broker_stamp_moves_when_the_live_brokers_change() -> None:
    cache = MetadataCache("c")
    one, two = BrokerEndpoint(1, "127.0.0.1", 9092), BrokerEndpoint(2, "127.0.0.1", 9093)
    cache.set_brokers([one, two])
    before = cache.topic_stamp("a")[1]
    cache.set_brokers([two, one])
    assert cache.topic_stamp("a")[1] == before
    cache.set_brokers([one])
    assert cache.topic_stamp("a")[1] != before
