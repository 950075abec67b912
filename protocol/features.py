"""Feature flags (KIP-584): which feature levels this broker supports, which
are finalized for the cluster, and whether an UpdateFeatures change is allowed.

tierd knows two features:

* ``transaction.version`` (KIP-890): level 0 the original transaction
  protocol; level 1 Kafka's flexible ``__transaction_state`` records (no
  client-visible change; tierd keeps writing value version 0, which every
  level reads); level 2 transactions v2: the coordinator bumps the producer
  epoch on every commit and abort (EndTxn v5 answers the new epoch), Produce
  v12 and TxnOffsetCommit v5 add their partitions to the transaction
  themselves. A Kafka 4 Java producer uses transactions v2 when the
  finalized level is at least 2.
* ``group.version`` (KIP-848): level 1 enables the consumer rebalance
  protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe); at level 0 those
  APIs answer UNSUPPORTED_VERSION, as Kafka's brokers do.

A feature finalized at level 0 is not listed (Kafka omits it, in ApiVersions
and in its ``/feature`` znode). The levels are cluster state kept by
``broker.features``; this module is the pure part: the tables and the rules.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.errors import ErrorCode

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
# The highest level of each feature this broker implements (the lowest is 0).
MAX_LEVELS: dict[str, int] = {TRANSACTION_VERSION: 2, GROUP_VERSION: 1}
MAX_TRANSACTION_VERSION = MAX_LEVELS[TRANSACTION_VERSION]
# Kafka 4 finalizes group.version 1 on a new cluster: the consumer protocol is on.
DEFAULT_GROUP_VERSION = 1
# ApiVersions v4 fixed KAFKA-17011: older versions must not list a feature
# whose minimum supported level is 0 (v3 clients fail to parse it).
_MIN_ZERO_SINCE = 4


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_level: int
    max_level: int


@dataclass(frozen=True, slots=True)
class Finalized:
    """The cluster's finalized levels (features at level 0 absent) and their
    epoch: the version of the znode (or file) they were read from."""

    levels: dict[str, int]
    epoch: int

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)


class UpgradeType(enum.IntEnum):
    """UpdateFeatures v1+ ``UpgradeType`` (v0's AllowDowngrade true means SAFE_DOWNGRADE)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def supported(api_version: int) -> list[Feature]:
    """The features this broker supports, as an ApiVersions response of
    ``api_version`` may list them."""
    features = [Feature(name, 0, top) for name, top in MAX_LEVELS.items()]
    if api_version < _MIN_ZERO_SINCE:
        features = [f for f in features if f.min_level > 0]
    return features


def finalized(finalized_levels: Finalized) -> list[Feature]:
    """The finalized features as ApiVersions lists them (min = max = the level)."""
    return [Feature(name, level, level)
            for name, level in sorted(finalized_levels.levels.items()) if level > 0]


def seed_levels(transaction_version: int) -> dict[str, int]:
    """The levels a cluster starts with when none are stored: ``transaction.version``
    from the broker's ``tierd.transaction.version``, ``group.version`` Kafka's default."""
    levels = {TRANSACTION_VERSION: min(transaction_version, MAX_TRANSACTION_VERSION),
              GROUP_VERSION: DEFAULT_GROUP_VERSION}
    return {name: level for name, level in levels.items() if level > 0}


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    message: str


def check_update(current: int, name: str, level: int, upgrade_type: int) -> Refusal | None:
    """Why setting ``name`` from ``current`` to ``level`` is refused, or None.

    The rules of Kafka 4's controller: an unknown upgrade type, a negative
    level, a feature or level this broker does not support, a downgrade sent
    as an upgrade and an "upgrade" sent as a downgrade are INVALID_UPDATE_VERSION.
    Setting the current level again is allowed (nothing changes).
    """
    def refuse(why: str) -> Refusal:
        return Refusal(ErrorCode.INVALID_UPDATE_VERSION,
                       f"Invalid update version {level} for feature {name}. {why}")

    if upgrade_type not in UpgradeType.__members__.values():
        return refuse("The broker does not support the given upgrade type.")
    if level < 0:
        return refuse("A feature version cannot be less than 0.")
    top = MAX_LEVELS.get(name)
    if top is None:
        return refuse("The broker does not support the given feature.")
    if level > top:
        return refuse(f"Broker only supports versions 0-{top}")
    if level < current and upgrade_type == UpgradeType.UPGRADE:
        return refuse("Can't downgrade the version of this feature without setting the "
                      "upgrade type to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UpgradeType.UPGRADE:
        return refuse("Can't downgrade to a newer version.")
    return None
