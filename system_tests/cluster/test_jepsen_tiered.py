"""The Jepsen-style queue check on a tiered topic: tiny segments, most of the
log only in the remote tier, leader SIGKILLs and one broker wiped.

Every value is unique; each send ends ok (with its offset), failed, or
unknown. A consumer starts at offset 0 once the early offsets exist only in
the tier, and reads on while leaders are killed and restarted and one broker
loses its disk, rebuilds from the tier (BuildingRemoteLogAuxState) and
rejoins the ISR. Afterwards:
- the whole log, read from offset 0 (remote, then local), holds every
  acknowledged value once, at its offset, and nothing nobody sent;
- the consumer never skipped, and read the early offsets from the tier;
- the remote tier and every replica's local log tell one history, batch by
  batch (base offset, last offset, CRC), without gaps; each local log is a
  suffix of it (local retention trims each replica's prefix differently);
- no offset is in the remote tier twice.
"""

from __future__ import annotations

import shutil
from itertools import pairwise
from pathlib import Path

from protocol import records
from system_tests.cluster.cluster import WAIT_S, Cluster, wait_for
from system_tests.cluster.queue_checker import Reader, Sender, check_history
from system_tests.cluster.test_cluster import consume_all
from system_tests.cluster.test_tiered_replicas import tiered_config
from system_tests.tiered_helpers import FsTier

KILLS = 10
# Which kill also wipes its victim's disk: midway, with tiered data before
# and after it.
WIPE_AT = KILLS // 2
# Acknowledged sends between two faults, so each leader has something to lose.
PROGRESS = 20
# A batch of one to four values is 75-120 bytes: a new segment every three
# to five batches.
SEGMENT_BYTES = "400"
# A few segments stay on each local disk, well under a second of produce: the
# rest lives only in the tier, and a broker restarted after a kill usually
# finds its log end below its leader's local start and rebuilds from the tier.
LOCAL_RETENTION_BYTES = "1600"
# About 100 sends a second: several hundred segments in the run, so the
# copier, the consumer's remote reads and the final read keep up on 2 cores.
SEND_PAUSE_S = 0.01

Batch = tuple[int, int, int]  # base offset, last offset, CRC


def remote_segments(tier: FsTier, topic: str) -> list[list[Batch]]:
    """The batches of every ``.log`` object of ``topic`` in the tier."""
    return [[(h.base_offset, h.last_offset, h.crc) for h in records.iter_headers(tier.read(n))]
            for n in tier.log_objects(topic)]


def one_history(sources: list[list[Batch]]) -> list[Batch]:
    """The batches of all ``sources`` as one gap-free log from offset 0.

    Raises:
        AssertionError: two sources disagree at an offset, or the batches
            leave a gap or overlap.
    """
    by_base: dict[int, Batch] = {}
    for source in sources:
        for batch in source:
            seen = by_base.setdefault(batch[0], batch)
            assert seen == batch, f"two different batches at offset {batch[0]}: {seen}, {batch}"
    history = sorted(by_base.values())
    assert history and history[0][0] == 0, f"the history starts at {history[:1]}"
    for prev, nxt in pairwise(history):
        assert nxt[0] == prev[1] + 1, f"batches {prev} and {nxt} do not follow each other"
    return history


def is_suffix(local: list[Batch], history: list[Batch]) -> bool:
    """Whether a replica's local batches are the end of ``history``."""
    starts = {batch[0]: i for i, batch in enumerate(history)}
    return bool(local) and local[0][0] in starts and history[starts[local[0][0]]:] == local


def overlaps(segments: list[list[Batch]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of remote segments (first, last offset) holding an offset both."""
    spans = sorted((s[0][0], s[-1][1]) for s in segments)
    return [(prev, nxt) for prev, nxt in pairwise(spans) if nxt[0] <= prev[1]]


def local_start(cluster: Cluster, node: int, topic: str) -> int:
    batches = cluster.segment_batches(node, topic, 0)
    return batches[0][0] if batches else 0


def test_tiered_queue_through_leader_kills_and_a_wiped_broker(cluster: Cluster, topic: str,
                                                              tmp_path: Path) -> None:
    tier = FsTier(tmp_path / "remote")
    cluster.start({**tiered_config(tier), "zookeeper.session.timeout.ms": "2000",
                   "replica.lag.time.max.ms": "3000"})
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2",
                                       "remote.storage.enable": "true",
                                       "segment.bytes": SEGMENT_BYTES,
                                       "local.retention.bytes": LOCAL_RETENTION_BYTES})
    sender = Sender(cluster.bootstrap(), topic, SEND_PAUSE_S)
    sender.start()
    # The consumer starts once the early offsets are gone from every local disk.
    tiered = wait_for("the early offsets only in the tier", lambda: min(
        local_start(cluster, n, topic) for n in (1, 2, 3)))
    reader = Reader(cluster.bootstrap(), topic)
    reader.start()
    try:
        for kill in range(KILLS):
            wait_for("every replica in sync",
                     lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
            before = len(sender.ok)
            wait_for("progress before the kill",
                     lambda b=before: len(sender.ok) > b + PROGRESS)
            victim = cluster.leader(topic, 0)
            cluster.brokers[victim].kill()
            survivors = [n for n in (1, 2, 3) if n != victim]
            wait_for(f"kill {kill}: a live leader",
                     lambda s=survivors: cluster.partitions(topic, s[0])[0]["leader"] in s)
            if kill == WIPE_AT:
                # Wipe only once the ISR has dropped it, so "back in the ISR"
                # below means it rebuilt and caught up.
                wait_for("the victim out of the ISR", lambda v=victim, s=survivors: v not in
                         cluster.partitions(topic, s[0])[0]["isr"])
                shutil.rmtree(cluster.brokers[victim].workdir / "data")
            acked = len(sender.ok)
            wait_for(f"kill {kill}: produce goes on",
                     lambda a=acked: len(sender.ok) > a + PROGRESS)
            mark = cluster.brokers[victim].log_size()
            cluster.brokers[victim].start()
            if kill == WIPE_AT:
                wait_for("the wiped broker back in the ISR",
                         lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
                since = cluster.brokers[victim].log_path.read_bytes()[mark:]
                assert b"rebuilt from the remote tier" in since, "not rebuilt from the tier"
                assert local_start(cluster, victim, topic) > 0, "replicated from offset 0"
    finally:
        sender.stop.set()
        sender.join(WAIT_S * 3)
    wait_for("every replica in sync at the end",
             lambda: cluster.partitions(topic)[0]["isr"] == [1, 2, 3])
    log = consume_all(cluster, topic, 0)
    reader.stop.set()
    reader.join(WAIT_S)

    check_history(log, sender, reader)
    assert len(sender.ok) > KILLS * PROGRESS
    assert [o for o, _ in reader.seen[:tiered]] == list(range(tiered)), \
        "the consumer did not read the early offsets from the tier"

    def settled() -> list[Batch]:
        """The one history, once every replica has all of it and the tier
        holds each offset once (AssertionError, with why, until then)."""
        segments = remote_segments(tier, topic)
        assert all(segments), "an empty remote segment"
        locals_ = {n: cluster.segment_batches(n, topic, 0) for n in (1, 2, 3)}
        history = one_history(segments + list(locals_.values()))
        for n, local in locals_.items():
            assert is_suffix(local, history), (
                f"broker {n}'s local log, {local[:1]}..{local[-1:]}, is not a suffix of "
                f"the history, ..{history[-1:]}")
        twice = overlaps(segments)
        assert not twice, f"offsets twice in the remote tier: {twice[:5]}"
        return history

    history = wait_for("the tier and the replicas settled on one history", settled)
    assert history[-1][1] == len(log) - 1
    print(f"jepsen tiered: {KILLS} kills, {sender.sent} sent, {len(sender.ok)} ok, "
          f"{len(sender.failed)} failed, log {len(log)} in {len(history)} batches, "
          f"{len(tier.log_objects(topic))} remote segments, reader saw {len(reader.seen)}")
