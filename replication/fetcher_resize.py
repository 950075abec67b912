"""Re-spreading the followed partitions when ``num.replica.fetchers`` changes on
a running broker (Kafka resizes its fetcher thread pool the same way).

Each partition belongs to fetcher ``fetcher_index(tp, num.replica.fetchers)``
of its leader; a partition whose index changes moves to its new fetcher, and
a fetcher left without partitions stops. A moved partition starts over in the
new fetcher as after a leadership change (FETCHING from its log end, with the
leader epoch it had), so nothing is lost; its fetch session with the leader
is a new one.

Concurrency: runs on the event loop without awaiting (the new fetchers start
in the manager's nursery).
"""

from __future__ import annotations

import structlog

from replication.fetcher import fetcher_index
from replication.fetcher_manager import FetcherManager

log = structlog.get_logger(__name__)


def resize(manager: FetcherManager) -> int:
    """Move every followed partition to its fetcher for the configured count;
    returns how many moved."""
    count = manager.config["num.replica.fetchers"]
    moved = 0
    for tp, (leader, index) in list(manager.assigned.items()):
        if index == fetcher_index(tp, count):
            continue
        fetcher = manager.fetchers.get((leader, index))
        followed = fetcher.partitions.get(tp) if fetcher is not None else None
        if followed is None:
            continue
        manager.follow(tp, leader, followed.leader_epoch)  # leaves the old fetcher first
        moved += 1
    log.info("replica fetchers resized", num_replica_fetchers=count, moved=moved,
             fetchers=len(manager.fetchers))
    return moved
