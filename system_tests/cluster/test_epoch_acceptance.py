"""Kafka's EpochDrivenReplicationProtocolAcceptanceTest (KIP-101, KIP-279) on real processes.

Three tierd brokers on a real ZooKeeper, one partition with replication
factor 3 and min.insync.replicas 2, acks=all idempotent load running
throughout (the Jepsen test's ``Sender``: every send ends acknowledged with
its offset, or failed). The cases:

- no divergence after leader changes with unflushed data: brokers never
  fsync (log.flush.interval.messages and .ms at their maximum); leaders are
  SIGKILLed in turn and, while each is down, the tail of its active segment
  is cut off, as if the page cache had been lost with the machine (SIGKILL
  alone keeps the page cache). By turns the cut loses records the others
  have (the broker fetches them again), or the leader was first left
  holding batches its followers never got (they are SIGSTOPped while it
  takes a few acks=1 records) and only its torn last batch is cut: the
  rest must go by the new leader's epochs (KIP-101's divergence). The
  broker recovers the torn segment on restart; afterwards every replica's
  segment files hold the same batches and every acknowledged record is at
  the offset it was acknowledged at;
- offsets never go backwards: a consumer reading all along sees offsets
  only increase and every acknowledged value at its acknowledged offset;
- fast leader changes: leaders are stopped (SIGKILL and controlled
  shutdown, alternately) as soon as the partition can elect another one,
  and restarted at once, so followers meet several epochs in a row; the
  logs end identical, nothing acknowledged is lost, and every replica's
  leader-epoch-checkpoint starts each epoch where its batches say it starts.

Replicas are compared on disk (every batch's base offset, last offset, CRC
and partition leader epoch); ``Cluster.segment_batches`` leaves the epoch
out because the CRC does not cover it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kafka.protocol.producer import ProduceResponse

from protocol import records
from storage.log import checkpoint
from system_tests._proc import RawClient, produce_request
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.queue_checker import Reader, Sender
from system_tests.cluster.test_cluster import consume_all

# Never fsync: every record a broker holds is "unflushed" (Kafka's test sets
# log.flush.interval.messages high for the same reason).
NO_FLUSH = {"log.flush.interval.messages": str(2**63 - 1),
            "log.flush.interval.ms": str(2**63 - 1),
            # Short sessions and lag limit: kills are noticed and replicas
            # rejoin quickly on this 2-core machine.
            "zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "3000"}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
# Bytes cut from the end of a killed leader's active segment: a few dozen of
# the Sender's small batches, records the others have (some acknowledged):
# the broker must fetch them again.
LOST_TAIL_BYTES = 4 * 1024
# ...or, when the leader was left holding batches its followers never got,
# only its torn last batch: the rest of what it alone has survives, in the
# old epoch, and the broker must truncate it by the new leader's epochs.
TORN_BATCH_BYTES = 7
# Batches the leader alone gets before it is killed: some survive the torn
# last batch. (A frozen follower may still find the first in its socket, from
# a fetch the leader had parked: then that one is not divergent.)
DIVERGENT_BATCHES = 3
# The raw acks=1 requests' Produce version (any the broker offers would do).
PRODUCE_VERSION = 9
# Acknowledged records to wait for between disruptions: proof that produce
# goes on, small enough to keep each round short.
PROGRESS = 50
# Leader changes in the fast-changes case (one a second or so).
CHANGES = 6
ALL = [1, 2, 3]


def _partition_dir(cluster: Cluster, node: int, topic: str) -> Path:
    return cluster.brokers[node].workdir / "data" / f"{topic}-0"


def lose_unflushed_tail(cluster: Cluster, node: int, topic: str, cut: int) -> int:
    """Cut about ``cut`` bytes (at most half) off the end of a stopped broker's
    active segment, always tearing a batch; returns the bytes cut."""
    assert not cluster.brokers[node].is_running()
    active = max(_partition_dir(cluster, node, topic).glob("*.log"))  # zero-padded names
    data = active.read_bytes()
    boundaries = {h.position + h.size for h in records.iter_headers(data)}
    keep = len(data) - min(cut, len(data) // 2)
    while keep in boundaries:
        keep -= 1
    os.truncate(active, keep)
    return len(data) - keep


def only_on_leader(tag: int) -> list[bytes]:
    return [f"only-on-leader-{tag}-{i}".encode() for i in range(DIVERGENT_BATCHES)]


def leave_leader_ahead(cluster: Cluster, topic: str, leader: int, tag: int) -> list[int]:
    """Freeze (SIGSTOP) the leader's followers and write batches
    (``only_on_leader(tag)``) they do not fetch; returns the pids to thaw (SIGCONT).

    The batches go with acks=1 on a raw connection of their own: a broker
    answers one request per connection at a time, so the Sender's acks=all
    request, waiting for the frozen followers, would hold back anything
    behind it (and a client library might ask a frozen broker for metadata).
    Losing acks=1 records to a leader change is allowed, as in Kafka.
    """
    pids = [pid for n in ALL if n != leader and (pid := cluster.brokers[n].pid) is not None]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        broker = cluster.brokers[leader]
        with RawClient(broker.host, broker.port) as client:
            for value in only_on_leader(tag):
                batch = records.build_batch([(None, value)], timestamp=int(time.time() * 1000))
                resp = client.request(produce_request(topic, 0, batch, acks=1),
                                      PRODUCE_VERSION, ProduceResponse)
                assert resp.responses[0].partition_responses[0].error_code == 0, resp
    except BaseException:
        thaw(pids)
        raise
    return pids


def held(cluster: Cluster, node: int, topic: str, values: list[bytes]) -> set[bytes]:
    """Those of ``values`` in whole batches of a replica's segment files."""
    found = set()
    for path in _partition_dir(cluster, node, topic).glob("*.log"):
        data = path.read_bytes()
        whole = data[:max((h.position + h.size for h in records.iter_headers(data)), default=0)]
        found |= {v for v in values if v in whole}
    return found


def thaw(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def batches(cluster: Cluster, node: int, topic: str) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, CRC, leader epoch) of every batch in a replica's segments."""
    out = []
    for path in sorted(_partition_dir(cluster, node, topic).glob("*.log")):
        for h in records.iter_headers(path.read_bytes()):
            out.append((h.base_offset, h.last_offset, h.crc, h.leader_epoch))
    return out


def identical_replicas(cluster: Cluster, topic: str) -> list[tuple[int, int, int, int]] | None:
    logs = [batches(cluster, n, topic) for n in ALL]
    return logs[0] if logs[0] and all(log == logs[0] for log in logs) else None


def check_epoch_checkpoints(cluster: Cluster, topic: str,
                            log: list[tuple[int, int, int, int]]) -> None:
    """Every replica's leader-epoch-checkpoint agrees with the batches: each
    epoch that wrote records starts at its first batch; epochs only grow."""
    first_base: dict[int, int] = {}
    for base, _, _, epoch in log:
        first_base.setdefault(epoch, base)
    assert list(first_base) == sorted(first_base), f"epochs go backwards in the log: {first_base}"
    for node in ALL:
        path = _partition_dir(cluster, node, topic) / "leader-epoch-checkpoint"
        entries = checkpoint.read_epochs(str(path))
        epochs = [e for e, _ in entries]
        assert epochs == sorted(set(epochs)), f"broker {node}: epochs not increasing: {entries}"
        assert [o for _, o in entries] == sorted(o for _, o in entries), \
            f"broker {node}: start offsets go backwards: {entries}"
        written = {e: o for e, o in entries if e in first_base}
        assert written == first_base, \
            f"broker {node}: checkpoint {entries} disagrees with the log's epochs {first_base}"


def wait_progress(sender: Sender, what: str) -> None:
    acked = len(sender.ok)
    wait_for(what, lambda: len(sender.ok) >= acked + PROGRESS)


def wait_in_sync(cluster: Cluster, topic: str) -> None:
    wait_for("every replica in sync", lambda: cluster.partitions(topic)[0]["isr"] == ALL)


def finish(cluster: Cluster, topic: str, sender: Sender) -> list[tuple[int, bytes]]:
    """Stop producing, wait for identical replicas, check every acknowledged
    record is where it was acknowledged; returns the log."""
    sender.stop.set()
    sender.join(WAIT_S * 3)
    assert not sender.is_alive(), "the producer did not finish"
    wait_in_sync(cluster, topic)
    on_disk = wait_for("identical replicas", lambda: identical_replicas(cluster, topic))
    log = consume_all(cluster, topic, 0)
    assert [o for o, _ in log] == list(range(len(log))), "the log has gaps"
    assert on_disk[-1][1] == len(log) - 1
    at = {v: o for o, v in log}
    assert len(at) == len(log), "a value is in the log twice"
    moved = {v: (o, at.get(v)) for v, o in sender.ok.items() if at.get(v) != o}
    assert not moved, f"{len(moved)} acknowledged values lost or moved, e.g. {list(moved.items())[:5]}"
    return log


def test_no_divergence_after_leader_changes_with_unflushed_data(cluster: Cluster, topic: str):
    cluster.start(NO_FLUSH)
    cluster.create_topic(topic, 1, 3, TOPIC_CONFIGS)
    sender = Sender(cluster.bootstrap(), topic)
    sender.start()
    killed: list[int] = []
    # (broker, where its log stood at restart, acks=1 values it alone may hold)
    # for the rounds that left the killed leader ahead.
    ahead_rounds: list[tuple[int, int, set[bytes]]] = []
    try:
        for round_ in range(4):
            wait_in_sync(cluster, topic)
            wait_progress(sender, "progress before the kill")
            leader = cluster.leader(topic, 0)
            ahead = round_ % 2 == 1
            frozen = leave_leader_ahead(cluster, topic, leader, round_) if ahead else []
            try:
                cluster.brokers[leader].kill()
            finally:
                thaw(frozen)
            killed.append(leader)
            cut = TORN_BATCH_BYTES if ahead else LOST_TAIL_BYTES
            assert lose_unflushed_tail(cluster, leader, topic, cut) > 0
            survivors = [n for n in ALL if n != leader]
            wait_for("a new leader", lambda s=survivors: cluster.partitions(topic, s[0])[0][
                "leader"] in s)
            wait_progress(sender, "progress on the new leader")
            if ahead:
                kept = held(cluster, leader, topic, only_on_leader(round_))
                ahead_rounds.append((leader, cluster.brokers[leader].log_size(), kept))
            cluster.brokers[leader].start()
    finally:
        sender.stop.set()
    log = finish(cluster, topic, sender)
    assert len(set(killed)) >= 2, f"leadership never moved between brokers: {killed}"
    # The cut tails were really lost and recovered: each restart found a torn segment.
    for node in set(killed):
        assert "truncating invalid log tail" in cluster.brokers[node].log_path.read_text()
    # Records a restarted broker kept but the new leader never got went by
    # the new leader's epochs.
    final = {v for _, v in log}
    for node, mark, kept in ahead_rounds:
        if kept - final:
            assert "truncating follower log" in cluster.brokers[node].log_tail(mark, 1 << 30)


def test_offsets_never_go_backwards(cluster: Cluster, topic: str):
    cluster.start(NO_FLUSH)
    cluster.create_topic(topic, 1, 3, TOPIC_CONFIGS)
    sender = Sender(cluster.bootstrap(), topic)
    reader = Reader(cluster.bootstrap(), topic)
    sender.start()
    reader.start()
    try:
        for _ in range(3):
            wait_in_sync(cluster, topic)
            wait_progress(sender, "progress before the kill")
            leader = cluster.leader(topic, 0)
            cluster.brokers[leader].kill()
            lose_unflushed_tail(cluster, leader, topic, LOST_TAIL_BYTES)
            wait_progress(sender, "progress on the new leader")
            cluster.brokers[leader].start()
        wait_in_sync(cluster, topic)
        log = finish(cluster, topic, sender)
        wait_for("the consumer at the end of the log", lambda: reader.seen
                 and reader.seen[-1][0] >= len(log) - 1)
    finally:
        sender.stop.set()
        reader.stop.set()
        reader.join(WAIT_S)
    offsets = [o for o, _ in reader.seen]
    backwards = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b <= a]
    assert not backwards, f"the consumer went back: {backwards[:5]}"
    misplaced = [(o, v) for o, v in reader.seen if v in sender.ok and sender.ok[v] != o]
    assert not misplaced, f"values seen away from their acknowledged offsets: {misplaced[:5]}"
    assert reader.seen == log[:len(reader.seen)], "the consumer saw something else or skipped"


def test_fast_leader_changes(cluster: Cluster, topic: str):
    cluster.start(NO_FLUSH)
    cluster.create_topic(topic, 1, 3, TOPIC_CONFIGS)
    sender = Sender(cluster.bootstrap(), topic)
    sender.start()
    successors = []
    try:
        wait_progress(sender, "progress before the first change")
        for change in range(CHANGES):
            # Stop the leader as soon as another in-sync replica can take over:
            # no waiting for the broker restarted last to catch up.
            state = wait_for("a leader with an in-sync follower", lambda: (
                p := cluster.partitions(topic)[0])["leader"] in cluster.live
                and len(p["isr"]) >= 2 and p)
            leader = state["leader"]
            if change % 2:
                assert cluster.brokers[leader].stop() == 0  # controlled shutdown
            else:
                cluster.brokers[leader].kill()
            # -1 too: had the ISR shrunk to the leader meanwhile, only its return ends this.
            successors.append(wait_for("the leader deposed", lambda old=leader: (
                led := cluster.partitions(topic)[0]["leader"]) != old and led))
            cluster.brokers[leader].start()
        wait_progress(sender, "progress after the last change")
    finally:
        sender.stop.set()
    finish(cluster, topic, sender)
    assert sum(led > 0 for led in successors) >= CHANGES - 1, f"leaders: {successors}"
    log = wait_for("identical replicas", lambda: identical_replicas(cluster, topic))
    assert log[-1][3] >= CHANGES, "the last records are not in the latest epochs"
    check_epoch_checkpoints(cluster, topic, log)
