"""Feature flags advertised in ApiVersions v3+ (KIP-584): which feature levels
this broker supports and which level is finalized for the cluster.

tierd knows one feature, ``transaction.version`` (KIP-890):

* level 0: the original transaction protocol;
* level 1: Kafka's flexible ``__transaction_state`` records (no client-visible
  change; tierd keeps writing value version 0, which every level reads);
* level 2: transactions v2: the coordinator bumps the producer epoch on
  every commit and abort (EndTxn v5 answers the new epoch), Produce v12 and
  TxnOffsetCommit v5 add their partitions to the transaction themselves.

A Kafka 4 Java producer uses transactions v2 when the finalized level is at
least 2. The finalized level comes from the broker's
``tierd.transaction.version`` (ZooKeeper-mode Kafka had no KRaft feature
records to finalize it); level 0 is not listed as finalized, as Kafka omits
features finalized at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

TRANSACTION_VERSION = "transaction.version"
# Highest transaction.version this broker implements.
MAX_TRANSACTION_VERSION = 2
# The finalized features never change while a broker runs; clients read the
# epoch only to prefer the newest information among brokers.
FINALIZED_FEATURES_EPOCH = 0
# ApiVersions v4 fixed KAFKA-17011: older versions must not list a feature
# whose minimum supported level is 0 (v3 clients fail to parse it).
_MIN_ZERO_SINCE = 4


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_level: int
    max_level: int


def supported(api_version: int) -> list[Feature]:
    """The features this broker supports, as an ApiVersions response of
    ``api_version`` may list them."""
    features = [Feature(TRANSACTION_VERSION, 0, MAX_TRANSACTION_VERSION)]
    if api_version < _MIN_ZERO_SINCE:
        features = [f for f in features if f.min_level > 0]
    return features


def finalized(transaction_version: int) -> list[Feature]:
    """The finalized features, given the configured transaction.version level."""
    if transaction_version <= 0:
        return []
    level = min(transaction_version, MAX_TRANSACTION_VERSION)
    return [Feature(TRANSACTION_VERSION, level, level)]

