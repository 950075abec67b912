"""DescribeTopicPartitions (KIP-966) and ElectLeaders against one broker:
the Java 4.x Admin paging through the broker's cursor, kafka-python's admin
client page by page, and raw requests for the errors Kafka answers.

The broker's max.request.partition.size.limit is small (``BROKER_LIMIT``), so
pages end where the broker says even when a client asks for more; its request
counter shows that the Java Admin really used DescribeTopicPartitions.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    CreateTopicsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
)

from protocol.errors import ErrorCode
from system_tests import javatool
from system_tests._proc import RawClient, TierdProc, create_topics_request, scrape, start_tierd

_Topic = DescribeTopicPartitionsRequest.TopicRequest
_Cursor = DescribeTopicPartitionsRequest.Cursor
_Elect = ElectLeadersRequest.TopicPartitions

# Every operation on a topic, as the protocol's bitfield (READ..ALTER_CONFIGS:
# bits 3-8 and 10, 11), reported when the broker has no authorizer.
ALL_TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# The broker's cap on partitions per DescribeTopicPartitions answer.
BROKER_LIMIT = 4
# More pages than any listing here needs (__consumer_offsets alone has 50 partitions).
MAX_PAGES = 200


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> TierdProc:
    """This module's own broker (it overrides the shared one)."""
    return start_tierd(request, Path(tmp_path_factory.mktemp("topic-partitions")),
                       {"max.request.partition.size.limit": str(BROKER_LIMIT)})


def _create(broker: TierdProc, *topics: tuple[str, int]) -> None:
    with RawClient(broker.host, broker.port) as raw:
        resp = raw.request(create_topics_request([(t, n, 1, {}) for t, n in topics]), 5,
                           CreateTopicsResponse[5])
    assert [t.error_code for t in resp.topics] == [0] * len(topics)


def _describe(broker: TierdProc, names: list[str], limit: int,
              cursor: tuple[str, int] | None = None) -> Any:
    req = DescribeTopicPartitionsRequest[0](
        topics=[_Topic(name=n) for n in names], response_partition_limit=limit,
        cursor=None if cursor is None else _Cursor(topic_name=cursor[0],
                                                   partition_index=cursor[1]))
    with RawClient(broker.host, broker.port) as raw:
        return raw.request(req, 0, DescribeTopicPartitionsResponse[0])


def _pages(broker: TierdProc, names: list[str], limit: int) -> list[list[tuple[str, list[int]]]]:
    """Follow NextCursor from the start: each page's (topic, partitions)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        pages, cursor = [], None
        while True:
            page = admin.describe_topic_partitions(names, response_partition_limit=limit,
                                                   cursor=cursor)
            pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]])
                          for t in page["topics"]])
            cursor = page["next_cursor"]
            if cursor is None:
                return pages
            assert len(pages) < MAX_PAGES, "the cursor never ends"
    finally:
        admin.close()


def test_pages_follow_the_cursor(broker: TierdProc, topic: str) -> None:
    a, b, c = f"{topic}-a", f"{topic}-b", f"{topic}-c"
    _create(broker, (c, 2), (a, 3), (b, 1))
    # Names in any order, answered in name order; 2 partitions a page.
    assert _pages(broker, [c, a, b], 2) == [
        [(a, [0, 1])], [(a, [2]), (b, [0])], [(c, [0, 1])]]
    # A page that ends exactly at a topic's end points at the next topic's start.
    first = _describe(broker, [a, b, c], 3)
    assert [(t.name, len(t.partitions)) for t in first.topics] == [(a, 3)]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (b, 0)
    # Asking for more than the broker's cap gets the cap; the last page has no cursor.
    capped = _describe(broker, [a, b, c], 100)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in capped.topics] == [
        (a, [0, 1, 2]), (b, [0])]
    assert (capped.next_cursor.topic_name, capped.next_cursor.partition_index) == (c, 0)
    last = _describe(broker, [a, b, c], 100, cursor=(c, 0))
    assert [(t.name, len(t.partitions)) for t in last.topics] == [(c, 2)]
    assert last.next_cursor is None
    # Starting inside a topic; a limit of 0 still gives one partition (Kafka's minimum).
    mid = _describe(broker, [a, b], 0, cursor=(a, 1))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in mid.topics] == [
        (a, [1])]
    assert (mid.next_cursor.topic_name, mid.next_cursor.partition_index) == (a, 2)


def test_partition_details_and_topic_fields(broker: TierdProc, topic: str) -> None:
    _create(broker, (topic, 2))
    resp = _describe(broker, [topic], 2000)
    [t] = resp.topics
    assert (t.error_code, t.name, t.is_internal) == (0, topic, False)
    assert t.topic_id != uuid.UUID(int=0)
    assert t.topic_authorized_operations == ALL_TOPIC_OPS
    node = broker_node_id(broker)
    for p in t.partitions:
        assert (p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes) == (0, node, [node],
                                                                              [node])
        assert p.leader_epoch >= 0
        assert (p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) == ([], [], [])
    # The same topic id as Metadata reports.
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["topic_id"] == str(t.topic_id)


def broker_node_id(broker: TierdProc) -> int:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [node] = admin.describe_cluster()["brokers"]
        return int(node["broker_id"])
    finally:
        admin.close()


def test_unknown_invalid_and_bad_cursor(broker: TierdProc, topic: str) -> None:
    _create(broker, (topic, 1))
    missing = f"{topic}-missing"
    resp = _describe(broker, [topic, missing, "bad name!"], 2000)
    got = {t.name: (t.error_code, t.topic_id, len(t.partitions)) for t in resp.topics}
    zero = None  # kafka-python decodes the all-zero topic id as None
    assert got["bad name!"] == (ErrorCode.INVALID_TOPIC_EXCEPTION, zero, 0)
    assert got[missing] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, zero, 0)
    assert got[topic][0] == 0
    # The listing of all topics (page after page) has no unknown ones, and includes ours.
    everything = [name for page in _pages(broker, [], 100000) for name, _ in page]
    assert topic in everything and missing not in everything
    # A cursor naming a topic outside the list, or a negative partition: invalid.
    for cursor in ((missing + "-other", 0), (topic, -1)):
        bad = _describe(broker, [topic, missing], 10, cursor=cursor)
        assert [(t.name, t.error_code) for t in bad.topics] == [
            (topic, ErrorCode.INVALID_REQUEST), (missing, ErrorCode.INVALID_REQUEST)]


def test_java_admin_describes_through_pages(broker: TierdProc, topic: str) -> None:
    a, b = f"{topic}-a", f"{topic}-b"
    _create(broker, (a, 5), (b, 3))
    bootstrap = ["--bootstrap", broker.bootstrap]
    before = _requests(broker)
    results = javatool.run_batch([
        ["admin", *bootstrap, "describe-topics-paged", "--topic", a, "--topic", b,
         "--limit", "2"],
        ["admin", *bootstrap, "describe-topics", "--topic", a],
        ["admin", *bootstrap, "describe-topics-paged", "--limit", "1"],
    ])
    for result in results:
        assert result["exit"] == javatool.EXIT_OK, result
    paged, plain, everything = (r["result"]["topics"] for r in results)
    assert [p["partition"] for p in paged[a]["partitions"]] == list(range(5))
    assert [p["partition"] for p in paged[b]["partitions"]] == list(range(3))
    assert all(p["elr"] == [] and p["last_known_elr"] == [] for p in paged[a]["partitions"])
    assert plain[a]["topic_id"] == paged[a]["topic_id"]
    assert {a, b} <= set(everything)
    assert len(everything[a]["partitions"]) == 5
    # 8 partitions 2 a page, 5 in one (2 pages under the broker's cap), and the
    # listing 1 a page: at least 4 + 2 + 8 requests.
    assert _requests(broker) - before >= 14


def _requests(broker: TierdProc) -> float:
    return scrape(broker.metrics_url).total("tierd_requests_total",
                                            api="DescribeTopicPartitions")


def _elect(broker: TierdProc, version: int, election_type: int,
           partitions: list[tuple[str, list[int]]] | None) -> Any:
    fields: dict[str, Any] = {"timeout_ms": 10000, "topic_partitions": None if partitions is None
                              else [_Elect(topic=t, partitions=ps) for t, ps in partitions]}
    if version >= 1:
        fields["election_type"] = election_type
    with RawClient(broker.host, broker.port) as raw:
        return raw.request(ElectLeadersRequest[version](**fields), version,
                           ElectLeadersResponse[version])


def _results(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition_id): p.error_code
            for t in resp.replica_election_results for p in t.partition_result}


def test_single_node_elections_are_never_needed(broker: TierdProc, topic: str) -> None:
    _create(broker, (topic, 2))
    missing = f"{topic}-missing"
    wanted = [(topic, [0, 1, 7]), (missing, [0])]
    for version, kind in ((0, 0), (1, 1), (2, 0), (2, 1)):
        resp = _elect(broker, version, kind, wanted)
        assert _results(resp) == {
            (topic, 0): ErrorCode.ELECTION_NOT_NEEDED, (topic, 1): ErrorCode.ELECTION_NOT_NEEDED,
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (missing, 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}, (version, kind)
        assert getattr(resp, "error_code", 0) == 0
    # All partitions: nothing needed an election, so nothing is listed.
    everything = _elect(broker, 2, 0, None)
    assert everything.error_code == 0 and _results(everything) == {}
    # An election type Kafka does not know: the request is invalid.
    bad = _elect(broker, 2, 5, [(topic, [0])])
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    assert _results(bad) == {(topic, 0): ErrorCode.INVALID_REQUEST}


def test_java_admin_elect_leaders_single_node(broker: TierdProc, topic: str) -> None:
    _create(broker, (topic, 1))
    [result] = javatool.run_batch([
        ["admin", "--bootstrap", broker.bootstrap, "elect-leaders", "--election-type",
         "preferred", "--partition", f"{topic}:0", "--partition", f"{topic}:3"]])
    assert result["exit"] == javatool.EXIT_OK, result
    assert result["result"]["partitions"] == {
        f"{topic}:0": "ElectionNotNeededException",
        f"{topic}:3": "UnknownTopicOrPartitionException"}
