"""Which replica fetcher follows which partition: one fetcher per (leader
broker, fetcher index), started with its first partition and stopped with its
last (see ``replication.fetcher`` for what a fetcher does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog
import trio

from config import BrokerConfig
from protocol.partition import TopicPartition
from replication.fetcher import ReplicaFetcher, fetcher_index
from replication.follower_state import FollowerState

if TYPE_CHECKING:
    from replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)


class FetcherManager:
    """Which fetcher follows which partition; fetchers start and stop with their partitions."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager,
                 peer_for: Any) -> None:
        self.config = config
        self.replicas = replicas
        self.peer_for = peer_for  # (leader id, fetcher index) -> Peer | None
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.assigned: dict[TopicPartition, tuple[int, int]] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def follow(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        """Fetch ``tp`` from ``leader`` (replacing any earlier assignment)."""
        self.unfollow(tp)
        key = (leader, fetcher_index(tp, self.config["num.replica.fetchers"]))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            peer = self.peer_for(*key)
            if peer is None:
                log.warning("leader endpoint unknown; not fetching", topic=tp[0],
                            partition=tp[1], leader=leader)
                return
            fetcher = ReplicaFetcher(self.config, self.replicas, peer)
            self.fetchers[key] = fetcher
            assert self._nursery is not None
            self._nursery.start_soon(self._run_fetcher, key, fetcher)
        fetcher.add(tp, leader_epoch)
        self.assigned[tp] = key

    def states(self) -> list[tuple[TopicPartition, FollowerState]]:
        """Every followed partition with its fetcher state (for metrics)."""
        return [(tp, fp.state) for fetcher in list(self.fetchers.values())
                for tp, fp in list(fetcher.partitions.items())]

    def describe(self, tp: TopicPartition) -> tuple[str, int, str | None] | None:
        """``tp``'s fetcher state, failed rebuilds in a row and the last rebuild
        error; None if not followed here (for DescribeTiering)."""
        key = self.assigned.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        fp = fetcher.partitions.get(tp) if fetcher is not None else None
        if fp is None:
            return None
        return fp.state.value, fp.aux_failures, fp.aux_error

    def unfollow(self, tp: TopicPartition) -> None:
        key = self.assigned.pop(tp, None)
        if key is None:
            return
        fetcher = self.fetchers.get(key)
        if fetcher is not None:
            fetcher.remove(tp)
            if not fetcher.partitions:
                del self.fetchers[key]
                fetcher.cancel_scope.cancel()

    async def _run_fetcher(self, key: tuple[int, int], fetcher: ReplicaFetcher) -> None:
        try:
            await fetcher.run()
        except Exception:
            log.exception("replica fetcher failed", leader=key[0], fetcher=key[1])
            self.fetchers.pop(key, None)
            for tp in [tp for tp, k in self.assigned.items() if k == key]:
                del self.assigned[tp]
        finally:
            await fetcher.leader.close()
