"""Inter-broker messages kafka-python lacks: LeaderAndIsr, StopReplica,
UpdateMetadata, ControlledShutdown and AlterPartition (ZooKeeper-mode controller).

The layouts are Kafka's message schemas (field names and version ranges as in
``clients/src/main/resources/common/message``), written here as Python data
and built into message classes with kafka-python's schema machinery, so they
behave like its own (``Cls[version](...)``, ``.encode(version=)``,
``Cls.decode(data, version=)``, ``API_KEY``, flexible versions with tagged
fields). Only the versions tierd sends and accepts are defined (see
``INTER_BROKER``), which keeps the schemas small:

- LeaderAndIsr 5-7: topics carry ids; v6 adds LeaderRecoveryState, v7
  IsKRaftController; flexible throughout.
- UpdateMetadata 7-8: topics carry ids; v8 adds IsKRaftController and Type.
- StopReplica 3-4: per-partition leader epoch and delete flag; v4 IsKRaftController.
- ControlledShutdown 3: broker id and epoch.
- AlterPartition 0-1: topics by name; v1 adds LeaderRecoveryState.

This module is pure: building the classes opens no file (the schema loader
is handed our dicts instead of reading JSON resources).
"""

from __future__ import annotations

import copy
from typing import Any

import kafka.protocol.api_data as _api_data
from kafka.protocol.api_message import ApiMessage


def _f(name: str, type_: str, versions: str = "0+", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": versions, **extra}


def _message(name: str, api_key: int, kind: str, valid: str, flexible: str,
             fields: list[dict[str, Any]]) -> type:
    """An ApiMessage class for ``name`` built from the schema ``fields``."""
    schema = {"apiKey": api_key, "type": kind, "name": name, "validVersions": valid,
              "flexibleVersions": flexible, "fields": fields}
    real = _api_data.load_json
    _api_data.load_json = lambda _name, package=None: copy.deepcopy(schema)
    try:
        return type(name, (ApiMessage,), {"__module__": __name__})
    finally:
        _api_data.load_json = real


LeaderAndIsrRequest: Any = _message("LeaderAndIsrRequest", 4, "request", "0-7", "4+", [
    _f("ControllerId", "int32"),
    _f("IsKRaftController", "bool", "7+", default="false"),
    _f("ControllerEpoch", "int32"),
    _f("BrokerEpoch", "int64", "2+", default="-1"),
    # Kafka's field "Type"; renamed because kafka-python's classes have a ``type``.
    _f("RequestType", "int8", "5+", default="0"),
    _f("TopicStates", "[]LeaderAndIsrTopicState", "2+", fields=[
        _f("TopicName", "string", "2+"),
        _f("TopicId", "uuid", "5+"),
        _f("PartitionStates", "[]LeaderAndIsrPartitionState", "2+", fields=[
            _f("PartitionIndex", "int32"),
            _f("ControllerEpoch", "int32"),
            _f("Leader", "int32"),
            _f("LeaderEpoch", "int32"),
            _f("Isr", "[]int32"),
            _f("PartitionEpoch", "int32"),
            _f("Replicas", "[]int32"),
            _f("AddingReplicas", "[]int32", "3+"),
            _f("RemovingReplicas", "[]int32", "3+"),
            _f("IsNew", "bool", "1+", default="false"),
            _f("LeaderRecoveryState", "int8", "6+", default="0")])]),
    _f("LiveLeaders", "[]LeaderAndIsrLiveLeader", fields=[
        _f("BrokerId", "int32"), _f("HostName", "string"), _f("Port", "int32")]),
])
LeaderAndIsrResponse: Any = _message("LeaderAndIsrResponse", 4, "response", "0-7", "4+", [
    _f("ErrorCode", "int16"),
    _f("Topics", "[]LeaderAndIsrTopicError", "5+", fields=[
        _f("TopicId", "uuid", "5+"),
        _f("PartitionErrors", "[]LeaderAndIsrPartitionError", "5+", fields=[
            _f("PartitionIndex", "int32"), _f("ErrorCode", "int16")])]),
])

StopReplicaRequest: Any = _message("StopReplicaRequest", 5, "request", "0-4", "2+", [
    _f("ControllerId", "int32"),
    _f("IsKRaftController", "bool", "4+", default="false"),
    _f("ControllerEpoch", "int32"),
    _f("BrokerEpoch", "int64", "1+", default="-1"),
    _f("TopicStates", "[]StopReplicaTopicState", "3+", fields=[
        _f("TopicName", "string", "3+"),
        _f("PartitionStates", "[]StopReplicaPartitionState", "3+", fields=[
            _f("PartitionIndex", "int32", "3+"),
            _f("LeaderEpoch", "int32", "3+", default="-1"),
            _f("DeletePartition", "bool", "3+")])]),
])
StopReplicaResponse: Any = _message("StopReplicaResponse", 5, "response", "0-4", "2+", [
    _f("ErrorCode", "int16"),
    _f("PartitionErrors", "[]StopReplicaPartitionError", fields=[
        _f("TopicName", "string"), _f("PartitionIndex", "int32"), _f("ErrorCode", "int16")]),
])

UpdateMetadataRequest: Any = _message("UpdateMetadataRequest", 6, "request", "0-8", "6+", [
    _f("ControllerId", "int32"),
    _f("IsKRaftController", "bool", "8+", default="false"),
    _f("RequestType", "int8", "8+", default="0"),
    _f("ControllerEpoch", "int32"),
    _f("BrokerEpoch", "int64", "5+", default="-1"),
    _f("TopicStates", "[]UpdateMetadataTopicState", "5+", fields=[
        _f("TopicName", "string", "5+"),
        _f("TopicId", "uuid", "7+"),
        _f("PartitionStates", "[]UpdateMetadataPartitionState", "5+", fields=[
            _f("PartitionIndex", "int32"),
            _f("ControllerEpoch", "int32"),
            _f("Leader", "int32"),
            _f("LeaderEpoch", "int32"),
            _f("Isr", "[]int32"),
            _f("ZkVersion", "int32"),
            _f("Replicas", "[]int32"),
            _f("OfflineReplicas", "[]int32", "4+")])]),
    _f("LiveBrokers", "[]UpdateMetadataBroker", fields=[
        _f("Id", "int32"),
        _f("Endpoints", "[]UpdateMetadataEndpoint", "1+", fields=[
            _f("Port", "int32", "1+"), _f("Host", "string", "1+"),
            _f("Listener", "string", "3+"), _f("SecurityProtocol", "int16", "1+")]),
        _f("Rack", "string", "2+", nullableVersions="0+")]),
])
UpdateMetadataResponse: Any = _message("UpdateMetadataResponse", 6, "response", "0-8", "6+", [
    _f("ErrorCode", "int16"),
])

ControlledShutdownRequest: Any = _message("ControlledShutdownRequest", 7, "request", "0-3",
                                          "3+", [
    _f("BrokerId", "int32"),
    _f("BrokerEpoch", "int64", "2+", default="-1"),
])
ControlledShutdownResponse: Any = _message("ControlledShutdownResponse", 7, "response", "0-3",
                                           "3+", [
    _f("ErrorCode", "int16"),
    _f("RemainingPartitions", "[]RemainingPartition", fields=[
        _f("TopicName", "string"), _f("PartitionIndex", "int32")]),
])

AlterPartitionRequest: Any = _message("AlterPartitionRequest", 56, "request", "0-1", "0+", [
    _f("BrokerId", "int32"),
    _f("BrokerEpoch", "int64", default="-1"),
    _f("Topics", "[]TopicData", fields=[
        _f("TopicName", "string"),
        _f("Partitions", "[]PartitionData", fields=[
            _f("PartitionIndex", "int32"),
            _f("LeaderEpoch", "int32"),
            _f("NewIsr", "[]int32"),
            _f("LeaderRecoveryState", "int8", "1+", default="0"),
            _f("PartitionEpoch", "int32")])]),
])
AlterPartitionResponse: Any = _message("AlterPartitionResponse", 56, "response", "0-1", "0+", [
    _f("ThrottleTimeMs", "int32"),
    _f("ErrorCode", "int16"),
    _f("Topics", "[]TopicData", fields=[
        _f("TopicName", "string"),
        _f("Partitions", "[]PartitionData", fields=[
            _f("PartitionIndex", "int32"),
            _f("ErrorCode", "int16"),
            _f("LeaderId", "int32"),
            _f("LeaderEpoch", "int32"),
            _f("Isr", "[]int32"),
            _f("LeaderRecoveryState", "int8", "1+", default="0"),
            _f("PartitionEpoch", "int32")])]),
])

# (request, response, lowest, highest version tierd sends and accepts)
INTER_BROKER: dict[int, tuple[Any, Any, int, int]] = {
    4: (LeaderAndIsrRequest, LeaderAndIsrResponse, 5, 7),
    5: (StopReplicaRequest, StopReplicaResponse, 3, 4),
    6: (UpdateMetadataRequest, UpdateMetadataResponse, 7, 8),
    7: (ControlledShutdownRequest, ControlledShutdownResponse, 3, 3),
    56: (AlterPartitionRequest, AlterPartitionResponse, 0, 1),
}
