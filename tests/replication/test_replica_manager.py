"""ReplicaManager over real logs: leadership, acks=all and the high watermark,
min.insync.replicas, and the fetch wake-ups (followers on append, consumers on
high-watermark advance). Followers here are simulated by reporting their log
end offsets, as the fetch path does for a follower's fetch."""

from __future__ import annotations

import uuid

import pytest
import trio

from config import BrokerConfig, TopicConfigs
from protocol.errors import ErrorCode, KafkaApiError
from replication.fetch import FetchParams, FetchPartition
from replication.metadata_cache import PartitionState
from replication.replica_manager import ReplicaManager
from storage.log.manager import LogManager
from tests.helpers import batch

TP = ("t", 0)


@pytest.fixture
def replicas(tmp_path):
    config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1"})
    rm = ReplicaManager(config, LogManager(config))
    yield rm
    for lg in rm.logs.logs.values():
        lg.close()


def lead(rm: ReplicaManager, isr: list[int], min_isr: int = 1, epoch: int = 0):
    cfg = TopicConfigs(rm.config, {"min.insync.replicas": str(min_isr)}).log_config()
    return rm.become_leader(TP, uuid.uuid4(), cfg, PartitionState(1, epoch, [1, 2, 3], isr))


async def test_sole_replica_high_watermark_follows_appends(replicas):
    part = lead(replicas, [1])
    result = await replicas.append(TP, batch([b"a", b"b"]), acks=-1, timeout_ms=1000)
    assert (result.first_offset, part.high_watermark) == (0, 2)


async def test_acks_all_waits_for_every_in_sync_follower(replicas, autojump_clock):
    part = lead(replicas, [1, 2, 3])
    answered: list[float] = []

    async def produce() -> None:
        await replicas.append(TP, batch([b"a"]), acks=-1, timeout_ms=30_000)
        answered.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.sleep(1)
        replicas.followers.update_follower(TP, 2, 1)
        await trio.sleep(1)
        assert answered == [] and part.high_watermark == 0  # replica 3 still behind
        replicas.followers.update_follower(TP, 3, 1)
    assert answered == [2.0] and part.high_watermark == 1


async def test_acks_all_times_out_with_request_timed_out(replicas, autojump_clock):
    lead(replicas, [1, 2])
    with pytest.raises(KafkaApiError) as info:
        await replicas.append(TP, batch([b"a"]), acks=-1, timeout_ms=1500)
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert trio.current_time() == 1.5


async def test_acks_one_does_not_wait(replicas, autojump_clock):
    part = lead(replicas, [1, 2])
    await replicas.append(TP, batch([b"a"]), acks=1)
    assert trio.current_time() == 0 and part.high_watermark == 0 and part.log.end_offset == 1


async def test_too_few_in_sync_replicas_refuse_acks_all_before_append(replicas):
    part = lead(replicas, [1], min_isr=2)
    with pytest.raises(KafkaApiError) as info:
        await replicas.append(TP, batch([b"a"]), acks=-1)
    assert info.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.log.end_offset == 0
    await replicas.append(TP, batch([b"a"]), acks=1)  # acks=1 is still taken
    assert part.log.end_offset == 1


async def test_isr_shrinking_below_min_after_append(replicas, autojump_clock):
    part = lead(replicas, [1, 2], min_isr=2)
    codes: list[ErrorCode] = []

    async def produce() -> None:
        offset = replicas.append_local(TP, batch([b"a"]), required_acks=-1).last_offset + 1
        codes.append((await replicas.followers.wait_replicated({TP: offset}, 30_000))[TP])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.sleep(1)
        replicas.followers.update_isr(TP, [1])
    assert codes == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
    assert part.high_watermark == 1


async def test_append_to_a_follower_is_not_leader(replicas):
    lead(replicas, [1])
    replicas.partition(TP).leader_id = 2
    with pytest.raises(KafkaApiError) as info:
        replicas.append_local(TP, batch([b"a"]))
    assert info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_consumer_fetch_wakes_on_high_watermark_not_on_append(replicas, autojump_clock):
    part = lead(replicas, [1, 2])
    got: list[tuple[float, int]] = []

    async def consume() -> None:
        [r] = await replicas.fetch(FetchParams([FetchPartition("t", 0, 0, 1 << 20)],
                                               max_wait_ms=10_000))
        got.append((trio.current_time(), len(r.records)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.sleep(1)
        await replicas.append(TP, batch([b"a"]), acks=1)
        await trio.sleep(1)
        assert got == []  # appended, but not yet below the high watermark
        replicas.followers.update_follower(TP, 2, 1)
    assert got[0][0] == 2.0 and got[0][1] > 0 and part.high_watermark == 1


async def test_fencing_by_leader_epoch(replicas):
    lead(replicas, [1], epoch=5)
    for epoch, code in ((4, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        [r] = await replicas.fetch(FetchParams([FetchPartition("t", 0, 0, 1 << 20, epoch)]))
        assert r.error == code
    [r] = await replicas.fetch(FetchParams([FetchPartition("t", 0, 0, 1 << 20, 5)]))
    assert r.error == ErrorCode.NONE


async def test_stop_replica_deletes_the_log(replicas, tmp_path):
    part = lead(replicas, [1])
    await replicas.append(TP, batch([b"a"]), acks=1)
    directory = part.log.directory
    await replicas.stop_replica(TP, delete=True)
    assert replicas.get(TP) is None
    assert not (tmp_path / "t-0").exists() and directory.endswith("t-0")


async def test_lookups_follow_leadership_and_stop_replica(replicas):
    led = lead(replicas, [1])
    cfg = TopicConfigs(replicas.config, {}).log_config()
    followed = replicas.become_follower(("f", 0), uuid.uuid4(), cfg,
                                        PartitionState(2, 0, [1, 2], [1, 2]))
    assert replicas.hosted() == [led, followed]
    assert (replicas.get(TP), replicas.get(("f", 0)), replicas.get(("x", 0))) == (
        led, followed, None)
    assert (replicas.leads(TP), replicas.leads(("f", 0)), replicas.leads(("x", 0))) == (
        True, False, False)
    await replicas.stop_replica(TP, delete=False)
    assert (replicas.hosted(), replicas.leads(TP)) == ([followed], False)


async def test_high_watermark_survives_a_restart_in_the_checkpoint(replicas, autojump_clock):
    part = lead(replicas, [1, 2])
    await replicas.append(TP, batch([b"a", b"b", b"c"]), acks=1)
    replicas.followers.update_follower(TP, 2, 2)
    assert part.high_watermark == 2
    await replicas.shutdown()

    logs = LogManager(replicas.config)
    logs.load(lambda topic: part.log.config, lambda topic: part.topic_id)
    reopened = ReplicaManager(replicas.config, logs)
    try:
        again = lead(reopened, [1, 2])
        # Not the log end (3): replica 2 has not confirmed offset 2 since.
        assert (again.high_watermark, again.log.end_offset) == (2, 3)
    finally:
        await reopened.shutdown()
