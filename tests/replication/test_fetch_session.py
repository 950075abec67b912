"""Fetch sessions (KIP-227): the cache's epochs and eviction rules, and
incremental fetches over a real ReplicaManager and logs: only partitions with
news are answered, an idle partition is not read, events wake a waiting
fetch, and a follower that names no partition stays caught up."""

from __future__ import annotations

import uuid

import pytest
import trio

from config import BrokerConfig, TopicConfigs
from protocol.errors import ErrorCode
from replication.fetch import FetchParams, FetchPartition
from replication.fetch_session import CachedPartition, FetchSessionCache, SessionError
from replication.metadata_cache import PartitionState
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager
from tests.helpers import batch

TPS = [("t", i) for i in range(4)]


def cached(offset: int = 0) -> CachedPartition:
    return CachedPartition(None, offset, 1 << 20)


def test_incremental_epochs_must_follow_one_another():
    cache = FetchSessionCache(10)
    session = cache.open(False, 1, now=0.0)
    assert session is not None and session.epoch == 1
    assert cache.incremental(session.id, 1, now=1.0) is session
    with pytest.raises(SessionError) as refused:
        cache.incremental(session.id, 1, now=2.0)  # replayed epoch
    assert refused.value.code is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.incremental(session.id, 2, now=2.0) is session
    with pytest.raises(SessionError) as missing:
        cache.incremental(session.id + 1, 1, now=2.0)
    assert missing.value.code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_notify_marks_only_the_sessions_holding_the_partition():
    cache = FetchSessionCache(10)
    a, b = cache.open(False, 1, 0.0), cache.open(True, 1, 0.0)
    assert a is not None and b is not None
    cache.put(a, TPS[0], cached())
    cache.put(b, TPS[1], cached())
    cache.notify(TPS[1])
    assert (a.dirty, b.dirty) == (set(), {TPS[1]})
    assert b.wake.is_set() and not a.wake.is_set()
    cache.forget(b, [TPS[1]])
    assert b.dirty == set() and cache.partitions_cached == 1
    cache.close(a.id)
    cache.notify(TPS[0])
    assert cache.size == 1 and cache.partitions_cached == 0


def test_a_full_cache_evicts_an_idle_session_first():
    cache = FetchSessionCache(2, eviction_s=120)
    old = cache.open(True, 1, now=0.0)
    busy = cache.open(True, 1, now=0.0)
    assert old is not None and busy is not None
    cache.incremental(busy.id, 1, now=100.0)
    assert cache.open(False, 1, now=110.0) is None  # nobody idle or old enough yet
    newcomer = cache.open(False, 1, now=121.0)  # `old` idle for 121 s
    assert newcomer is not None and old.id not in cache.sessions and cache.evictions == 1


def test_ranked_eviction_protects_followers_and_larger_sessions():
    cache = FetchSessionCache(2, eviction_s=120)
    follower = cache.open(True, 0, now=0.0)
    consumer = cache.open(False, 0, now=0.0)
    assert follower is not None and consumer is not None
    for i, tp in enumerate(TPS[:3]):
        cache.put(consumer, tp, cached(i))
    for session in (follower, consumer):  # both in use: neither is idle
        cache.incremental(session.id, 1, now=130.0)
    # A smaller consumer session ranks below the 3-partition consumer session,
    # and a consumer never evicts a follower.
    assert cache.open(False, 2, now=131.0) is None
    bigger = cache.open(False, 4, now=131.0)
    assert bigger is not None and consumer.id not in cache.sessions
    assert follower.id in cache.sessions


@pytest.fixture
def replicas(tmp_path):
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1",
                                        "replica.lag.time.max.ms": "10000"})
    rm = ReplicaManager(config, LogManager(config))
    cfg = TopicConfigs(config, {}).log_config()
    for tp in TPS:
        rm.become_leader(tp, uuid.uuid4(), cfg, PartitionState(1, 0, [1, 2], [1, 2]))
    yield rm
    for lg in rm.logs.logs.values():
        lg.close()


def follower_session(rm: ReplicaManager):
    session = rm.fetch_sessions.open(True, len(TPS), trio.current_time())
    assert session is not None
    for tp in TPS:
        rm.fetch_sessions.put(session, tp, cached())
    return session


def params(wait_ms: int = 0) -> FetchParams:
    return FetchParams([], max_wait_ms=wait_ms, replica_id=2)


async def test_incremental_fetch_answers_only_partitions_with_news(replicas, autojump_clock):
    session = follower_session(replicas)
    first = await replicas.fetch_incremental(params(), session, list(TPS))
    assert {(p.topic, p.partition) for p, _ in first} == set(TPS)  # first answer: all
    assert await replicas.fetch_incremental(params(), session, []) == []
    replicas.append_local(TPS[2], batch([b"a", b"b"]))
    [(p, r)] = await replicas.fetch_incremental(params(), session, [])
    assert ((p.topic, p.partition), r.high_watermark) == (TPS[2], 0)
    assert r.records  # the new batch, though the request named nothing
    # The follower now names the partition at its new position: the high
    # watermark moves, which is news for this session.
    replicas.fetch_sessions.put(session, TPS[2], cached(2))
    [(p, r)] = await replicas.fetch_incremental(params(), session, [TPS[2]])
    assert ((p.topic, p.partition), r.high_watermark, r.records) == (TPS[2], 2, b"")


async def test_a_moved_log_start_is_answered(replicas, autojump_clock):
    """Retention, DeleteRecords or a rebuilt tier move the log start without an
    append: the session still answers the partition with its new start."""
    session = follower_session(replicas)
    replicas.append_local(TPS[1], batch([b"a", b"b"]))
    replicas.fetch_sessions.put(session, TPS[1], cached(2))
    await replicas.fetch_incremental(params(), session, list(TPS))
    # The follower's fetch moved the high watermark: one more answer, then quiet.
    await replicas.fetch_incremental(params(), session, [])
    assert await replicas.fetch_incremental(params(), session, []) == []
    replicas.partition(TPS[1]).log.advance_log_start_offset(1)
    [(p, r)] = await replicas.fetch_incremental(params(), session, [])
    assert ((p.topic, p.partition), r.log_start_offset) == (TPS[1], 1)


async def test_idle_partitions_are_not_read(replicas, autojump_clock, monkeypatch):
    session = follower_session(replicas)
    await replicas.fetch_incremental(params(), session, list(TPS))
    reads: list[int] = []
    for tp in TPS:
        lg = replicas.partition(tp).log
        original = lg.read_for_send
        monkeypatch.setattr(lg, "read_for_send",
                            lambda *a, _i=tp[1], _o=original, **k: (reads.append(_i), _o(*a, **k))[1])
    replicas.append_local(TPS[1], batch([b"x"]))
    await replicas.fetch_incremental(params(), session, [])
    assert reads == [1]


async def test_a_waiting_incremental_fetch_wakes_on_append(replicas, autojump_clock):
    session = follower_session(replicas)
    await replicas.fetch_incremental(params(), session, list(TPS))
    answered: list[tuple[float, list]] = []

    async def fetch() -> None:
        got = await replicas.fetch_incremental(params(wait_ms=5000), session, [])
        answered.append((trio.current_time(), [(p.topic, p.partition) for p, _ in got]))

    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(fetch)
        await trio.sleep(1)
        assert answered == []
        replicas.append_local(TPS[3], batch([b"late"]))
    assert answered == [(start + 1, [TPS[3]])]


async def test_a_follower_naming_no_partition_stays_caught_up(replicas, autojump_clock):
    session = follower_session(replicas)
    await replicas.fetch_incremental(params(), session, list(TPS))
    part = replicas.partition(TPS[0])
    for _ in range(30):  # 30 s of fetches that name nothing: every partition idle
        await replicas.fetch_incremental(params(wait_ms=1000), session, [])
    now = trio.current_time()
    assert replicas.followers.caught_up_at(part, 2, now) == now
    # An append after the long idle spell: the follower was caught up until it,
    # not since its last fetch that named the partition (30 s ago).
    replicas.append_local(TPS[0], batch([b"new"]))
    assert replicas.followers.caught_up_at(part, 2, trio.current_time()) == now
    await trio.sleep(11)  # no fetch for longer than replica.lag.time.max.ms
    assert replicas.followers.caught_up_at(part, 2, trio.current_time()) < trio.current_time() - 10


def test_the_follower_names_only_what_changed_and_starts_over_when_refused():
    from replication.leader_session import LeaderSession

    session = LeaderSession()
    every = {TPS[0]: (5, 1, 1, 0), TPS[1]: (9, 1, 1, 0)}
    assert session.build(every, []) == (every, [])  # opening: everything
    assert session.answered(ErrorCode.NONE, 42)
    assert (session.id, session.epoch) == (42, 1)
    # TPS[0] advanced, TPS[2] reported changed but is where the leader has it
    # (not named), TPS[1] stopped fetching.
    named, forgotten = session.build({TPS[0]: (7, 1, 1, 0)}, [TPS[1], TPS[3]])
    assert (named, forgotten) == ({TPS[0]: (7, 1, 1, 0)}, [TPS[1]])
    assert session.answered(ErrorCode.NONE, 42) and session.epoch == 2
    assert session.sent == {TPS[0]: (7, 1, 1, 0)}
    assert session.build({TPS[0]: (7, 1, 1, 0)}, []) == ({}, [])
    assert not session.answered(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    assert (session.id, session.epoch, session.sent) == (0, 0, {})
    assert session.opening
    session.build({TPS[0]: (7, 1, 1, 0)}, [])
    session.answered(ErrorCode.NONE, 43)
    session.reset()  # a lost answer: full again, closing session 43
    assert (session.id, session.epoch, session.opening) == (43, 0, True)


async def test_an_answer_holds_a_bounded_number_of_partitions(replicas, autojump_clock,
                                                              monkeypatch):
    """Past ANSWER_PARTITIONS, the rest wait for the session's next answer,
    which comes at once (not after max_wait_ms)."""
    from replication import fetch

    monkeypatch.setattr(fetch, "ANSWER_PARTITIONS", 3)
    session = follower_session(replicas)
    await replicas.fetch_incremental(params(), session, list(TPS))
    await replicas.fetch_incremental(params(), session, [])
    for tp in TPS:
        replicas.append_local(tp, batch([b"burst"]))
    start = trio.current_time()
    first = await replicas.fetch_incremental(params(wait_ms=5000), session, [])
    second = await replicas.fetch_incremental(params(wait_ms=5000), session, [])
    assert len(first) == 3 and len(second) == 1
    assert {(p.topic, p.partition) for p, _ in first + second} == set(TPS)
    assert all(r.records for _, r in first + second)
    assert trio.current_time() == start


async def test_a_partition_back_from_a_delay_is_named_again(replicas, autojump_clock):
    """An error delays a partition; if the delay is over by the next request,
    the partition is named again though its position did not move (the
    leader answered it while the follower was not listening, and would not
    answer it again until it had news)."""
    from replication import fetcher as fetcher_module
    from replication.peer import Peer

    f = fetcher_module.ReplicaFetcher(replicas.config, replicas, Peer(2, "127.0.0.1", 9, "t"))
    for tp in TPS:
        f.add(tp, 0)

    def named(req) -> set:
        return {(t.topic, p.partition) for t in req.topics for p in t.partitions}

    assert named(f._build()) == set(TPS)
    f.session.answered(ErrorCode.NONE, 77)
    assert named(f._build()) == set()
    f.session.answered(ErrorCode.NONE, 77)
    f._delay(f.partitions[TPS[1]])  # e.g. NOT_LEADER_OR_FOLLOWER from a leader not ready yet
    f._move(f.partitions[TPS[1]], fetcher_module.S.FETCHING)  # the delay is over
    assert named(f._build()) == {TPS[1]}


async def test_an_empty_epoch_at_the_log_end_is_dropped_on_divergence(tmp_path, autojump_clock):
    """A follower that led an epoch and lost the lead before any append keeps
    that epoch at its log end. The new leader, which never had it, answers a
    divergence at the log end; the follower drops the epoch, names the
    partition again with the epoch of its last batch, and the leader then
    counts it caught up (before, the same divergence came back for ever and
    the follower never rejoined the ISR)."""
    from replication import fetcher as fetcher_module
    from replication.fetch import fetch as fetch_path
    from replication.peer import Peer


    tp = TPS[0]

    def broker(node: int):
        config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path / str(node)),
                                            "node.id": str(node)})
        return ReplicaManager(config, LogManager(config))

    leader, follower = broker(1), broker(2)
    cfg = TopicConfigs(leader.config, {}).log_config()
    tid = uuid.uuid4()
    leader.become_leader(tp, tid, cfg, PartitionState(1, 0, [1, 2], [1, 2]))
    await leader.append(tp, batch([b"a"]), acks=1)
    follower.become_follower(tp, tid, cfg, PartitionState(1, 0, [1, 2], [1, 2]))
    follower.append_as_follower(tp, bytearray(leader.partition(tp).log.read(
        0, 1 << 20, 1, True).data))
    # The follower led epoch 1 without appending; broker 1 leads again in epoch 2.
    follower.become_leader(tp, tid, cfg, PartitionState(2, 1, [1, 2], [2]))
    follower.become_follower(tp, tid, cfg, PartitionState(1, 2, [1, 2], [1]))
    leader.become_leader(tp, tid, cfg, PartitionState(1, 2, [1, 2], [1]))
    assert follower.partition(tp).log.epochs.latest_epoch == 1

    f = fetcher_module.ReplicaFetcher(follower.config, follower, Peer(1, "127.0.0.1", 9, "t"))
    f.add(tp, 2)
    for _ in range(2):
        req = f._build()
        [sent] = [p for t in req.topics for p in t.partitions]
        [result] = await fetch_path(leader, FetchParams([FetchPartition(
            tp[0], tp[1], sent.fetch_offset, 1 << 20, sent.current_leader_epoch,
            last_fetched_epoch=sent.last_fetched_epoch)], replica_id=2))
        if result.diverging_epoch is None:
            break
        f.session.answered(ErrorCode.NONE, 0)
        f._diverged(f.partitions[tp], *result.diverging_epoch)
    assert result.diverging_epoch is None and result.error == ErrorCode.NONE
    assert follower.partition(tp).log.epochs.latest_epoch == 0
    assert leader.partition(tp).follower_end_offsets[2] == 1
    for rm in (leader, follower):
        for lg in rm.logs.logs.values():
            lg.close()
