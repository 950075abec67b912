"""DescribeTopicPartitions paging (``broker.topic_partitions_page``) on a
metadata cache: where pages stop, what the cursor says, who is hidden."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsRequest

from broker.topic_partitions_page import OPERATIONS_UNKNOWN, describe_page
from protocol.errors import ErrorCode
from replication.metadata import TopicInfo
from replication.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState

REQ = DescribeTopicPartitionsRequest[0]


def _cache(topics: dict[str, int], live: tuple[int, ...] = (1, 2)) -> MetadataCache:
    cache = MetadataCache("c")
    cache.set_brokers([BrokerEndpoint(n, "h", 9000 + n) for n in live])
    for name, count in topics.items():
        cache.put_topic(TopicInfo(name, uuid.uuid4(), count))
        for p in range(count):
            cache.put_partition((name, p), PartitionState(2, 5, [1, 2], [2], []))
    return cache


def _req(names: list[str], limit: int, cursor: tuple[str, int] | None = None) -> Any:
    return REQ(topics=[REQ.TopicRequest(name=n) for n in names], response_partition_limit=limit,
               cursor=None if cursor is None else REQ.Cursor(topic_name=cursor[0],
                                                             partition_index=cursor[1]))


def _page(cache: MetadataCache, req: Any, broker_limit: int = 2000,
          hidden: frozenset[str] = frozenset()) -> tuple[list[tuple[str, int, list[int]]],
                                                         tuple[str, int] | None]:
    resp = describe_page(cache, req, None, broker_limit, lambda n: n not in hidden, lambda n: 7)
    cursor = resp.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions])
             for t in resp.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


def test_pages_stop_inside_and_between_topics() -> None:
    cache = _cache({"b": 3, "a": 2})
    assert _page(cache, _req(["b", "a"], 3)) == ([("a", 0, [0, 1]), ("b", 0, [0])], ("b", 1))
    assert _page(cache, _req(["b", "a"], 3, ("b", 1))) == ([("b", 0, [1, 2])], None)
    assert _page(cache, _req(["a", "b"], 2)) == ([("a", 0, [0, 1])], ("b", 0))


def test_the_broker_limit_caps_and_one_partition_is_the_least() -> None:
    cache = _cache({"a": 4})
    assert _page(cache, _req(["a"], 100), broker_limit=3) == ([("a", 0, [0, 1, 2])], ("a", 3))
    assert _page(cache, _req(["a"], -5)) == ([("a", 0, [0])], ("a", 1))


def test_all_topics_from_the_cursor_skip_hidden_ones_silently() -> None:
    cache = _cache({"a": 1, "b": 1, "c": 1})
    assert _page(cache, _req([], 10, ("b", 0)), hidden=frozenset({"c"})) == (
        [("b", 0, [0])], None)


def test_named_topics_unknown_invalid_and_refused() -> None:
    cache = _cache({"a": 1})
    resp = describe_page(cache, _req(["zz", "a", "no way", "secret"], 10), None, 2000,
                         lambda n: n != "secret", lambda n: 7)
    got = [(t.name, t.error_code, t.topic_id, t.topic_authorized_operations)
           for t in resp.topics]
    zero = uuid.UUID(int=0)
    assert got == [
        ("a", 0, cache.topic("a").topic_id, 7),
        ("no way", ErrorCode.INVALID_TOPIC_EXCEPTION, zero, 7),
        ("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, zero, 7),
        ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED, zero, OPERATIONS_UNKNOWN)]


def test_a_cursor_outside_the_list_or_negative_is_invalid() -> None:
    cache = _cache({"a": 2})
    for cursor in (("b", 0), ("a", -1)):
        assert _page(cache, _req(["a"], 10, cursor)) == (
            [("a", ErrorCode.INVALID_REQUEST, [])], None)


def test_partition_fields_and_a_dead_leader() -> None:
    cache = _cache({"a": 1}, live=(1,))
    [topic] = describe_page(cache, _req(["a"], 10), None, 2000, lambda n: True,
                            lambda n: 0).topics
    [p] = topic.partitions
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (-1, 5, [1, 2], [2])
    assert (p.eligible_leader_replicas, p.last_known_elr) == ([], [])
