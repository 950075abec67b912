"""Fetch request fields whose place depends on the version.

A Fetch names the replica that sent it: -1 for a consumer, the broker id for
a follower. Up to v14 that is the top-level ``replica_id``; from v15
(KIP-903) it is ``replica_state.replica_id`` (with the broker epoch), and a
consumer leaves ``replica_state`` at its default.
"""

from __future__ import annotations

from typing import Any

# The replica id of a consumer's Fetch (and ListOffsets, OffsetForLeaderEpoch).
CONSUMER_REPLICA_ID = -1

# The first Fetch version with ``replica_state`` (KIP-903).
REPLICA_STATE_VERSION = 15


def replica_id(req: Any, version: int) -> int:
    """The id of the replica that sent Fetch ``req`` (``CONSUMER_REPLICA_ID``: a consumer)."""
    if version >= REPLICA_STATE_VERSION:
        state = getattr(req, "replica_state", None)
        return state.replica_id if state is not None else CONSUMER_REPLICA_ID
    return getattr(req, "replica_id", CONSUMER_REPLICA_ID)
