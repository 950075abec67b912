"""tierd's own request, outside Kafka's API key range: DescribeTiering.

Kafka has no request that tells an operator where a partition's data lives
(log start, local log start, highest tiered offset, log end), how far
tiering lags, or what a follower rebuilding from the remote tier is doing:
those are JMX gauges per broker. ``tierd admin tiering`` asks every broker
with this one request and merges the answers. Any client may send it; the
standard clients never do, and ignore the key in ApiVersions.

The key (32001) is far above Kafka's (below 100 today) and below int16's
limit, so it cannot collide with a future Kafka API. Built with the same
schema machinery as ``broker_apis`` (flexible from v0).

DescribeTiering v0:
    request:  Topics: null = every partition the broker hosts, else
              [Name, PartitionIndexes (empty = all of the topic)]
    response: per partition the broker hosts, its local view (role, offsets,
              local and remote sizes, copy lag, follower state).
DescribeTiering v1: the response also says whether the topic's
    tierd.remote.metadata.rebuilding is on in this broker's view (what
    ``tierd admin rebuild-metadata`` waits for on every replica).
"""

from __future__ import annotations

from typing import Any

from protocol.broker_apis import _f, _message

DESCRIBE_TIERING_KEY = 32001

DescribeTieringRequest: Any = _message(
    "DescribeTieringRequest", DESCRIBE_TIERING_KEY, "request", "0-1", "0+", [
        _f("Topics", "[]TopicRequest", nullableVersions="0+", fields=[
            _f("Name", "string"),
            _f("PartitionIndexes", "[]int32")])])

DescribeTieringResponse: Any = _message(
    "DescribeTieringResponse", DESCRIBE_TIERING_KEY, "response", "0-1", "0+", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("NodeId", "int32"),
        _f("Topics", "[]TopicResult", fields=[
            _f("Name", "string"),
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionResult", fields=[
                _f("PartitionIndex", "int32"),
                _f("ErrorCode", "int16"),
                # "leader" or "follower".
                _f("Role", "string"),
                _f("LeaderId", "int32"),
                _f("LeaderEpoch", "int32"),
                _f("RemoteStorageEnabled", "bool"),
                _f("LogStartOffset", "int64"),
                _f("LocalLogStartOffset", "int64"),
                # -1 while nothing is tiered.
                _f("HighestTieredOffset", "int64"),
                _f("HighWatermark", "int64"),
                _f("LogEndOffset", "int64"),
                _f("LocalBytes", "int64"),
                _f("LocalSegments", "int32"),
                # Closed local segments not yet tiered (leader only; -1 elsewhere).
                _f("CopyLagBytes", "int64"),
                _f("CopyLagSegments", "int32"),
                # Finished remote segments from the metadata this broker reads; -1
                # while that metadata is not loaded.
                _f("RemoteBytes", "int64"),
                _f("RemoteSegments", "int32"),
                # Followers: Fetching / Truncating / BuildingRemoteLogAuxState /
                # Delayed; null on a leader.
                _f("FollowerState", "string", nullableVersions="0+"),
                _f("AuxStateFailures", "int32"),
                _f("AuxStateError", "string", nullableVersions="0+"),
                _f("MetadataRebuilding", "bool", "1+", default="false")])])])
