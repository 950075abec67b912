"""Deleting a tiered topic on three brokers (real ZooKeeper, real processes,
one shared directory tier): the controller marks each partition once
(DELETE_PARTITION_MARKED), the leader of the metadata partition holding the
marker removes the objects and writes STARTED and FINISHED; a remover killed
(SIGKILL) in the middle is replaced by the metadata partition's next leader;
a topic re-created with the same name meanwhile is untouched.

The tier is the filesystem storage manager with a switch that makes segment
deletes fail (``delete_switch_rsm``): it holds a deletion between STARTED and
FINISHED for as long as the test needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol.rlmm_records import ApiKey, decode_record
from storage.log.checkpoint import topic_id_from_str, topic_id_to_str
from storage.remote.rlmm_api import metadata_partition
from storage.remote.types import TopicIdPartition
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.delete_switch_rsm import SWITCH
from system_tests.cluster.test_tiered_replicas import tiered_config
from system_tests.conftest import REGISTRY_KEY
from system_tests.tiered_helpers import METADATA_PARTITIONS, ONE_BATCH_PER_SEGMENT, FsTier
from system_tests.zkserver import ZooKeeperServer

METADATA_TOPIC = "__remote_log_metadata"
PARTITIONS = 3
SEGMENTS = 4  # closed, tiered segments per partition
MARKED, STARTED, FINISHED = 0, 1, 2


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> FsTier:
    return FsTier(tmp_path_factory.mktemp("deletion-tier"))


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory, tier: FsTier) -> Iterator[Cluster]:
    chroot = zookeeper.make_chroot(f"/tierd-{uuid.uuid4().hex[:8]}")
    c = Cluster(chroot, tmp_path_factory.mktemp("deletion"), request.config.stash[REGISTRY_KEY])
    try:
        c.start({**tiered_config(tier), "remote.log.storage.manager.class.name":
                 "system_tests.cluster.delete_switch_rsm.DeleteSwitchRemoteStorageManager"})
        yield c
    finally:
        c.close()


def topic_ids(tier: FsTier, topic: str) -> set[uuid.UUID]:
    """Ids of ``topic`` with objects in the tier (``<topic>-<partition>-<topic id>``,
    the id in Kafka's 22-character base64 form)."""
    return {topic_id_from_str(d.name[-22:]) for d in tier.topic_dirs(topic)}


def tiered_topic(cluster: Cluster, tier: FsTier, topic: str) -> uuid.UUID:
    """A tiered topic with SEGMENTS tiered segments in each partition; its id."""
    before = topic_ids(tier, topic)
    cluster.create_topic(topic, PARTITIONS, 3, {"remote.storage.enable": "true",
                                                "segment.bytes": ONE_BATCH_PER_SEGMENT})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap(), acks="all", linger_ms=0,
                             retries=20, request_timeout_ms=10_000)
    try:
        for p in range(PARTITIONS):
            for i in range(SEGMENTS + 1):  # one batch each: the last one stays active
                producer.send(topic, f"{p}-{i}".encode(), partition=p).get(timeout=30)
    finally:
        producer.close()
    [tid] = wait_for(f"{topic} in the tier", lambda: topic_ids(tier, topic) - before)
    wait_for(f"{topic}'s segments tiered",
             lambda: len(objects_of(tier, tid)) >= PARTITIONS * SEGMENTS)
    return tid


def objects_of(tier: FsTier, tid: uuid.UUID) -> list[Path]:
    """Segment objects of topic id ``tid`` (directories end with the id)."""
    suffix = "-" + topic_id_to_str(tid)
    if not tier.root.exists():
        return []
    return [f for d in tier.root.iterdir() if d.is_dir() and d.name.endswith(suffix)
            for f in d.iterdir() if f.suffix == ".log"]


def delete_events(cluster: Cluster) -> dict[tuple[uuid.UUID, int], list[int]]:
    """(topic id, partition) -> the partition delete states written, in order."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    try:
        tps = [TopicPartition(METADATA_TOPIC, p) for p in range(METADATA_PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        events: dict[tuple[uuid.UUID, int], list[int]] = {}

        def caught_up() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                for rec in records:
                    record = decode_record(rec.value)
                    if record.api_key == ApiKey.REMOTE_PARTITION_DELETE_METADATA:
                        m: Any = record.message
                        key = (uuid.UUID(str(m.topic_id_partition.id)),
                               m.topic_id_partition.partition)
                        events.setdefault(key, []).append(m.remote_partition_delete_state)
            return all(consumer.position(tp) >= ends[tp] for tp in tps)

        wait_for("the whole remote log metadata read", caught_up)
        return events
    finally:
        consumer.close()


def test_deleting_a_tiered_topic_marks_starts_and_finishes_each_partition_once(
        cluster: Cluster, tier: FsTier) -> None:
    tid = tiered_topic(cluster, tier, "doomed")
    admin = cluster.admin()
    try:
        admin.delete_topics(["doomed"])
    finally:
        admin.close()
    wait_for("no object of the deleted topic left", lambda: objects_of(tier, tid) == [])
    wait_for("every partition finished", lambda: all(
        delete_events(cluster).get((tid, p), [])[-1:] == [FINISHED] for p in range(PARTITIONS)))
    events = delete_events(cluster)
    assert {key: states for key, states in events.items() if key[0] == tid} == {
        (tid, p): [MARKED, STARTED, FINISHED] for p in range(PARTITIONS)}
    assert tier.topic_dirs("doomed") == []


def test_a_killed_remover_is_replaced_and_a_recreated_topic_is_untouched(
        cluster: Cluster, tier: FsTier) -> None:
    old = tiered_topic(cluster, tier, "phoenix")
    switch = tier.root / SWITCH
    switch.touch()  # deletes fail from now on: the removal stops after STARTED
    admin = cluster.admin()
    try:
        admin.delete_topics(["phoenix"])
    finally:
        admin.close()
    wait_for("every partition started", lambda: all(
        STARTED in delete_events(cluster).get((old, p), []) for p in range(PARTITIONS)))
    assert len(objects_of(tier, old)) >= PARTITIONS  # held by the switch

    new = tiered_topic(cluster, tier, "phoenix")  # the same name, another topic
    assert new != old
    new_objects = sorted(objects_of(tier, new))

    # The remover of partition 0: the leader of the metadata partition of its marker.
    owner = cluster.leader(METADATA_TOPIC,
                           metadata_partition(TopicIdPartition(old, "phoenix", 0),
                                              METADATA_PARTITIONS))
    cluster.brokers[owner].kill()
    wait_for("another broker leads the remover's metadata partition", lambda: cluster.leader(
        METADATA_TOPIC, metadata_partition(TopicIdPartition(old, "phoenix", 0),
                                           METADATA_PARTITIONS)) not in (owner, -1, 0))
    switch.unlink()
    wait_for("no object of the deleted topic left", lambda: objects_of(tier, old) == [])
    wait_for("every partition finished", lambda: all(
        delete_events(cluster).get((old, p), [])[-1:] == [FINISHED] for p in range(PARTITIONS)))
    events = delete_events(cluster)
    for p in range(PARTITIONS):
        states = events[(old, p)]
        assert states.count(MARKED) == 1 and states.count(FINISHED) == 1, (p, states)
        assert states[0] == MARKED and set(states[1:-1]) == {STARTED}, (p, states)
    assert not [key for key in events if key[0] == new]
    assert sorted(objects_of(tier, new)) == new_objects
    cluster.brokers[owner].start()
