"""Replication metrics with Kafka's names.

What Kafka calls them and where they live there:
- kafka.server:type=ReplicaManager — UnderReplicatedPartitions,
  UnderMinIsrPartitionCount, AtMinIsrPartitionCount, LeaderCount,
  PartitionCount (gauges) and IsrShrinksPerSec / IsrExpandsPerSec (meters);
- kafka.server:type=BrokerTopicMetrics — ReplicationBytesInPerSec (a follower's
  fetched bytes) and ReplicationBytesOutPerSec (a leader's bytes sent to
  followers);
- kafka.server:type=FetchSessionCache — NumIncrementalFetchSessions and
  NumIncrementalFetchPartitionsCached (gauges), IncrementalFetchSessionEvictionsPerSec
  (a meter);
- kafka.controller:type=KafkaController — ActiveControllerCount and
  OfflinePartitionsCount (0 on every broker but the active controller);
- kafka.controller:type=ControllerStats — LeaderElectionRateAndTimeMs (a timer
  of the controller's broker-change events, which is where Kafka's ZooKeeper
  mode elects leaders for a lost broker's partitions) and
  UncleanLeaderElectionsPerSec.

Exported as ``tierd_<Kafka name>``. Kafka's meters are Prometheus counters
(``..._total``; ``rate()`` over one is the meter's per-second rate), its timer
a histogram in milliseconds.

Concurrency: counters are incremented on the event loop where the event
happens (prometheus_client's counters take their own lock). The gauges are
derived from partition and controller state that the event loop mutates, so
they are computed on the event loop too, every ``SNAPSHOT_INTERVAL_S``, into
an immutable snapshot; the collector, called in prometheus_client's HTTP
thread, only reads the latest snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import trio
from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from replication.fetch_session import FetchSessionCache
from replication.follower_state import FollowerState
from replication.partition import Partition

PREFIX = "tierd_"
# How often the gauges are recomputed on the event loop: a Prometheus scrape
# (15 s by default) never sees values older than this, and one pass over the
# hosted partitions a second costs nothing next to serving them.
SNAPSHOT_INTERVAL_S = 1.0
# Leader election times in milliseconds: from a few ms (in-process, one
# partition) to many seconds (thousands of partitions, a slow ZooKeeper).
ELECTION_MS_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class ReplicaStats:
    """A broker's replication meters (Kafka's ReplicaManager and BrokerTopicMetrics).

    Counters are not registered anywhere: ``ReplicationCollector`` exports them.
    """

    def __init__(self) -> None:
        self.isr_shrinks = Counter(f"{PREFIX}IsrShrinksPerSec",
                                   "ISR shrinks committed by this broker as leader", registry=None)
        self.isr_expands = Counter(f"{PREFIX}IsrExpandsPerSec",
                                   "ISR expansions committed by this broker as leader",
                                   registry=None)
        self.bytes_in = Counter(f"{PREFIX}ReplicationBytesInPerSec",
                                "Record bytes fetched from leaders by this broker's followers",
                                registry=None)
        self.bytes_out = Counter(f"{PREFIX}ReplicationBytesOutPerSec",
                                 "Record bytes sent to followers by this broker as leader",
                                 registry=None)

        # KIP-963's names: followers rebuilding from the remote tier.
        self.aux_state_requests = Counter(
            f"{PREFIX}BuildRemoteLogAuxStateRequestsPerSec",
            "Attempts to rebuild a follower from the remote tier", registry=None)
        self.aux_state_errors = Counter(
            f"{PREFIX}BuildRemoteLogAuxStateErrorsPerSec",
            "Failed attempts to rebuild a follower from the remote tier", registry=None)

    def counters(self) -> list[Counter]:
        return [self.isr_shrinks, self.isr_expands, self.bytes_in, self.bytes_out,
                self.aux_state_requests, self.aux_state_errors]


class ControllerStats:
    """The controller's meters (Kafka's ControllerStats)."""

    def __init__(self) -> None:
        self.leader_election_ms = Histogram(
            f"{PREFIX}LeaderElectionRateAndTimeMs",
            "Time the controller took to handle a broker change (lost or joined broker), "
            "electing leaders as needed, in milliseconds", buckets=ELECTION_MS_BUCKETS,
            registry=None)
        self.unclean_elections = Counter(
            f"{PREFIX}UncleanLeaderElectionsPerSec",
            "Leaders elected from outside the ISR (unclean.leader.election.enable)",
            registry=None)


@dataclass(frozen=True, slots=True)
class ReplicaGauges:
    """Kafka's ReplicaManager gauges at one instant."""

    partition_count: int = 0
    leader_count: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    at_min_isr: int = 0

    @classmethod
    def of(cls, partitions: Iterable[Partition], node_id: int) -> ReplicaGauges:
        """Count hosted and led partitions; the ISR-based counts are the leader's
        (a follower's copy of the ISR may be stale), as in Kafka."""
        hosted = led = under = under_min = at_min = 0
        for part in partitions:
            hosted += 1
            if not part.is_leader(node_id):
                continue
            led += 1
            isr = len(part.isr)
            min_isr = part.log.config.min_insync_replicas
            under += isr < len(part.replicas)
            under_min += isr < min_isr
            at_min += isr == min_isr
        return cls(hosted, led, under, under_min, at_min)


class ReplicaSource(Protocol):
    """What the gauges read of a broker's replicas (``replication.replica_manager``)."""

    stats: ReplicaStats
    node_id: int
    fetch_sessions: FetchSessionCache

    def hosted(self) -> list[Partition]: ...


class ControllerSource(Protocol):
    """What the gauges read of the controller (``replication.controller``)."""

    stats: ControllerStats
    active: bool

    def offline_partition_count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ControllerGauges:
    """Kafka's KafkaController gauges at one instant (zero unless active)."""

    active_controller: int = 0
    offline_partitions: int = 0

    @classmethod
    def of(cls, controller: ControllerSource) -> ControllerGauges:
        if not controller.active:
            return cls()
        return cls(1, controller.offline_partition_count())


_REPLICA_GAUGES = {
    "partition_count": ("PartitionCount", "Partitions hosted by this broker"),
    "leader_count": ("LeaderCount", "Partitions this broker leads"),
    "under_replicated": ("UnderReplicatedPartitions",
                         "Led partitions whose ISR is smaller than their replica set"),
    "under_min_isr": ("UnderMinIsrPartitionCount",
                      "Led partitions whose ISR is below min.insync.replicas"),
    "at_min_isr": ("AtMinIsrPartitionCount",
                   "Led partitions whose ISR is exactly min.insync.replicas"),
}
_CONTROLLER_GAUGES = {
    "active_controller": ("ActiveControllerCount", "1 on the active controller, else 0"),
    "offline_partitions": ("OfflinePartitionsCount",
                           "Partitions without a live leader (active controller only)"),
}


@dataclass(frozen=True, slots=True)
class FollowerGauges:
    """The replica fetchers' partitions by state: a count per state, and which
    partitions are not simply fetching (rebuilding from the remote tier,
    truncating, backing off), so an operator sees what is stuck where."""

    by_state: tuple[tuple[str, int], ...] = ()
    not_fetching: tuple[tuple[str, int, str], ...] = ()

    @classmethod
    def of(cls, states: Iterable[tuple[tuple[str, int], FollowerState]]) -> FollowerGauges:
        counts = dict.fromkeys((s.value for s in FollowerState), 0)
        odd = []
        for (topic, partition), state in states:
            counts[state.value] += 1
            if state is not FollowerState.FETCHING:
                odd.append((topic, partition, state.value))
        return cls(tuple(sorted(counts.items())), tuple(sorted(odd)))


@dataclass(frozen=True, slots=True)
class FetchSessionGauges:
    """Kafka's FetchSessionCache metrics (kafka.server:type=FetchSessionCache)."""

    sessions: int = 0
    partitions: int = 0
    # A meter in Kafka; a counter here, as the other meters.
    evictions: int = 0
    incremental_requests: int = 0


@dataclass(frozen=True, slots=True)
class ReplicationSnapshot:
    replica: ReplicaGauges = ReplicaGauges()
    sessions: FetchSessionGauges = FetchSessionGauges()
    # None in single-node mode, which has no controller.
    controller: ControllerGauges | None = None
    followers: FollowerGauges = FollowerGauges()


class ReplicationCollector(Collector):
    """Exports the replication metrics: the gauges from the latest snapshot
    (taken on the event loop by ``run``), the meters as they are.

    Concurrency: ``snapshot`` runs on the event loop; ``collect`` in
    prometheus_client's HTTP thread reads ``self.latest``, replaced whole.
    """

    def __init__(self, replicas: ReplicaSource, controller: ControllerSource | None,
                 follower_states: Callable[[], Iterable[tuple[tuple[str, int],
                                                              FollowerState]]] | None = None
                 ) -> None:
        self.replicas = replicas
        self.controller = controller
        self.follower_states = follower_states
        self.stats = replicas.stats
        self.latest = ReplicationSnapshot()

    def snapshot(self) -> None:
        """Recompute the gauges (event loop only)."""
        controller = None if self.controller is None else ControllerGauges.of(self.controller)
        followers = (FollowerGauges() if self.follower_states is None
                     else FollowerGauges.of(self.follower_states()))
        cache = self.replicas.fetch_sessions
        self.latest = ReplicationSnapshot(
            ReplicaGauges.of(self.replicas.hosted(), self.replicas.node_id),
            FetchSessionGauges(cache.size, cache.partitions_cached, cache.evictions,
                               cache.incremental_requests),
            controller, followers)

    async def run(self, interval_s: float = SNAPSHOT_INTERVAL_S) -> None:
        """Snapshot the gauges every ``interval_s`` until cancelled."""
        while True:
            self.snapshot()
            await trio.sleep(interval_s)

    def collect(self) -> Iterator[Metric]:
        latest = self.latest
        yield from _gauges(_REPLICA_GAUGES, latest.replica)
        yield GaugeMetricFamily(f"{PREFIX}NumIncrementalFetchSessions",
                                "Fetch sessions (KIP-227) this broker keeps",
                                value=latest.sessions.sessions)
        yield GaugeMetricFamily(f"{PREFIX}NumIncrementalFetchPartitionsCached",
                                "Partitions held by this broker's fetch sessions",
                                value=latest.sessions.partitions)
        yield CounterMetricFamily(f"{PREFIX}IncrementalFetchSessionEvictionsPerSec",
                                  "Fetch sessions evicted to make room for new ones",
                                  value=latest.sessions.evictions)
        yield CounterMetricFamily(f"{PREFIX}incremental_fetch_requests",
                                  "Incremental fetch requests (KIP-227) this broker answered",
                                  value=latest.sessions.incremental_requests)
        if latest.controller is not None:
            yield from _gauges(_CONTROLLER_GAUGES, latest.controller)
        if self.follower_states is not None:
            by_state = GaugeMetricFamily(f"{PREFIX}FollowerPartitions",
                                         "Followed partitions by replica fetcher state",
                                         labels=["state"])
            for state, count in latest.followers.by_state:
                by_state.add_metric([state], count)
            yield by_state
            stuck = GaugeMetricFamily(
                f"{PREFIX}FollowerPartitionState",
                "1 for each followed partition not fetching, labelled with its state "
                "(BuildingRemoteLogAuxState, Truncating, Delayed)",
                labels=["topic", "partition", "state"])
            for topic, partition, state in latest.followers.not_fetching:
                stuck.add_metric([topic, str(partition), state], 1)
            yield stuck
        for counter in self.stats.counters():
            yield from counter.collect()
        if self.controller is not None:
            yield from self.controller.stats.leader_election_ms.collect()
            yield from self.controller.stats.unclean_elections.collect()


def _gauges(names: dict[str, tuple[str, str]], values: object) -> Iterator[Metric]:
    for field_name, (name, doc) in names.items():
        yield GaugeMetricFamily(PREFIX + name, doc, value=getattr(values, field_name))
