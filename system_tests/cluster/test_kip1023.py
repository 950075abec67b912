"""KIP-1023, follower fetch from the last tiered offset, on three real brokers
over a real ZooKeeper and one shared directory tier.

The topic keeps more locally than the tier needs (local retention of LOCAL
batches, one batch per segment, or all of it), so the leader's earliest local
offset lies well below its last tiered offset: a KIP-405 follower would
replicate the leader's whole local log, a KIP-1023 one only what is not tiered
yet. A follower below the leader's local start learns it from
OFFSET_MOVED_TO_TIERED_STORAGE; one whose leader still holds offset 0 (local
retention keeping everything) from the leader's first answer. Every
record is produced by one idempotent producer (raw Produce requests with its
producer id and sequences), so a rebuilt replica that leads must continue its
sequences exactly: the next one accepted, a gap refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from kafka.admin import NewTopic
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.structs import TopicPartition

from system_tests import javatool
from system_tests._proc import RawClient, produce_request
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.cluster.test_tiered_replicas import (
    local_bases,
    tiered_config,
    wait_metadata_in_sync,
)
from system_tests.tiered_helpers import (
    EARLIEST_LOCAL,
    LATEST_TIERED,
    ONE_BATCH_PER_SEGMENT,
    FsTier,
    offset_for,
    read_all,
)

RECORDS = 30
# Batches the leader keeps locally (local.retention.bytes): far more than the
# one untiered batch at the end, so the two modes differ by ~LOCAL batches.
LOCAL = 12
FLAG = "follower.fetch.last.tiered.offset.enable"
EARLIEST_PENDING_UPLOAD = -6
PENDING_UPLOAD_VERSION = 11
NONE, UNSUPPORTED_VERSION, OUT_OF_ORDER_SEQUENCE = 0, 35, 45
# Produce errors meaning "not appended, ask again" (between leaders).
RETRIABLE_PRODUCE = {3, 5, 6, 19, 74, 75}
REBUILT = "rebuilt from the remote tier"


class Idempotent:
    """One idempotent producer's batches: producer id, epoch, next sequence."""

    def __init__(self, client: RawClient) -> None:
        resp = client.request(InitProducerIdRequest[4](
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1,
            producer_epoch=-1), 4, InitProducerIdResponse)
        assert resp.error_code == NONE, resp
        self.pid, self.epoch, self.seq = resp.producer_id, resp.producer_epoch, 0

    def batch(self, seq: int) -> bytes:
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16,
                                       producer_id=self.pid, producer_epoch=self.epoch,
                                       base_sequence=seq)
        builder.append(timestamp=None, key=b"k", value=value(seq), headers=[])
        builder.close()
        return bytes(builder.buffer())

    def send(self, cluster: Cluster, node: int, topic: str, seq: int) -> tuple[int, int]:
        """Produce sequence ``seq`` to ``node`` (acks=all); (error, base offset),
        retrying only answers that mean nothing was appended."""
        def attempt() -> tuple[int, int] | None:
            broker = cluster.brokers[node]
            with RawClient(broker.host, broker.port) as c:
                resp = c.request(produce_request(topic, 0, self.batch(seq)), 9, ProduceResponse)
            part = resp.responses[0].partition_responses[0]
            return None if part.error_code in RETRIABLE_PRODUCE else (part.error_code,
                                                                       part.base_offset)
        return wait_for(f"sequence {seq} answered by {node}", attempt)


def value(seq: int) -> bytes:
    return f"kip1023-{seq:04d}".encode()


def batch_bytes() -> int:
    probe = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16,
                                 producer_id=1, producer_epoch=0, base_sequence=0)
    probe.append(timestamp=None, key=b"k", value=value(0), headers=[])
    probe.close()
    return len(probe.buffer())


def client(cluster: Cluster, node: int) -> RawClient:
    broker = cluster.brokers[node]
    return RawClient(broker.host, broker.port)


def pending_upload(cluster: Cluster, node: int, topic: str, version: int) -> tuple[int, int]:
    """ListOffsets -6 (earliest pending upload) from ``node``: (error, offset)."""
    cls = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest[version](
        replica_id=-1, isolation_level=0, timeout_ms=5_000, topics=[cls(name=topic, partitions=[
            cls.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                     timestamp=EARLIEST_PENDING_UPLOAD)])])
    with client(cluster, node) as c:
        resp: Any = c.request(req, version, ListOffsetsResponse)
    part = resp.topics[0].partitions[0]
    return int(part.error_code), int(part.offset)


def start(cluster: Cluster, tmp_path: Path, last_tiered: bool, topic: str,
          replicas: list[int], keep_all: bool = False) -> Idempotent:
    """The cluster over a directory tier (``FLAG`` as given); ``topic`` on
    ``replicas`` with RECORDS idempotent records, tiered up to its last one and
    trimmed to LOCAL batches on the leader (``keep_all``: not trimmed at all).
    Returns the producer."""
    local = -2 if keep_all else LOCAL * batch_bytes()  # -2: retention.bytes, unlimited
    tier = FsTier(tmp_path / "remote")
    cluster.start({**tiered_config(tier), FLAG: str(last_tiered).lower()})
    admin = cluster.admin()
    try:
        admin.create_topics([NewTopic(topic, replica_assignments={0: replicas}, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": ONE_BATCH_PER_SEGMENT,
            "min.insync.replicas": "1", "local.retention.bytes": str(local)})])
    finally:
        admin.close()
    wait_for(f"{topic} led", lambda: cluster.partitions(topic)[0]["leader"] in replicas
             and cluster.partitions(topic)[0]["isr"] == sorted(replicas))
    leader = cluster.leader(topic, 0)
    with client(cluster, leader) as c:
        producer = Idempotent(c)
    for seq in range(RECORDS):
        assert producer.send(cluster, leader, topic, seq) == (NONE, seq)
    # Every closed segment tiered (the last batch is the active segment), the
    # leader's local log trimmed to its last LOCAL batches (or kept whole).
    with client(cluster, leader) as c:
        wait_for("tiered up to the last closed segment, the local log trimmed", lambda: (
            offset_for(c, topic, LATEST_TIERED), offset_for(c, topic, EARLIEST_LOCAL))
            == (RECORDS - 2, 0 if keep_all else RECORDS - LOCAL))
    return producer


def wipe(cluster: Cluster, topic: str, victim: int) -> int:
    """SIGKILL ``victim``, empty its disk once the ISR has dropped it, restart it
    and wait until it is back in the ISR; returns where its broker log stood."""
    isr = cluster.partitions(topic)[0]["isr"]
    cluster.brokers[victim].kill()
    wait_for("the victim out of the ISR",
             lambda: victim not in cluster.partitions(topic)[0]["isr"])
    shutil.rmtree(cluster.brokers[victim].workdir / "data")
    mark = cluster.brokers[victim].log_size()
    cluster.brokers[victim].start()
    wait_for("the wiped broker back in the ISR",
             lambda: cluster.partitions(topic)[0]["isr"] == isr)
    return mark


def rebuild_lines(cluster: Cluster, node: int, since: int) -> list[str]:
    return [line for line in cluster.brokers[node].log_tail(since, 1 << 30).splitlines()
            if REBUILT in line]


def local_bytes(cluster: Cluster, node: int, topic: str) -> int:
    directory = cluster.brokers[node].workdir / "data" / f"{topic}-0"
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_a_wiped_follower_replicates_only_the_untiered_tail_then_serves_everything(
        cluster: Cluster, topic: str, tmp_path: Path) -> None:
    producer = start(cluster, tmp_path, True, topic, [1, 2, 3])
    leader = cluster.leader(topic, 0)
    # ListOffsets -6: the first offset not tiered; only from v11.
    assert pending_upload(cluster, leader, topic, PENDING_UPLOAD_VERSION) == (NONE, RECORDS - 1)
    assert pending_upload(cluster, leader, topic, 10)[0] == UNSUPPORTED_VERSION
    # The Java Admin client's OffsetSpec for the same (and the tier's other bounds).
    b = ["--bootstrap", cluster.brokers[leader].bootstrap]
    specs = ("earliest-pending-upload", "latest-tiered", "earliest-local")
    results = javatool.run_batch([["admin", *b, "list-offsets", "--topic", topic, "--spec", spec]
                                  for spec in specs])
    assert all(r["exit"] == javatool.EXIT_OK for r in results), results
    assert [r["result"]["offsets"]["0"]["offset"] for r in results] == [
        RECORDS - 1, RECORDS - 2, RECORDS - LOCAL]
    victim = next(n for n in (1, 2, 3) if n != leader)
    mark = wipe(cluster, topic, victim)
    # Its local log is the one untiered batch: not the leader's local log from
    # its earliest local offset (what KIP-405 replicates).
    assert local_bases(cluster, victim, topic) == [RECORDS - 1]
    assert local_bytes(cluster, victim, topic) == batch_bytes()
    [line] = rebuild_lines(cluster, victim, mark)
    assert f"fetch_from={RECORDS - 1}" in line and "start=last-tiered" in line, line

    # The others die (SIGKILL): the rebuilt replica leads alone, serves every
    # offset (those below its local start from the tier) and continues the
    # idempotent producer's sequences.
    wait_metadata_in_sync(cluster, victim)
    for n in (1, 2, 3):
        if n != victim:
            cluster.brokers[n].kill()
    wait_for("the rebuilt broker leads",
             lambda: cluster.partitions(topic, victim)[0]["leader"] == victim)
    assert producer.send(cluster, victim, topic, RECORDS) == (NONE, RECORDS)
    assert producer.send(cluster, victim, topic, RECORDS + 5)[0] == OUT_OF_ORDER_SEQUENCE
    with client(cluster, victim) as c:
        got = [(o, r.value) for o, r in read_all(c, topic)]
    assert got == [(seq, value(seq)) for seq in range(RECORDS + 1)]


def test_a_replica_added_by_a_reassignment_starts_after_the_tier(
        cluster: Cluster, topic: str, tmp_path: Path) -> None:
    """The leader keeps its whole log locally: the new replica is never sent
    OFFSET_MOVED_TO_TIERED_STORAGE, and still replicates only the untiered batch."""
    start(cluster, tmp_path, True, topic, [1, 2], keep_all=True)
    admin = cluster.admin()
    try:
        answer = admin.alter_partition_reassignments({TopicPartition(topic, 0): [1, 2, 3]})
        assert all(error is None for error in answer.values()), answer
        wait_for("the reassignment done", lambda: not admin.list_partition_reassignments())
    finally:
        admin.close()
    wait_for("broker 3 in the ISR", lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    assert local_bases(cluster, 3, topic) == [RECORDS - 1]
    assert local_bytes(cluster, 3, topic) == batch_bytes()
    [line] = rebuild_lines(cluster, 3, 0)
    assert f"fetch_from={RECORDS - 1}" in line and "empty_follower=True" in line, line


def test_with_the_flag_off_a_wiped_follower_replicates_the_leaders_local_log(
        cluster: Cluster, topic: str, tmp_path: Path) -> None:
    start(cluster, tmp_path, False, topic, [1, 2, 3])
    leader = cluster.leader(topic, 0)
    victim = next(n for n in (1, 2, 3) if n != leader)
    mark = wipe(cluster, topic, victim)
    # KIP-405: below the leader's local start, rebuilt up to it, then the
    # leader's whole local log (LOCAL batches) replicated.
    assert local_bases(cluster, victim, topic)[0] == RECORDS - LOCAL
    assert local_bytes(cluster, victim, topic) == LOCAL * batch_bytes()
    [line] = rebuild_lines(cluster, victim, mark)
    assert f"fetch_from={RECORDS - LOCAL}" in line and "start=earliest-local" in line, line
