"""Leader elections and ISR edits the controller makes, as pure functions.

Every function takes a partition's assignment (replicas in preference
order), its current state and the set of live brokers, and returns the next
state or None when no change is possible. The controller persists the result
with a compare-and-set and tells the brokers; nothing here touches ZooKeeper
or the network, so each rule is tested on its own.

The rules are Kafka's (ZooKeeper-mode PartitionStateMachine):
- offline partition: the first live ISR member in assignment order leads;
  with unclean.leader.election.enable, failing that, the first live replica
  (ISR = just it: data the ISR had may be lost, which is what "unclean" means);
- a replica going offline leaves the ISR, except the last member, which
  stays so that only it can lead again cleanly when it returns;
- controlled shutdown: a live ISR member that is not shutting down leads, and
  the shutting-down broker leaves the ISR;
- preferred replica: the first replica leads again once it is live and in sync;
- restarted members: a broker whose registration (its broker epoch, the
  zxid that created it) is newer than the state's last write restarted after
  that ISR was decided, possibly with a wiped or torn log, without a
  controller seeing it go: it leaves the ISR (``drop_restarted``).
Every leader change bumps the leader epoch; an ISR-only change keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

NO_LEADER = -1
# Kafka's leader id in UpdateMetadata for a partition being deleted.
LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state znode, and its version (the partition epoch)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 0
    # ZooKeeper's zxid of the znode's last write (-1: not known): brokers
    # registered after it restarted since this ISR was decided.
    zxid: int = -1

    def with_leader(self, leader: int, isr: list[int], controller_epoch: int) -> LeaderAndIsr:
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr),
                       controller_epoch=controller_epoch)

    def with_isr(self, isr: list[int], controller_epoch: int) -> LeaderAndIsr:
        return replace(self, isr=tuple(isr), controller_epoch=controller_epoch)


def initial_state(replicas: list[int], live: set[int], controller_epoch: int
                  ) -> LeaderAndIsr | None:
    """A new partition: the first live replica leads, the live replicas are in sync."""
    up = [r for r in replicas if r in live]
    if not up:
        return None
    return LeaderAndIsr(up[0], 0, tuple(up), controller_epoch)


def offline_election(replicas: list[int], state: LeaderAndIsr, live: set[int],
                     unclean: bool, controller_epoch: int) -> LeaderAndIsr | None:
    """A partition whose leader is gone (or none): elect from the live ISR."""
    live_isr = [r for r in replicas if r in state.isr and r in live]
    if live_isr:
        isr = [r for r in state.isr if r in live]
        return state.with_leader(live_isr[0], isr, controller_epoch)
    if unclean:
        up = [r for r in replicas if r in live]
        if up:
            return state.with_leader(up[0], [up[0]], controller_epoch)
    return None


def remove_replica(state: LeaderAndIsr, broker: int, controller_epoch: int
                   ) -> LeaderAndIsr | None:
    """``broker`` went offline: it leaves the ISR (unless it is the last member)
    and, if it led, the partition has no leader until an election."""
    if broker not in state.isr and broker != state.leader:
        return None
    isr = [r for r in state.isr if r != broker] or list(state.isr)
    if broker == state.leader:
        return state.with_leader(NO_LEADER, isr, controller_epoch)
    return state.with_isr(isr, controller_epoch)


def controlled_shutdown_election(replicas: list[int], state: LeaderAndIsr, live: set[int],
                                 shutting_down: set[int], controller_epoch: int
                                 ) -> LeaderAndIsr | None:
    """Move leadership off a broker that is shutting down, to a live ISR member."""
    candidates = [r for r in replicas
                  if r in state.isr and r in live and r not in shutting_down]
    if not candidates:
        return None
    isr = [r for r in state.isr if r not in shutting_down]
    return state.with_leader(candidates[0], isr, controller_epoch)


def preferred_election(replicas: list[int], state: LeaderAndIsr, live: set[int],
                       controller_epoch: int) -> LeaderAndIsr | None:
    """Give leadership back to the first replica, if it is live, in sync and not leading."""
    preferred = replicas[0] if replicas else NO_LEADER
    if preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return state.with_leader(preferred, list(state.isr), controller_epoch)


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    start_partition: int = 0, seed: int = 0) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: leaders round-robin from a start index,
    followers shifted by a per-partition step so replicas spread evenly.

    Args:
        brokers: live broker ids; partitions: how many to assign, numbered from
            ``start_partition``; seed: picks the start index and the first shift
            (Kafka uses a random one).
    """
    ids = sorted(brokers)
    n = len(ids)
    out: dict[int, list[int]] = {}
    for p, first, shift in _leader_slots(n, partitions, start_partition, seed):
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1) if n > 1 else 0
            replicas.append(ids[(first + step) % n])
        out[p] = replicas
    return out


def _leader_slots(n: int, partitions: int, start_partition: int, seed: int
                  ) -> Iterator[tuple[int, int, int]]:
    """Per partition: (partition, index of its first replica among ``n``
    brokers, the followers' shift). Leaders go round-robin from a start
    index; the shift grows by one after each round, so successive rounds
    pair each leader with other followers."""
    start = seed % n
    shift = seed % n
    for i in range(partitions):
        p = start_partition + i
        if p > 0 and p % n == 0:
            shift += 1
        yield p, (p + start) % n, shift


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Brokers ordered so that consecutive ones sit in different racks: one
    from each rack in rack-name order, round after round, lowest id first."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[int] = []
    for i in range(max(len(q) for q in queues)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def assign_replicas_rack_aware(racks: dict[int, str], partitions: int,
                               replication_factor: int, start_partition: int = 0,
                               seed: int = 0) -> dict[int, list[int]]:
    """Kafka's rack-aware assignment: as ``assign_replicas`` over the
    rack-alternated broker list, but a follower goes to a rack that has no
    replica of the partition yet (while one is left) and to a broker that has
    none (while one is left), so a partition's replicas span
    min(replication factor, racks) racks.

    Args:
        racks: every live broker's rack.
    """
    ordered = rack_alternated(racks)
    n = len(ordered)
    rack_count = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for p, first, shift in _leader_slots(n, partitions, start_partition, seed):
        replicas = [ordered[first]]
        used_racks = {racks[ordered[first]]}
        k = 0
        while len(replicas) < replication_factor:
            step = 1 + (shift * rack_count + k) % (n - 1)
            broker = ordered[(first + step) % n]
            k += 1
            if broker in replicas and len(replicas) < n:
                continue
            if racks[broker] in used_racks and len(used_racks) < rack_count:
                continue
            replicas.append(broker)
            used_racks.add(racks[broker])
        out[p] = replicas
    return out


def drop_restarted(state: LeaderAndIsr, broker_epochs: dict[int, int],
                   controller_epoch: int) -> LeaderAndIsr | None:
    """``state`` without the ISR members that registered after it was written
    (None if none did, or if they are all of the ISR: the last members stay,
    as in ``remove_replica``). A restarted leader loses the leadership too."""
    if state.zxid < 0:
        return None
    stale = [b for b in state.isr if broker_epochs.get(b, -1) > state.zxid]
    keep = [b for b in state.isr if b not in stale]
    if not stale or not keep:
        return None
    if state.leader in keep:
        return state.with_isr(keep, controller_epoch)
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                   isr=tuple(keep), controller_epoch=controller_epoch)
