"""Fetch sessions (KIP-227) against a real broker: the protocol on the wire,
and real clients reading through incremental fetches.

The wire test speaks Fetch v12 over a socket: a full request with epoch 0
opens a session, incremental requests are answered with only the partitions
that have news, a wrong epoch or an unknown session is refused with the
protocol's error, forgotten partitions are no longer answered, and epoch -1
closes the session. The client tests read a multi-partition topic with each
client library while it is written, and check every record arrived and that
the client's fetches were incremental (the broker's counter of incremental
requests moved), so the session path carries real consumers (the Java client
and kafka-python; librdkafka and aiokafka do not use sessions).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse

from protocol.errors import ErrorCode
from system_tests._proc import (
    RawClient,
    TierdProc,
    fetch_request,
    produce_request,
    scrape,
    start_tierd,
    wait_for,
)
from system_tests.admin import create_topic
from system_tests.clients import DRIVERS
from system_tests.messages import OutMessage
from tests.helpers import batch

FETCH_V = 12
PARTITIONS = 3


def produce(client: RawClient, topic: str, partition: int, values: list[bytes]) -> None:
    resp = client.request(produce_request(topic, partition, bytes(batch(values))), 9,
                          ProduceResponse[9])
    assert resp.responses[0].partition_responses[0].error_code == 0


def fetch(client: RawClient, topic: str, wanted: dict[int, int], session_id: int, epoch: int,
          forgotten: list[int] | None = None, max_wait_ms: int = 0) -> object:
    req = fetch_request({(topic, p): o for p, o in wanted.items()}, version=FETCH_V,
                        max_wait_ms=max_wait_ms)
    req.session_id, req.session_epoch = session_id, epoch
    if forgotten:
        req.forgotten_topics_data = [FetchRequest[FETCH_V].ForgottenTopic(
            topic=topic, partitions=forgotten)]
    return client.request(req, FETCH_V, FetchResponse[FETCH_V])


def answered(resp: object) -> dict[int, tuple[int, bool]]:
    """partition -> (high watermark, whether it carries records)."""
    return {p.partition_index: (p.high_watermark, bool(p.records))
            for t in resp.responses for p in t.partitions}  # type: ignore[attr-defined]


def sessions(broker: TierdProc) -> float:
    return scrape(broker.metrics_url).total("tierd_NumIncrementalFetchSessions")


def incremental_requests(broker: TierdProc) -> float:
    return scrape(broker.metrics_url).total("tierd_incremental_fetch_requests_total")


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> TierdProc:
    return start_tierd(request, tmp_path / "broker", {"tierd.metrics.port": "0"})


def test_session_protocol_on_the_wire(broker: TierdProc, topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    host, port = broker.bootstrap.split(":")
    with RawClient(host, int(port)) as client:
        produce(client, topic, 0, [b"a", b"b"])
        full = fetch(client, topic, dict.fromkeys(range(PARTITIONS), 0), 0, 0)
        sid = full.session_id  # type: ignore[attr-defined]
        assert full.error_code == 0 and sid != 0  # type: ignore[attr-defined]
        assert answered(full) == {0: (2, True), 1: (0, False), 2: (0, False)}

        # Nothing new: the consumer moved its position on partition 0 only.
        quiet = fetch(client, topic, {0: 2}, sid, 1, max_wait_ms=200)
        assert quiet.error_code == 0 and answered(quiet) == {}  # type: ignore[attr-defined]

        # New data on partition 2 is answered though the request names nothing.
        produce(client, topic, 2, [b"c"])
        news = fetch(client, topic, {}, sid, 2)
        assert answered(news) == {2: (1, True)}

        replayed = fetch(client, topic, {}, sid, 2)
        assert replayed.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # type: ignore[attr-defined]
        unknown = fetch(client, topic, {}, sid + 1000, 1)
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # type: ignore[attr-defined]

        # A refused request does not move the session's epoch: 3 is next.
        forget = fetch(client, topic, {2: 1}, sid, 3, forgotten=[1])
        assert forget.error_code == 0 and answered(forget) == {}  # type: ignore[attr-defined]
        produce(client, topic, 1, [b"d"])
        produce(client, topic, 0, [b"e"])
        after = fetch(client, topic, {}, sid, 4)
        assert answered(after) == {0: (3, True)}  # partition 1 was forgotten

        # The gauge is a snapshot taken every second on the event loop.
        wait_for(lambda: sessions(broker) >= 1, 10, "the session in NumIncrementalFetchSessions")
        closed = fetch(client, topic, {0: 3}, sid, -1)
        assert closed.session_id == 0 and answered(closed) == {  # type: ignore[attr-defined]
            0: (3, False)}
        gone = fetch(client, topic, {}, sid, 5)
        assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # type: ignore[attr-defined]


# The clients that open sessions. librdkafka (confluent-kafka, kcat) and
# aiokafka send every fetch with session id 0 and epoch -1 (no session), which
# the sessionless path answers as before; the other system tests cover them.
def test_an_incremental_answer_across_topics_sends_every_partition_whole(
        broker: TierdProc, topic: str) -> None:
    """Partitions with news come from several topics, in any order; with data
    large enough to go by sendfile, each must land in its own topic."""
    other = f"{topic}-b"
    create_topic(broker.bootstrap, topic, 2)
    create_topic(broker.bootstrap, other, 2)
    host, port = broker.bootstrap.split(":")
    big = [bytes([n]) * 40_000 for n in range(3)]
    with RawClient(host, int(port)) as client:
        req = fetch_request({(t, p): 0 for t in (topic, other) for p in (0, 1)},
                            version=FETCH_V)
        req.session_epoch = 0
        sid = client.request(req, FETCH_V, FetchResponse[FETCH_V]).session_id
        assert sid != 0
        produce(client, topic, 1, [big[0]])
        produce(client, other, 0, [big[1]])
        produce(client, topic, 0, [big[2]])
        news = fetch(client, topic, {}, sid, 1)
        got = {(t.topic, p.partition_index): p.records
               for t in news.responses for p in t.partitions}  # type: ignore[attr-defined]
        assert set(got) == {(topic, 1), (other, 0), (topic, 0)}
        for tp, value in (((topic, 1), big[0]), ((other, 0), big[1]), ((topic, 0), big[2])):
            assert value in got[tp]


@pytest.mark.parametrize("driver", ["java", "kafka-python"])
def test_clients_read_everything_through_incremental_fetches(
        broker: TierdProc, topic: str, driver: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    client = DRIVERS[driver]
    values = {p: [f"{p}-{i}".encode() for i in range(300)] for p in range(PARTITIONS)}
    client.produce(broker.bootstrap, topic, [OutMessage(p, None, v) for p, vals in values.items()
                                             for v in vals])
    before = incremental_requests(broker)
    got = client.consume(broker.bootstrap, topic, dict.fromkeys(range(PARTITIONS), 0),
                         timeout_s=60)
    by_partition: dict[int, list[bytes]] = {}
    for record in got:
        by_partition.setdefault(record.partition, []).append(record.value)
    assert by_partition == values
    wait_for(lambda: incremental_requests(broker) > before, 10,
             f"an incremental fetch from {driver}")
