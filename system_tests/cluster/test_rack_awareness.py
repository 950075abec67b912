"""Racks: rack-aware replica placement and fetch from follower (KIP-392).

Three brokers, each with its ``broker.rack``, on a real ZooKeeper. A new
topic's replicas span the racks (also its added partitions). With
``replica.selector.class`` set to Kafka's RackAwareReplicaSelector, a leader
tells a consumer that names its ``client.rack`` to read from the follower in
its rack (``preferred_read_replica``), and that follower serves the records:
checked on the wire, then with the Java client and librdkafka, by the bytes
each broker's metrics count. Below the local log start of a tiered topic the
follower reads the remote tier itself.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse

from system_tests import javatool
from system_tests._proc import RawClient, scrape
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import produce, start_with_tiered_topic
from system_tests.harness import TierdBroker, free_port
from system_tests.tiered_helpers import RemoteTier

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RECORDS = 30
# Fetch v12: rack_id (v11+) and topic names (before v13).
FETCH_VERSION = 12


def start_in_racks(cluster: Cluster, racks: dict[int, str],
                   config: dict[str, str] | None = None) -> None:
    """Start the brokers, each in its rack and with its own metrics port."""
    for node, broker in cluster.brokers.items():
        assert isinstance(broker, TierdBroker)
        broker.config["broker.rack"] = racks[node]
        broker.config["tierd.metrics.port"] = str(free_port())
    cluster.start(config)


def topic_metric(cluster: Cluster, node: int, name: str, topic: str) -> float:
    broker = cluster.brokers[node]
    assert isinstance(broker, TierdBroker)
    url = f"http://{broker.host}:{broker.config['tierd.metrics.port']}/metrics"
    return scrape(url).samples.get((name, (("topic", topic),)), 0.0)


def bytes_out(cluster: Cluster, topic: str) -> dict[int, float]:
    """Record bytes each broker has sent to consumers of ``topic``."""
    return {n: topic_metric(cluster, n, "tierd_bytes_out_total", topic) for n in cluster.live}


def raw_fetch(cluster: Cluster, node: int, topic: str, rack: str, offset: int = 0) -> object:
    req = FetchRequest[FETCH_VERSION]
    body = req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1,
               topics=[req.FetchTopic(topic=topic, partitions=[req.FetchTopic.FetchPartition(
                   partition=0, current_leader_epoch=-1, fetch_offset=offset,
                   last_fetched_epoch=-1, log_start_offset=-1,
                   partition_max_bytes=1 << 20)])],
               forgotten_topics_data=[], rack_id=rack)
    broker = cluster.brokers[node]
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(body, FETCH_VERSION, FetchResponse[FETCH_VERSION])
    [answer] = resp.responses[0].partitions
    return answer


def confluent_read(cluster: Cluster, topic: str, rack: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": ",".join(cluster.bootstrap()),
                         "group.id": "rack-test", "enable.auto.commit": False,
                         "client.rack": rack, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []

        def more() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            return len(values) >= count

        wait_for(f"{count} records with librdkafka in rack {rack}", more, interval_s=0)
        return values
    finally:
        consumer.close()


def java_read(cluster: Cluster, topic: str, rack: str) -> list[bytes]:
    import base64

    result = javatool.run(["consume", "--bootstrap", ",".join(cluster.bootstrap()),
                           "--topic", topic, "--timeout-ms", str(int(WAIT_S * 1000)),
                           "--start", "0:0", "--prop", f"client.rack={rack}"],
                          timeout_s=WAIT_S + 30)
    return [base64.b64decode(r["v"]) for r in result["records"]]


def follower_and_rack(cluster: Cluster, topic: str, racks: dict[int, str]) -> tuple[int, int]:
    """(leader, a follower in the ISR) of partition 0 once every replica is in sync."""
    state = wait_for(f"{topic}-0 fully in sync", lambda: (
        p if len((p := cluster.partitions(topic)[0])["isr"]) == 3 else None))
    leader = state["leader"]
    return leader, next(n for n in sorted(racks) if n != leader)


def test_replicas_of_new_and_added_partitions_span_the_racks(cluster: Cluster, topic: str):
    # Broker 1 alone in rack "a": rack-unaware placement would put some
    # partitions on brokers 2 and 3 only (both in rack "b").
    racks = {1: "a", 2: "b", 3: "b"}
    start_in_racks(cluster, racks)
    assert {b["broker_id"]: b["rack"] for b in cluster.describe_cluster()["brokers"]} == racks
    cluster.create_topic(topic, 12, 2)
    admin = cluster.admin()
    try:
        from kafka.admin import NewPartitions

        admin.create_partitions({topic: NewPartitions(18)})
    finally:
        admin.close()
    parts = wait_for("18 partitions", lambda: p if len(p := cluster.partitions(topic)) == 18
                     else None)
    for index, p in parts.items():
        assert {racks[b] for b in p["replicas"]} == {"a", "b"}, (index, p["replicas"])


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: Cluster, topic: str):
    racks = {1: "r1", 2: "r2", 3: "r3"}
    start_in_racks(cluster, racks, {"replica.selector.class": RACK_AWARE})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    values = [f"v{i}".encode() * 20 for i in range(RECORDS)]
    produce(cluster, topic, values)
    leader, follower = follower_and_rack(cluster, topic, racks)
    rack = racks[follower]
    wait_for("the follower's high watermark at the log end",
             lambda: raw_fetch(cluster, follower, topic, rack).high_watermark == RECORDS)

    # On the wire: the leader redirects a consumer of the follower's rack,
    # answers one of its own rack or of none, and the follower serves.
    redirected = raw_fetch(cluster, leader, topic, rack)
    assert (redirected.error_code, redirected.preferred_read_replica) == (0, follower)
    assert not redirected.records and redirected.high_watermark == RECORDS
    for own in (racks[leader], ""):
        served = raw_fetch(cluster, leader, topic, own)
        assert served.preferred_read_replica == -1 and served.records
    from_follower = raw_fetch(cluster, follower, topic, rack)
    assert from_follower.error_code == 0 and from_follower.preferred_read_replica == -1
    assert from_follower.records

    # Real clients: every record, and the bytes come from the follower.
    for read in (java_read, lambda c, t, r: confluent_read(c, t, r, RECORDS)):
        before = bytes_out(cluster, topic)
        assert read(cluster, topic, rack) == values
        after = bytes_out(cluster, topic)
        assert after[follower] - before[follower] >= sum(map(len, values))
        assert after[leader] == before[leader]


def test_a_follower_serves_its_rack_from_the_remote_tier(cluster: Cluster, topic: str,
                                                         tier: RemoteTier):
    racks = {1: "r1", 2: "r2", 3: "r3"}
    for node, broker in cluster.brokers.items():
        assert isinstance(broker, TierdBroker)
        broker.config["broker.rack"] = racks[node]
        broker.config["tierd.metrics.port"] = str(free_port())
        broker.config["replica.selector.class"] = RACK_AWARE
    values = start_with_tiered_topic(cluster, tier, topic, RECORDS)
    leader, follower = follower_and_rack(cluster, topic, racks)
    rack = racks[follower]
    remote = "RemoteFetchBytesPerSec_total"
    before = {n: topic_metric(cluster, n, remote, topic) for n in (1, 2, 3)}
    # Offset 0 is in the tier only: the follower reads it from there.
    assert confluent_read(cluster, topic, rack, RECORDS) == values
    after = {n: topic_metric(cluster, n, remote, topic) for n in (1, 2, 3)}
    assert after[follower] > before[follower]
    assert after[leader] == before[leader]
