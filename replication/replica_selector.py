"""Which replica a consumer reads from (KIP-392, fetch from follower).

With ``replica.selector.class`` set to Kafka's RackAwareReplicaSelector, the
leader answers a consumer that names its ``client.rack`` (Fetch v11+
``rack_id``) with ``preferred_read_replica``: a replica in the consumer's
rack, when the leader is not in it. The consumer then fetches that partition
from the follower, which serves it up to its own high watermark (and the
remote tier below its local log start: a follower holds the tier's metadata
too), so the bytes never cross a zone.

The choice follows Kafka's selector: no rack, or the leader in the
consumer's rack, means the leader; otherwise the in-sync follower of that
rack that is furthest along, and only a follower that has the fetch offset
(a lagging or out-of-sync follower would leave the consumer behind for as
long as it stays the choice). No follower of the rack qualifies: the leader.
"""

from __future__ import annotations

from collections.abc import Callable

from replication.partition import Partition

# The answer that means "read from the leader" in a Fetch response.
LEADER = -1


def preferred_read_replica(part: Partition, leader: int, client_rack: str, offset: int,
                           rack_of: Callable[[int], str | None]) -> int:
    """The follower ``part``'s consumer in ``client_rack`` should read
    ``offset`` from, or ``LEADER``."""
    if not client_rack or rack_of(leader) == client_rack:
        return LEADER
    if offset < part.log.log_start_offset:
        return LEADER
    best = LEADER
    best_end = -1
    for replica in part.isr:
        if replica == leader or rack_of(replica) != client_rack:
            continue
        end = part.follower_end_offsets.get(replica, -1)
        if end >= offset and (end > best_end or (end == best_end and replica < best)):
            best, best_end = replica, end
    return best
