"""Last stable offset and the producer-side transaction rules of the log."""

from __future__ import annotations

import uuid

import pytest

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from replication.partition import Partition
from tests.helpers import decode_all
from tests.transactions.conftest import Producer, append_marker, plain


class SoleReplica(Partition):
    """A sole-replica leader partition over a log the test appends to directly:
    its high watermark follows the log end, as the ReplicaManager keeps it."""

    __slots__ = ()

    @property
    def last_stable_offset(self) -> int:
        self.maybe_advance_high_watermark(0)
        return Partition.last_stable_offset.fget(self)  # type: ignore[attr-defined]


def partition(lg) -> Partition:
    return SoleReplica("topic", 0, uuid.uuid4(), lg, 0, isr=[0], replicas=[0])


def error(fn, *args, **kw) -> ErrorCode:
    with pytest.raises(KafkaApiError) as info:
        fn(*args, **kw)
    return info.value.code


def test_no_transactions_lso_is_the_high_watermark(env):
    lg = env.open()
    plain(lg, b"a", b"b")
    assert lg.first_unstable_offset is None
    part = partition(lg)
    assert part.last_stable_offset == part.high_watermark == 2


def test_lso_is_the_first_offset_of_the_oldest_open_transaction(env):
    lg = env.open()
    part = partition(lg)
    a, b = Producer(lg, 1), Producer(lg, 2)
    plain(lg, b"p0")                # 0
    b_first = b.send(b"b0").first_offset   # 1: b opens
    a.send(b"a0")                   # 2: a opens
    b.send(b"b1")                   # 3
    assert part.last_stable_offset == b_first == 1
    b.end(committed=True)           # 4: b commits; a still open from 2
    assert part.last_stable_offset == 2
    a.end(committed=False)          # 5: a aborts
    assert part.last_stable_offset == part.high_watermark == 6
    a.send(b"a1")                   # 6: a's next transaction
    assert part.last_stable_offset == 6


def test_committed_reads_never_reach_the_lso(env):
    lg = env.open()
    part = partition(lg)
    plain(lg, b"p0", b"p1")
    Producer(lg, 1).send(b"open")
    plain(lg, b"p2")
    got = lg.read(0, 1 << 20, part.last_stable_offset)
    assert [r.offset for r in decode_all(got.data)] == [0, 1]
    assert lg.read(2, 1 << 20, part.last_stable_offset).data == b""


def test_open_transactions_survive_a_restart(env):
    lg = env.open(config={"segment_bytes": 250})
    a = Producer(lg, 1)
    first = a.send(b"x" * 100).first_offset
    plain(lg, b"y" * 100)
    plain(lg, b"z" * 100)
    for clean in (True, False):
        lg = env.reopen(lg, clean_shutdown=clean)
        assert lg.first_unstable_offset == first
    append_marker(lg, 1, 0, committed=True)
    assert lg.first_unstable_offset is None


def test_plain_write_while_a_transaction_is_open_is_invalid_txn_state(env):
    lg = env.open()
    a = Producer(lg, 1)
    a.send(b"in txn")
    assert error(a.send, b"plain", transactional=False) == ErrorCode.INVALID_TXN_STATE


def test_clients_may_not_write_control_batches(env):
    lg = env.open()
    data = bytearray(records.build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                                         producer_id=1, producer_epoch=0,
                                         attributes=records.ATTR_CONTROL | records.ATTR_TRANSACTIONAL,
                                         timestamp=env.clock.now))
    assert error(lg.append_as_leader, data, 0) == ErrorCode.INVALID_RECORD
    assert lg.end_offset == 0


def test_marker_fencing(env):
    lg = env.open()
    a = Producer(lg, 1, epoch=3)
    a.send(b"a0")
    a.end(committed=False, coordinator_epoch=5)
    a.send(b"a1")
    assert error(a.end, True, coordinator_epoch=4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert error(a.end, True, epoch=2, coordinator_epoch=5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert lg.first_unstable_offset is not None


def test_a_fencing_abort_bumps_the_epoch_and_rejects_the_zombie(env):
    lg = env.open()
    zombie = Producer(lg, 1, epoch=0)
    zombie.send(b"z0")
    append_marker(lg, 1, 1, committed=False)  # the coordinator aborts under epoch 1
    assert lg.first_unstable_offset is None
    assert error(zombie.send, b"z1") == ErrorCode.INVALID_PRODUCER_EPOCH
    fresh = Producer(lg, 1, epoch=2)
    fresh.send(b"f0")  # a new epoch starts at sequence 0
    assert lg.first_unstable_offset == lg.end_offset - 1
