"""The states of a partition in a replica fetcher (Kafka's names, shown in the
``FollowerPartitions`` gauge). Which moves are allowed, and why, is the
fetcher's table (``replication.fetcher.TRANSITIONS``); the states live here so
the gauges can name them without importing the fetcher.
"""

from __future__ import annotations

import enum


class FollowerState(enum.Enum):
    FETCHING = "Fetching"
    TRUNCATING = "Truncating"
    BUILDING_REMOTE_AUX_STATE = "BuildingRemoteLogAuxState"
    DELAYED = "Delayed"
