"""KIP-405's five follower-replication scenarios, step by step, on real processes.

KIP-405 ("Follower Replication", "Follower fetch scenarios") walks through
five cases with tables of what broker A, broker B, the remote storage and
the remote log metadata hold after each step. Each test here plays one of
them on real tierd processes over a real ZooKeeper and checks what the
tables say:

1. a new empty follower builds its leader-epoch cache from the tier and
   fetches only from the leader's earliest local offset (ELO);
2. an out-of-sync follower catches up by plain fetching while its log end is
   at or above the leader's ELO (2.1), and rebuilds from the tier, like a new
   follower, once the leader's local log has moved past it (2.2);
3. multiple hard failures (KIP-101's scenario 2): the new leader lost
   unflushed records, the old one truncates, and the tier ends up with two
   copies of offset 1 in different epochs; reads follow the leader's lineage;
4. an unclean election: the out-of-sync replica leads and tiers its own
   history over offsets the old leader had tiered; reads follow the new
   lineage, and the returning old leader truncates and rebuilds;
5. divergence in the remote tier after two unclean elections: a wiped
   replica rebuilds from the segment of the current leader's lineage, not
   from the diverging copies of the same offsets.

Brokers. The KIP's tables have two brokers, A and B: the partition has
replicas [A, B] (replication factor 2) and min.insync.replicas 1, as in its
scenario 4. A third broker, C, holds no replica of it: it is the controller
(started first) and keeps ``__remote_log_metadata`` available, in sync,
while A and B crash, freeze and win unclean elections - the KIP's "RL
metadata storage" column, which its scenarios assume is always there. The
remote tier is one directory shared by all three.

Segments. segment.bytes=14 puts every batch in its own segment, so the
KIP's "seg-a-b" are runs of one-record segments here, and a replica's
segment files name the offsets it holds locally. Exact boundaries differ
from the tables where they depend on segment sizes (e.g. B ships seg-1-1,
not seg-0-1); the tests assert what the tables express: which epochs a
replica knows from where, where each replica's log starts locally and
globally, which copies of an offset the tier holds, and which one a reader
gets.

How each replica's offsets are read. Followers do not answer ListOffsets,
so every replica's offsets come from its files: the log start from its
log-start-offset-checkpoint (written every 200 ms here), the local log
start from the base offset of its first segment file, the log end from its
last batch, the leader epochs from its leader-epoch-checkpoint. The
leader's ListOffsets -2 / -4 / -1 (earliest, earliest local, latest) must
agree with its files. Leader epoch numbers are whatever the controller
assigned (removing a dead leader bumps the epoch too), so the tests name
them by the offsets they start at, never by number.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kafka.admin import NewTopic
from kafka.protocol.consumer import (
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer import ProduceResponse

from protocol import records
from storage.log import checkpoint
from system_tests._proc import RawClient, fetch_request, produce_request
from system_tests.cluster.cluster import Cluster, wait_for
from system_tests.tiered_helpers import (
    EARLIEST,
    EARLIEST_LOCAL,
    FETCH_VERSION,
    LATEST,
    LATEST_TIERED,
    ONE_BATCH_PER_SEGMENT,
    TIERED_BROKER_OVERRIDES,
    FsTier,
    Rec,
    alter_topic,
    build_batch,
    offset_for,
    read_all,
)

T = TypeVar("T")

A, B, C = 1, 2, 3
# Kafka error codes the tests meet (org.apache.kafka.common.protocol.Errors).
NONE = 0
FENCED_LEADER_EPOCH = 74
# Produce errors that mean "not appended, ask again": the partition is
# between leaders, or the new leader has not taken over yet.
RETRIABLE_PRODUCE = {3, 5, 6, 19, 74, 75}
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
# Local segments the leader of scenarios 1 and 2 keeps (local.retention.bytes
# is this many batches): its earliest local offset then lies below its last
# tiered offset, the case the KIP chose local-log-start-offset for.
LOCAL_SEGMENTS = 3
# The log start checkpoint is how a follower's log start is read: keep it fresh.
CHECKPOINT_INTERVAL_MS = "200"
REBUILT = "rebuilt from the remote tier"


def msg(i: int) -> bytes:
    """The KIP's "msg i" (fixed length, so every batch has the same size)."""
    return f"msg {i:02d}".encode()


def batch_size() -> int:
    """Bytes of one produced batch (one record of ``msg``)."""
    return len(build_batch([Rec(b"k", msg(0), int(time.time() * 1000))]))


# ---------------------------------------------------------------------------
# The cluster.


def start_cluster(cluster: Cluster, tier: FsTier) -> None:
    """C first, so it wins the controller election; then A and B."""
    config = {**TIERED_BROKER_OVERRIDES, "rsm.config.dir": str(tier.root),
              "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
              "log.flush.offset.checkpoint.interval.ms": CHECKPOINT_INTERVAL_MS,
              "auto.leader.rebalance.enable": "false",
              # KIP-405's scenarios: a follower restarts at the leader's earliest
              # local offset, not at its last tiered offset + 1 (KIP-1023).
              "follower.fetch.last.tiered.offset.enable": "false"}
    for node in (C, A, B):
        cluster.brokers[node].config.update(config)
        cluster.brokers[node].start()
    wait_for("every broker registered, C the controller", lambda: (
        d := cluster.describe_cluster(C)) and len(d["brokers"]) == 3 and d["controller_id"] == C)


def create_topic(cluster: Cluster, topic: str, **configs: str) -> None:
    """Replicas [A, B] (A leads), RF 2, min.insync.replicas 1, tiered, one
    batch per segment; ``configs`` (underscores for dots) on top."""
    settings = {"min.insync.replicas": "1", "remote.storage.enable": "true",
                "segment.bytes": ONE_BATCH_PER_SEGMENT}
    settings.update({k.replace("_", "."): v for k, v in configs.items()})
    admin = cluster.admin(C)
    try:
        admin.create_topics([NewTopic(topic, replica_assignments={0: [A, B]},
                                      topic_configs=settings)])
    finally:
        admin.close()
    wait_for(f"{topic} led by A", lambda: all(
        cluster.partitions(topic, n)[0]["leader"] == A for n in (A, B, C)))


def state(cluster: Cluster, topic: str) -> dict[str, Any]:
    return cluster.partitions(topic, C)[0]


def wait_leader(cluster: Cluster, topic: str, node: int) -> None:
    wait_for(f"broker {node} leading", lambda: state(cluster, topic)["leader"] == node
             and cluster.partitions(topic, node)[0]["leader"] == node)


def wait_isr(cluster: Cluster, topic: str, isr: list[int]) -> None:
    wait_for(f"ISR {isr}", lambda: state(cluster, topic)["isr"] == isr)


@contextmanager
def frozen(cluster: Cluster, topic: str, node: int) -> Iterator[None]:
    """SIGSTOP ``node`` until the block ends; it is out of the ISR on entry."""
    pid = cluster.brokers[node].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(f"broker {node} out of the ISR", lambda: node not in state(cluster, topic)["isr"])
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def wipe(cluster: Cluster, node: int) -> None:
    """The broker's disk is lost: it comes back with no data at all."""
    assert not cluster.brokers[node].is_running()
    shutil.rmtree(cluster.brokers[node].workdir / "data")


# ---------------------------------------------------------------------------
# Producing and reading through the wire protocol.


def client(cluster: Cluster, node: int) -> RawClient:
    broker = cluster.brokers[node]
    return RawClient(broker.host, broker.port)


def produce(cluster: Cluster, node: int, topic: str, numbers: list[int]) -> list[int]:
    """Produce ``msg(i)`` for each i, one batch each (so one segment each),
    acks=all, to ``node``; returns the offsets. Retries only answers that
    mean nothing was appended."""
    offsets = []
    with client(cluster, node) as c:
        for i in numbers:
            batch = build_batch([Rec(b"k", msg(i), int(time.time() * 1000))])

            def send(batch: bytes = batch) -> int | None:
                resp = c.request(produce_request(topic, 0, batch, acks=-1), 9, ProduceResponse)
                part = resp.responses[0].partition_responses[0]
                if part.error_code in RETRIABLE_PRODUCE:
                    return None
                assert part.error_code == NONE, part
                return int(part.base_offset) + 1  # truthy for offset 0

            offsets.append(wait_for(f"msg {i} acknowledged by {node}", send) - 1)
    return offsets


def consume(cluster: Cluster, node: int, topic: str) -> list[tuple[int, bytes]]:
    """Everything from offset 0 to the high watermark, read from ``node``
    (remote offsets included), as (offset, value)."""
    with client(cluster, node) as c:
        return [(o, r.value) for o, r in read_all(c, topic)]


def list_offsets(cluster: Cluster, node: int, topic: str) -> tuple[int, int, int]:
    """The leader's ListOffsets: (earliest -2, earliest local -4, latest -1)."""
    with client(cluster, node) as c:
        return (offset_for(c, topic, EARLIEST), offset_for(c, topic, EARLIEST_LOCAL),
                offset_for(c, topic, LATEST))


def last_tiered(cluster: Cluster, node: int, topic: str) -> int:
    """The leader's ListOffsets -5: the last offset whose copy to the tier has
    finished (a segment object alone may be an unfinished copy)."""
    with client(cluster, node) as c:
        return offset_for(c, topic, LATEST_TIERED)


def fetch_error(cluster: Cluster, node: int, topic: str, offset: int,
                current_leader_epoch: int) -> int:
    """The error a consumer fetching ``offset`` with ``current_leader_epoch`` gets."""
    req = fetch_request({(topic, 0): offset}, FETCH_VERSION)
    req.topics[0].partitions[0].current_leader_epoch = current_leader_epoch
    with client(cluster, node) as c:
        resp = c.request(req, FETCH_VERSION, FetchResponse)
    return int(resp.responses[0].partitions[0].error_code)


def epoch_end(cluster: Cluster, node: int, topic: str, epoch: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch (KIP-320): (largest epoch <= ``epoch``, its end offset)."""
    cls = OffsetForLeaderEpochRequest
    topic_cls = cls.OffsetForLeaderTopic
    req = cls[OFFSET_FOR_LEADER_EPOCH_VERSION](replica_id=-1, topics=[topic_cls(
        topic=topic, partitions=[topic_cls.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=epoch)])])
    with client(cluster, node) as c:
        resp = c.request(req, OFFSET_FOR_LEADER_EPOCH_VERSION, OffsetForLeaderEpochResponse)
    part = resp.topics[0].partitions[0]
    assert part.error_code == NONE, part
    return int(part.leader_epoch), int(part.end_offset)


# ---------------------------------------------------------------------------
# What each replica and the tier hold, from their files.


@dataclass(frozen=True)
class Replica:
    """One replica of partition 0 as its files tell it."""

    log_start: int
    local_start: int
    end: int
    epochs: list[tuple[int, int]]  # (leader epoch, start offset): leader-epoch-checkpoint
    batches: list[tuple[int, int, int]]  # (offset, leader epoch, CRC) of each local batch

    @property
    def offsets(self) -> tuple[int, int, int]:
        return self.log_start, self.local_start, self.end


def replica(cluster: Cluster, node: int, topic: str) -> Replica:
    data = cluster.brokers[node].workdir / "data"
    directory = data / f"{topic}-0"
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    batches = []
    for base in bases:
        raw = (directory / f"{base:020d}.log").read_bytes()
        batches += [(h.base_offset, h.leader_epoch, h.crc) for h in records.iter_headers(raw)]
    log_start = checkpoint.read_offsets(str(data / "log-start-offset-checkpoint")).get(
        (topic, 0), -1)
    end = max([o + 1 for o, _, _ in batches] + bases[-1:])
    return Replica(log_start, max(log_start, bases[0]), end,
                   checkpoint.read_epochs(str(directory / "leader-epoch-checkpoint")), batches)


def tiered(tier: FsTier, topic: str) -> list[tuple[int, list[int], list[bytes]]]:
    """Every remote segment: (start offset, leader epochs of its batches, values), sorted."""
    out = []
    for name in tier.log_objects(topic):
        raw = tier.read(name)
        epochs = [h.leader_epoch for h in records.iter_headers(raw)]
        values = [r.value for h in records.iter_headers(raw)
                  for r in records.decode_records(raw, h)]
        out.append((FsTier.start_offset_of(name), epochs, values))
    return sorted(out)


def wait_equal(what: str, fn: Callable[[], T], expected: T) -> None:
    """Wait until ``fn()`` == ``expected``; on timeout show the last value."""
    last: list[Any] = []

    def check() -> bool:
        last[:] = [fn()]
        return last[0] == expected

    try:
        wait_for(what, check)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: got {last[0] if last else '?'}, "
                             f"expected {expected}") from None


def leader_agrees(cluster: Cluster, node: int, topic: str) -> None:
    """The leader's ListOffsets -2 / -4 / -1 equal its files' offsets."""
    assert list_offsets(cluster, node, topic) == replica(cluster, node, topic).offsets


def rebuilds(cluster: Cluster, node: int, since: int) -> list[str]:
    """The broker's log lines since byte ``since`` saying it rebuilt from the tier."""
    return [line for line in cluster.brokers[node].log_tail(since, 1 << 30).splitlines()
            if REBUILT in line]


# ---------------------------------------------------------------------------
# The scenarios.


def test_scenario_1_new_empty_follower(cluster: Cluster, topic: str, tmp_path: Path) -> None:
    """A replica with an empty disk fetches offset 0, gets
    OFFSET_MOVED_TO_TIERED_STORAGE, takes the leader's ELO and epoch, builds
    its leader-epoch cache up to the ELO from the remote segment below it,
    and fetches only from the ELO on.

    tierd cannot add a replica to a partition (no reassignment), so the new
    empty follower is A after its disk is wiped: it was shut down, B led
    meanwhile, and A comes back with nothing, as a newly added replica would.
    """
    tier = FsTier(tmp_path / "remote")
    start_cluster(cluster, tier)
    create_topic(cluster, topic, local_retention_bytes=str(LOCAL_SEGMENTS * batch_size()))
    assert produce(cluster, A, topic, [0, 1, 2]) == [0, 1, 2]  # LE-0 from 0
    wait_isr(cluster, topic, [A, B])
    assert cluster.brokers[A].stop() == 0  # controlled shutdown: B leads
    wait_leader(cluster, topic, B)
    assert produce(cluster, B, topic, [3, 4, 5, 6]) == [3, 4, 5, 6]  # LE-1 from 3

    # B, the leader, resumes tiering where A's ended (its "follower to leader
    # transition") and keeps LOCAL_SEGMENTS segments: offsets 4-6, ELO 4.
    wait_equal("B's local log 4-6, the rest tiered", lambda: (
        replica(cluster, B, topic).offsets, last_tiered(cluster, B, topic),
        [s for s, _, _ in tiered(tier, topic)]), ((0, 4, 7), 5, [0, 1, 2, 3, 4, 5]))
    epochs_b = replica(cluster, B, topic).epochs
    assert [o for _, o in epochs_b] == [0, 3], epochs_b
    le1 = epochs_b[1][0]

    wipe(cluster, A)
    mark = cluster.brokers[A].log_size()
    cluster.brokers[A].start()
    wait_isr(cluster, topic, [A, B])

    # Step 1: A rebuilt its epochs up to the ELO from the remote tier...
    [line] = rebuilds(cluster, A, mark)
    assert "fetch_from=4" in line, line
    # Step 2: ...and fetched 4-6 from B. Both hold the same: epochs LE-0 from
    # 0 and LE-1 from 3, log start 0, local log 4-6.
    b = replica(cluster, B, topic)
    assert b.epochs == [(0, 0), (le1, 3)] and b.offsets == (0, 4, 7), b
    assert [o for o, _, _ in b.batches] == [4, 5, 6], b
    wait_equal("A holding what B holds", lambda: replica(cluster, A, topic), b)
    leader_agrees(cluster, B, topic)

    # The rebuilt replica leads alone (LE-2 from 7) and serves every offset,
    # 0-3 from the tier through the epochs it rebuilt.
    cluster.brokers[B].kill()
    wait_leader(cluster, topic, A)
    assert produce(cluster, A, topic, [7]) == [7]
    assert consume(cluster, A, topic) == [(i, msg(i)) for i in range(8)]
    epochs_a = replica(cluster, A, topic).epochs
    assert epochs_a[:2] == [(0, 0), (le1, 3)] and epochs_a[2][1] == 7 \
        and epochs_a[2][0] > le1, epochs_a


def test_scenario_2_out_of_sync_follower(cluster: Cluster, topic: str, tmp_path: Path) -> None:
    """2.1: a lagging follower whose log end is at or above the leader's ELO
    catches up by plain fetching. 2.2: once the leader has tiered and
    deleted locally past the follower's end (and moved to a new epoch the
    follower never saw), the follower's fetch gets
    OFFSET_MOVED_TO_TIERED_STORAGE: it drops its local log, rebuilds its
    epochs (the unseen epoch included) from the tier, and fetches from the ELO."""
    tier = FsTier(tmp_path / "remote")
    start_cluster(cluster, tier)
    create_topic(cluster, topic, local_retention_bytes=str(LOCAL_SEGMENTS * batch_size()))
    assert produce(cluster, A, topic, [0, 1, 2, 3]) == [0, 1, 2, 3]
    wait_isr(cluster, topic, [A, B])

    # 2.1: B misses 4 and 5; A keeps 3-5 locally, ELO 3 <= B's end 4.
    mark = cluster.brokers[B].log_size()
    with frozen(cluster, topic, B):
        assert replica(cluster, B, topic).end == 4
        assert produce(cluster, A, topic, [4, 5]) == [4, 5]
        wait_equal("A's local log 3-5", lambda: replica(cluster, A, topic).offsets, (0, 3, 6))
    wait_isr(cluster, topic, [A, B])
    wait_equal("B caught up, its local log 3-5 like A's",
               lambda: replica(cluster, B, topic), replica(cluster, A, topic))
    assert rebuilds(cluster, B, mark) == []
    assert replica(cluster, B, topic).epochs == [(0, 0)]

    # 2.2: B misses more; A restarts meanwhile (a new epoch from 6, which B
    # never sees) and tiers until its local log (8-10) starts past B's end (6).
    mark = cluster.brokers[B].log_size()
    with frozen(cluster, topic, B):
        cluster.brokers[A].kill()
        cluster.brokers[A].start()
        wait_leader(cluster, topic, A)
        assert produce(cluster, A, topic, [6, 7, 8, 9, 10]) == [6, 7, 8, 9, 10]
        wait_equal("A's local log 8-10", lambda: replica(cluster, A, topic).offsets, (0, 8, 11))
        b = replica(cluster, B, topic)
        assert b.end == 6 and b.epochs == [(0, 0)], b
    wait_isr(cluster, topic, [A, B])
    [line] = rebuilds(cluster, B, mark)
    assert "fetch_from=8" in line, line
    a = replica(cluster, A, topic)
    le_new = a.epochs[-1][0]
    assert a.epochs == [(0, 0), (le_new, 6)] and le_new > 0, a
    wait_equal("B rebuilt: A's epochs, log start, local log 8-10",
               lambda: replica(cluster, B, topic), a)
    leader_agrees(cluster, A, topic)
    assert consume(cluster, A, topic) == [(i, msg(i)) for i in range(11)]


def test_scenario_3_multiple_hard_failures(cluster: Cluster, topic: str, tmp_path: Path) -> None:
    """KIP-101's scenario 2 with a tier: A and B crash together, B having
    lost msg 1 and 2 (never flushed); B leads and takes msg 3 at offset 1;
    A truncates its LE-0 offsets 1-2. The tier then holds offset 1 twice
    (A's msg 1 in LE-0, B's msg 3 in LE-1) and readers get msg 3."""
    tier = FsTier(tmp_path / "remote")
    start_cluster(cluster, tier)
    create_topic(cluster, topic)  # nothing deleted locally until step 4
    assert produce(cluster, A, topic, [0, 1, 2]) == [0, 1, 2]
    # Step 1: A has shipped seg-0-1; B has 0-2 too.
    wait_equal("A's 0 and 1 tiered", lambda: last_tiered(cluster, A, topic), 1)
    wait_equal("the tier holding A's 0 and 1", lambda: tiered(tier, topic),
               [(0, [0], [msg(0)]), (1, [0], [msg(1)])])
    wait_equal("B holding 0-2", lambda: replica(cluster, B, topic).end, 3)

    # Step 2: both crash; B loses what it had not flushed (its segments of
    # offsets 1 and 2), restarts first and leads. (Killed at the same moment,
    # the controller may learn of B's death first and leave only A in the
    # ISR, so nothing could lead B without an unclean election; the KIP's
    # note allows either. Here A's death is handled first, B takes over
    # without writing anything, then dies too: B is the last in the ISR.)
    cluster.brokers[A].kill()
    wait_leader(cluster, topic, B)
    cluster.brokers[B].kill()
    wait_for("no leader, B the last in the ISR", lambda: (
        s := state(cluster, topic))["leader"] == -1 and s["isr"] == [B])
    partition_dir = cluster.brokers[B].workdir / "data" / f"{topic}-0"
    for path in partition_dir.iterdir():
        if path.stem.isdigit() and int(path.stem) >= 1:
            path.unlink()
    cluster.brokers[B].start()
    wait_leader(cluster, topic, B)
    assert produce(cluster, B, topic, [3]) == [1]
    le1 = replica(cluster, B, topic).epochs[-1][0]
    assert replica(cluster, B, topic).epochs == [(0, 0), (le1, 1)] and le1 > 0

    # Step 3: A restarts and truncates offsets 1 and 2 (LE-0), then fetches msg 3.
    cluster.brokers[A].start()
    wait_isr(cluster, topic, [A, B])
    wait_equal("A truncated to B's log", lambda: replica(cluster, A, topic).batches,
               replica(cluster, B, topic).batches)
    assert "truncating follower log" in cluster.brokers[A].log_tail()

    # Step 4: msg 4; B ships seg-1-1 (its LE-1 msg 3); the local segments
    # below 2 are deleted on both brokers.
    assert produce(cluster, B, topic, [4]) == [2]
    alter_topic(cluster.brokers[C], topic, local_retention_bytes="1")
    wait_equal("B's seg-1-1 tiered", lambda: last_tiered(cluster, B, topic), 1)
    wait_equal("B's seg-1-1 in the tier next to A's", lambda: tiered(tier, topic), [
        (0, [0], [msg(0)]), (1, [0], [msg(1)]), (1, [le1], [msg(3)])])
    for node in (A, B):
        wait_equal(f"broker {node}: log start 0, local log 2-2",
                   lambda n=node: replica(cluster, n, topic).offsets, (0, 2, 3))
        assert replica(cluster, node, topic).epochs == [(0, 0), (le1, 1)]
    leader_agrees(cluster, B, topic)

    # Offset 0 (LE-0) and offset 1 (LE-1: msg 3, not msg 1) come from the tier.
    assert consume(cluster, B, topic) == [(0, msg(0)), (1, msg(3)), (2, msg(4))]
    # KIP-320: LE-0 ends at 1, so a consumer at offset 2 in LE-0 finds it
    # was truncated; one still on LE-0 metadata is fenced.
    assert epoch_end(cluster, B, topic, 0) == (0, 1)
    assert fetch_error(cluster, B, topic, 2, 0) == FENCED_LEADER_EPOCH


def test_scenario_4_unclean_election_with_truncation(cluster: Cluster, topic: str,
                                                     tmp_path: Path) -> None:
    """B, out of sync with only msg 0, wins an unclean election after A
    (which had shipped seg-0-2) stops; B takes msg 4 and 5 at offsets 1-2 in
    LE-1 and ships them over A's copies of the same offsets. Readers get B's
    lineage; A, back, truncates its LE-0 tail and rebuilds from the tier."""
    tier = FsTier(tmp_path / "remote")
    start_cluster(cluster, tier)
    create_topic(cluster, topic, unclean_leader_election_enable="true")
    assert produce(cluster, A, topic, [0]) == [0]
    wait_equal("B holding msg 0", lambda: replica(cluster, B, topic).end, 1)

    # Step 1: B falls out of sync; A takes 1-3 and ships seg-0-2.
    with frozen(cluster, topic, B):
        assert produce(cluster, A, topic, [1, 2, 3]) == [1, 2, 3]
        wait_equal("A's 0-2 tiered", lambda: last_tiered(cluster, A, topic), 2)
        # Step 2: A stops; B (thawed) is elected though out of sync.
        cluster.brokers[A].kill()
    wait_leader(cluster, topic, B)
    assert state(cluster, topic)["isr"] == [B]
    assert produce(cluster, B, topic, [4, 5]) == [1, 2]
    b = replica(cluster, B, topic)
    le1 = b.epochs[-1][0]
    assert b.epochs == [(0, 0), (le1, 1)] and le1 > 0, b

    # Step 3: B ships its LE-1 segment over offset 1, its local segments
    # below 2 expire.
    alter_topic(cluster.brokers[C], topic, local_retention_bytes="1")
    wait_equal("B's LE-1 msg 4 tiered", lambda: last_tiered(cluster, B, topic), 1)
    wait_equal("B's LE-1 msg 4 tiered next to A's LE-0 copies", lambda: tiered(tier, topic), [
        (0, [0], [msg(0)]), (1, [0], [msg(1)]), (1, [le1], [msg(4)]), (2, [0], [msg(2)])])
    wait_equal("B: log start 0, local log 2-2",
               lambda: replica(cluster, B, topic).offsets, (0, 2, 3))
    assert replica(cluster, B, topic).epochs == [(0, 0), (le1, 1)]
    leader_agrees(cluster, B, topic)
    # Offset 0 from either copy of LE-0; offset 1 is LE-1's msg 4, not msg 1.
    assert consume(cluster, B, topic) == [(0, msg(0)), (1, msg(4)), (2, msg(5))]
    assert epoch_end(cluster, B, topic, 0) == (0, 1)
    assert fetch_error(cluster, B, topic, 2, 0) == FENCED_LEADER_EPOCH

    # The truncation: A returns with 1-3 in LE-0, cuts them (LE-0 ends at 1
    # on the leader) and, 1 being below B's ELO, rebuilds from B's segment.
    mark = cluster.brokers[A].log_size()
    cluster.brokers[A].start()
    wait_isr(cluster, topic, [A, B])
    log_a = cluster.brokers[A].log_tail(mark, 1 << 30)
    assert "truncating follower log" in log_a and REBUILT in log_a
    wait_equal("A holds what B holds", lambda: replica(cluster, A, topic),
               replica(cluster, B, topic))
    assert consume(cluster, B, topic) == [(0, msg(0)), (1, msg(4)), (2, msg(5))]


def test_scenario_5_divergence_in_remote_storage(cluster: Cluster, topic: str,
                                                 tmp_path: Path) -> None:
    """Two unclean elections leave the tier with two lineages over offsets
    2-3 (A's LE-0, B's LE-1). B, wiped, rebuilds from A's segment holding
    the offset below the ELO (LE-2): its epochs are LE-0 and LE-2, never
    LE-1, and it serves A's records at 2-3."""
    tier = FsTier(tmp_path / "remote")
    start_cluster(cluster, tier)
    # Unlike the KIP's tables, which keep every local segment, A and B free
    # their tiered segments at once, as tiered topics do: what the tier
    # holds is then all there is.
    create_topic(cluster, topic, unclean_leader_election_enable="true",
                 local_retention_bytes="1")
    assert produce(cluster, A, topic, [0, 1]) == [0, 1]
    wait_equal("B holding 0-1", lambda: replica(cluster, B, topic).end, 2)

    # Step 1: B out of sync; A takes 2-4 and ships seg-0-3.
    with frozen(cluster, topic, B):
        assert produce(cluster, A, topic, [2, 3, 4]) == [2, 3, 4]
        wait_equal("A's 0-3 tiered", lambda: last_tiered(cluster, A, topic), 3)
        cluster.brokers[A].kill()
    # Step 2: B leads (unclean), takes 4-6 at offsets 2-4 in LE-1, ships 2-3.
    wait_leader(cluster, topic, B)
    assert produce(cluster, B, topic, [4, 5, 6]) == [2, 3, 4]
    le1 = replica(cluster, B, topic).epochs[-1][0]
    wait_equal("B's LE-1 2-3 tiered", lambda: last_tiered(cluster, B, topic), 3)
    wait_equal("the tier holding both copies of 2-3", lambda: [
        (s, e) for s, e, _ in tiered(tier, topic)],
               [(0, [0]), (1, [0]), (2, [0]), (2, [le1]), (3, [0]), (3, [le1])])

    # Step 3: B goes down; A returns without knowing LE-1 and leads
    # (unclean again), takes 7 and 8 at 5-6 in LE-2 and ships seg-4-5.
    cluster.brokers[B].kill()
    cluster.brokers[A].start()
    wait_leader(cluster, topic, A)
    assert produce(cluster, A, topic, [7, 8]) == [5, 6]
    a = replica(cluster, A, topic)
    le2 = a.epochs[-1][0]
    assert a.epochs == [(0, 0), (le2, 5)] and le2 > le1, (a, le1)
    wait_equal("A's 4-5 tiered", lambda: last_tiered(cluster, A, topic), 5)
    wait_equal("A's 4-5 in the tier, A's local log 6-6", lambda: (
        [(s, e) for s, e, _ in tiered(tier, topic)], replica(cluster, A, topic).offsets),
        ([(0, [0]), (1, [0]), (2, [0]), (2, [le1]), (3, [0]), (3, [le1]), (4, [0]), (5, [le2])],
         (0, 6, 7)))

    # Step 4: B, reimaged, comes back: OMTS, ELO 6 in LE-2; it builds its
    # epochs from seg-4-5 (LE-0, LE-2), fetches 6 and joins the ISR.
    wipe(cluster, B)
    mark = cluster.brokers[B].log_size()
    cluster.brokers[B].start()
    wait_isr(cluster, topic, [A, B])
    [line] = rebuilds(cluster, B, mark)
    assert "fetch_from=6" in line, line
    a = replica(cluster, A, topic)
    assert a.epochs == [(0, 0), (le2, 5)] and a.offsets == (0, 6, 7), a
    wait_equal("B holding what A holds", lambda: replica(cluster, B, topic), a)
    leader_agrees(cluster, A, topic)

    # B leads alone and serves A's lineage from the tier: offset 2 is msg 2
    # (LE-0), not B's old msg 4 (LE-1). B never knew LE-1 again: LE-0 is the
    # largest epoch <= LE-1 and ends at 5; a consumer on LE-1 is fenced.
    cluster.brokers[A].kill()
    wait_leader(cluster, topic, B)
    assert consume(cluster, B, topic) == list(enumerate(msg(i) for i in (0, 1, 2, 3, 4, 7, 8)))
    assert epoch_end(cluster, B, topic, le1) == (0, 5)
    assert fetch_error(cluster, B, topic, 3, le1) == FENCED_LEADER_EPOCH
