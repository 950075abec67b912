"""What an operator's election decides per partition (``admin_elections.decide``)."""

from __future__ import annotations

from protocol.errors import ErrorCode
from replication.admin_elections import ElectionType, decide
from replication.controller_context import ControllerContext
from replication.elections import NO_LEADER, LeaderAndIsr
from replication.metadata_cache import BrokerEndpoint

P, U = ElectionType.PREFERRED, ElectionType.UNCLEAN
TP = ("t", 0)


def _ctx(leader: int, isr: tuple[int, ...], live: tuple[int, ...]) -> ControllerContext:
    ctx = ControllerContext(epoch=3, brokers={b: BrokerEndpoint(b, "h", b) for b in live})
    ctx.assignments[TP] = [1, 2, 3]
    ctx.states[TP] = LeaderAndIsr(leader, 7, isr, 2)
    return ctx


def test_unknown_partition() -> None:
    assert decide(_ctx(1, (1,), (1,)), ("t", 9), P) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                         None)


def test_preferred() -> None:
    assert decide(_ctx(1, (1, 2), (1, 2)), TP, P) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    code, new = decide(_ctx(2, (1, 2), (1, 2)), TP, P)
    assert code == ErrorCode.NONE and new is not None
    assert (new.leader, new.leader_epoch, new.isr, new.controller_epoch) == (1, 8, (1, 2), 3)
    # The preferred replica down, or out of sync: not available.
    assert decide(_ctx(2, (1, 2), (2,)), TP, P) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    assert decide(_ctx(2, (2,), (1, 2)), TP, P) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)


def test_unclean() -> None:
    assert decide(_ctx(2, (2,), (1, 2)), TP, U) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    # The ISR's only member is gone: the first live replica leads, alone in the ISR.
    code, new = decide(_ctx(NO_LEADER, (1,), (2, 3)), TP, U)
    assert code == ErrorCode.NONE and new is not None
    assert (new.leader, new.isr, new.leader_epoch) == (2, (2,), 8)
    # A live in-sync replica is preferred to an out-of-sync one.
    code, new = decide(_ctx(NO_LEADER, (1, 3), (2, 3)), TP, U)
    assert new is not None and (new.leader, new.isr) == (3, (3,))
    assert decide(_ctx(NO_LEADER, (1,), ()), TP, U) == (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                                         None)
