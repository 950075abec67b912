"""ACL authorization on a real broker (issue 12).

One broker for the module with ``authorizer.class.name`` set,
``allow.everyone.if.no.acl.found=false`` and super users ``User:admin`` and
``User:ANONYMOUS`` (the PLAINTEXT listener stands for an operator's internal
listener). Clients come in as ``alice`` (SASL PLAIN), or with alice's client
certificate over mutual TLS (its subject ``CN=alice,OU=eng,O=tierd-tests``
mapped by ``ssl.principal.mapping.rules`` to the principal ``User:alice@eng``).

The table test walks Kafka's operation/resource matrix: for every API,
alice's request is refused with the API's authorization error while she
lacks the ACL it needs (with only part of it, for APIs that need two), and
passes the authorizer once the ACLs exist. Real clients then work through
ACLs made with confluent-kafka's admin API (createAcls / describeAcls /
deleteAcls): the Java and librdkafka producers, kafka-python over mutual
TLS, Metadata hiding what alice may not describe, and the ACLs surviving a
restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol import admin as ka
from kafka.protocol import consumer as kc
from kafka.protocol import metadata as km
from kafka.protocol import producer as kp

from protocol import broker_apis, consumer_group_apis, records, tierd_apis
from protocol.errors import ErrorCode
from system_tests import javatool
from system_tests._proc import (
    TierdProc,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
    scrape,
    start_tierd,
)
from system_tests.admin import create_topic
from system_tests.certs import ALICE_SUBJECT, Pki, make_pki
from system_tests.clients import DRIVERS
from system_tests.clients.base import ClientSecurity, librdkafka_options
from system_tests.clients.java_client import prop_args
from system_tests.harness import free_port
from system_tests.messages import OutMessage
from system_tests.raw_secure import Raw

ALICE_PASSWORD = "alice-acl-Secret"
ADMIN_PASSWORD = "admin-acl-Secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'user_alice="{ALICE_PASSWORD}" user_admin="{ADMIN_PASSWORD}";')
AUTH_CODES = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
              ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

# Certificate subjects become user@unit principals (KIP-371 rules).
MTLS_RULES = r"RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT"
MTLS_PRINCIPAL = "User:alice@eng"  # from ALICE_SUBJECT

# Resources of the table test (created by the fixture).
T, G, X = "acl-t", "acl-g", "acl-txn"
# Codes as the protocol writes them (kafka-python's ACL request fields).
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
OP = {"ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
      "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}


def codes(obj: Any) -> set[int]:
    """Every error code anywhere in a response."""
    out: set[int] = set()
    fields = getattr(type(obj), "fields", None)
    if not isinstance(fields, dict):
        return out
    for name in fields:
        value = getattr(obj, name, None)
        if name.endswith("error_code") and isinstance(value, int):
            out.add(value)
        elif isinstance(value, list):
            for item in value:
                out |= codes(item)
        elif value is not None and hasattr(type(value), "fields"):
            out |= codes(value)
    return out


def sub(cls: Any, *path: str) -> Any:
    for name in path:
        cls = cls.fields[name].data_class
    return cls


@dataclass
class AclBroker:
    broker: TierdProc
    pki: Pki
    ports: dict[str, int]

    def admin_conn(self) -> Raw:
        return Raw(self.ports["PLAINTEXT"])

    def alice(self) -> Raw:
        conn = Raw(self.ports["SASL_PLAINTEXT"])
        assert conn.sasl_plain("alice", ALICE_PASSWORD).error_code == 0
        return conn

    def grant(self, grants: list[tuple[int, str, int, str]], principal: str = "User:alice"
              ) -> None:
        cls = ka.CreateAclsRequest[2]
        creation = sub(cls, "creations")
        conn = self.admin_conn()
        try:
            resp = conn.call(cls(creations=[creation(
                resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                principal=principal, host="*", operation=OP[op], permission_type=3)
                for rtype, name, pattern, op in grants]), 2, ka.CreateAclsResponse)
        finally:
            conn.close()
        assert codes(resp) <= {0}, resp

    def revoke_all(self) -> None:
        conn = self.admin_conn()
        try:
            flt = sub(ka.DeleteAclsRequest[2], "filters")(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1)
            resp = conn.call(ka.DeleteAclsRequest[2](filters=[flt]), 2, ka.DeleteAclsResponse)
        finally:
            conn.close()
        assert codes(resp) <= {0}


def _plain(listener: str) -> ClientSecurity:
    return ClientSecurity(listener, mechanism="PLAIN", username="alice", password=ALICE_PASSWORD)


@pytest.fixture(scope="module")
def acl_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> AclBroker:
    workdir = tmp_path_factory.mktemp("acls")
    pki = make_pki(workdir / "pki")
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port(), "SSL": free_port()}
    broker = start_tierd(request, workdir / "broker", {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": MTLS_RULES,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
        "auto.create.topics.enable": "true",
    }, port=ports["PLAINTEXT"])
    for name in (T, "acl-victim", "acl-grow"):
        create_topic(broker.bootstrap, name, 1)
    # The group exists: the admin commits an offset for it.
    conn = Raw(ports["PLAINTEXT"])
    try:
        assert codes(conn.call(_offset_commit(G), 8, kc.OffsetCommitResponse)) == {0}
    finally:
        conn.close()
    return AclBroker(broker, pki, ports)


# -- the table: every API, without and with the ACLs it needs ---------------------------------


def _offset_commit(group: str) -> Any:
    cls = kc.OffsetCommitRequest[8]
    topic = sub(cls, "topics")
    return cls(group_id=group, generation_id_or_member_epoch=-1, member_id="",
               group_instance_id=None, topics=[topic(name=T, partitions=[sub(
                   topic, "partitions")(partition_index=0, committed_offset=0,
                                        committed_metadata="")])])


def _produce(txn: str | None = None) -> Any:
    req = produce_request(T, 0, records.build_batch([(b"k", b"v")]), acks=1)
    req.transactional_id = txn
    return req


def _replica_fetch() -> Any:
    req = fetch_request({(T, 0): 0}, version=12)
    req.replica_id = 1
    return req


def _offset_fetch() -> Any:
    cls = kc.OffsetFetchRequest[7]
    return cls(group_id=G, topics=[sub(cls, "topics")(name=T, partition_indexes=[0])],
               require_stable=False)


def _find(key: str, key_type: int) -> Any:
    return km.FindCoordinatorRequest[3](key=key, key_type=key_type)


def _join() -> Any:
    cls = kc.JoinGroupRequest[5]
    return cls(group_id=G, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
               group_instance_id=None, protocol_type="consumer",
               protocols=[sub(cls, "protocols")(name="range", metadata=b"")])


def _topic_parts(cls: Any, field: str, name_field: str = "name", **part: Any) -> list[Any]:
    topic = sub(cls, field)
    (pfield,) = [n for n in topic.fields if n not in (name_field, "topic_id")][:1]
    return [topic(**{name_field: T}, **{pfield: [sub(topic, pfield)(**part)]})]


def _txn_offset_commit() -> Any:
    cls = kp.TxnOffsetCommitRequest[3]
    return cls(transactional_id=X, group_id=G, producer_id=0, producer_epoch=0,
               generation_id=-1, member_id="", group_instance_id=None,
               topics=_topic_parts(cls, "topics", partition_index=0, committed_offset=0,
                                   committed_leader_epoch=-1, committed_metadata=""))


def _markers() -> Any:
    cls = kp.WriteTxnMarkersRequest[1]
    marker = sub(cls, "markers")
    return cls(markers=[marker(producer_id=0, producer_epoch=0, transaction_result=True,
                               topics=[sub(marker, "topics")(name=T, partition_indexes=[0])],
                               coordinator_epoch=0)])


def _configs(cls: Any, version: int, rtype: int, name: str, **extra: Any) -> Any:
    res = sub(cls[version], "resources")
    return cls[version](resources=[res(resource_type=rtype, resource_name=name, **extra)],
                        **({} if cls is ka.DescribeConfigsRequest else {"validate_only": True}))


def _alter_config(version: int) -> Any:
    cls = ka.AlterConfigsRequest
    cfg = sub(cls[version], "resources", "configs")
    return _configs(cls, version, 2, T, configs=[cfg(name="retention.ms", value="86400000")])


def _incremental_config() -> Any:
    cls = ka.IncrementalAlterConfigsRequest
    cfg = sub(cls[1], "resources", "configs")
    return _configs(cls, 1, 2, T, configs=[cfg(name="retention.ms", config_operation=0,
                                               value="86400000")])


# A filter on a topic no ACL names (Describe/DeleteAcls).
ACL_FILTER = dict(resource_type_filter=2, resource_name_filter="nothing", pattern_type_filter=3,
                  principal_filter=None, host_filter=None, operation=1, permission_type=1)


def _create_acls() -> Any:
    cls = ka.CreateAclsRequest[2]
    return cls(creations=[sub(cls, "creations")(
        resource_type=2, resource_name="acl-made-by-alice", resource_pattern_type=3,
        principal="User:bob", host="*", operation=3, permission_type=3)])


def _client_quotas() -> Any:
    cls = ka.AlterClientQuotasRequest[1]
    entry = sub(cls, "entries")
    return cls(entries=[entry(entity=[sub(entry, "entity")(entity_type="user",
                                                          entity_name="alice")],
                              ops=[sub(entry, "ops")(key="producer_byte_rate", value=1e6,
                                                     remove=False)])],
               validate_only=True)


def _scram() -> Any:
    cls = ka.AlterUserScramCredentialsRequest[0]
    return cls(deletions=[sub(cls, "deletions")(name="nobody", mechanism=2)], upsertions=[])


def _cg_heartbeat() -> Any:
    """A KIP-848 join; a fresh member id each time, so a granted retry is a new member."""
    return consumer_group_apis.ConsumerGroupHeartbeatRequest[1](
        group_id=G, member_id=uuid.uuid4().hex, member_epoch=0, instance_id=None,
        rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=[T],
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=[])


@dataclass(frozen=True)
class Row:
    """An API call; the code alice gets without ``needs`` (having only
    ``partial``); with ``needs`` granted, no authorization error."""

    id: str
    version: int
    response: Any
    build: Callable[[], Any]
    code: ErrorCode
    needs: tuple[tuple[int, str, int, str], ...]
    partial: tuple[tuple[int, str, int, str], ...] = ()


TOPIC_ERR = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_ERR = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_ERR = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_ERR = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
KC = "kafka-cluster"
WRITE_T = (TOPIC, T, LITERAL, "WRITE")
READ_T = (TOPIC, T, LITERAL, "READ")
READ_G = (GROUP, G, LITERAL, "READ")
WRITE_X = (TXN, X, LITERAL, "WRITE")

ROWS = [
    Row("Produce", 9, kp.ProduceResponse, _produce, TOPIC_ERR, (WRITE_T,)),
    Row("Produce-prefixed", 9, kp.ProduceResponse, _produce, TOPIC_ERR,
        ((TOPIC, "acl-", PREFIXED, "WRITE"),)),
    Row("Produce-transactional", 9, kp.ProduceResponse, lambda: _produce(X), TXN_ERR,
        (WRITE_T, WRITE_X), (WRITE_T,)),
    Row("Fetch", 12, kc.FetchResponse, lambda: fetch_request({(T, 0): 0}, version=12),
        TOPIC_ERR, (READ_T,)),
    Row("Fetch-follower", 12, kc.FetchResponse, _replica_fetch, CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "CLUSTER_ACTION"),), (READ_T,)),
    Row("ListOffsets", 7, kc.ListOffsetsResponse, lambda: list_offsets_request(T, {0: -1}),
        TOPIC_ERR, ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("Metadata", 9, km.MetadataResponse, lambda: metadata_request([T]), TOPIC_ERR,
        ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("Metadata-auto-create", 9, km.MetadataResponse,
        lambda: km.MetadataRequest[9](topics=[sub(km.MetadataRequest[9], "topics")(
            name="acl-auto-" + uuid.uuid4().hex[:6])], allow_auto_topic_creation=True),
        TOPIC_ERR, ((TOPIC, "acl-auto-", PREFIXED, "CREATE"),),
        ((TOPIC, "acl-auto-", PREFIXED, "DESCRIBE"),)),
    Row("OffsetCommit", 8, kc.OffsetCommitResponse, lambda: _offset_commit(G), GROUP_ERR,
        (READ_G, READ_T), (READ_T,)),
    Row("OffsetCommit-topic", 8, kc.OffsetCommitResponse, lambda: _offset_commit(G),
        TOPIC_ERR, (READ_G, READ_T), (READ_G,)),
    Row("OffsetFetch", 7, kc.OffsetFetchResponse, _offset_fetch, GROUP_ERR,
        ((GROUP, G, LITERAL, "DESCRIBE"), (TOPIC, T, LITERAL, "DESCRIBE")),
        ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("OffsetFetch-topic", 7, kc.OffsetFetchResponse, _offset_fetch, TOPIC_ERR,
        ((GROUP, G, LITERAL, "DESCRIBE"), (TOPIC, T, LITERAL, "DESCRIBE")),
        ((GROUP, G, LITERAL, "DESCRIBE"),)),
    Row("FindCoordinator-group", 3, km.FindCoordinatorResponse, lambda: _find(G, 0), GROUP_ERR,
        ((GROUP, G, LITERAL, "DESCRIBE"),)),
    Row("FindCoordinator-txn", 3, km.FindCoordinatorResponse, lambda: _find(X, 1), TXN_ERR,
        ((TXN, X, LITERAL, "DESCRIBE"),)),
    Row("JoinGroup", 5, kc.JoinGroupResponse, _join, GROUP_ERR, (READ_G,)),
    Row("Heartbeat", 3, kc.HeartbeatResponse,
        lambda: kc.HeartbeatRequest[3](group_id=G, generation_id=1, member_id="m",
                                       group_instance_id=None), GROUP_ERR, (READ_G,)),
    Row("LeaveGroup", 3, kc.LeaveGroupResponse, lambda: kc.LeaveGroupRequest[3](
        group_id=G, members=[sub(kc.LeaveGroupRequest[3], "members")(member_id="m")]),
        GROUP_ERR, (READ_G,)),
    Row("SyncGroup", 3, kc.SyncGroupResponse, lambda: kc.SyncGroupRequest[3](
        group_id=G, generation_id=1, member_id="m", assignments=[]), GROUP_ERR, (READ_G,)),
    Row("DescribeGroups", 5, ka.DescribeGroupsResponse, lambda: ka.DescribeGroupsRequest[5](
        groups=[G], include_authorized_operations=True), GROUP_ERR,
        ((GROUP, G, LITERAL, "DESCRIBE"),)),
    Row("ConsumerGroupHeartbeat", 1, consumer_group_apis.ConsumerGroupHeartbeatResponse,
        lambda: _cg_heartbeat(), GROUP_ERR, (READ_G, (TOPIC, T, LITERAL, "DESCRIBE"))),
    Row("ConsumerGroupHeartbeat-topic", 1, consumer_group_apis.ConsumerGroupHeartbeatResponse,
        lambda: _cg_heartbeat(), TOPIC_ERR, (READ_G, (TOPIC, T, LITERAL, "DESCRIBE")),
        partial=(READ_G,)),
    Row("ConsumerGroupDescribe", 0, consumer_group_apis.ConsumerGroupDescribeResponse,
        lambda: consumer_group_apis.ConsumerGroupDescribeRequest[0](
            group_ids=[G], include_authorized_operations=True), GROUP_ERR,
        ((GROUP, G, LITERAL, "DESCRIBE"),)),
    Row("CreateTopics", 5, ka.CreateTopicsResponse, lambda: ka.CreateTopicsRequest[5](
        topics=[sub(ka.CreateTopicsRequest[5], "topics")(
            name="acl-new-" + uuid.uuid4().hex[:6], num_partitions=1, replication_factor=1)],
        timeout_ms=10000, validate_only=True), TOPIC_ERR,
        ((CLUSTER, KC, LITERAL, "CREATE"), (TOPIC, "acl-new-", PREFIXED, "DESCRIBE_CONFIGS"))),
    Row("CreateTopics-configs", 5, ka.CreateTopicsResponse, lambda: ka.CreateTopicsRequest[5](
        topics=[sub(ka.CreateTopicsRequest[5], "topics")(
            name="acl-new-" + uuid.uuid4().hex[:6], num_partitions=1, replication_factor=1)],
        timeout_ms=10000, validate_only=True), TOPIC_ERR,
        ((CLUSTER, KC, LITERAL, "CREATE"), (TOPIC, "acl-new-", PREFIXED, "DESCRIBE_CONFIGS")),
        ((TOPIC, "acl-new-", PREFIXED, "CREATE"),)),
    Row("DeleteTopics", 4, ka.DeleteTopicsResponse, lambda: ka.DeleteTopicsRequest[4](
        topic_names=["acl-victim"], timeout_ms=10000), TOPIC_ERR,
        ((TOPIC, "acl-victim", LITERAL, "DELETE"),)),
    Row("DeleteRecords", 1, ka.DeleteRecordsResponse, lambda: ka.DeleteRecordsRequest[1](
        topics=_topic_parts(ka.DeleteRecordsRequest[1], "topics", partition_index=0,
                            offset=0), timeout_ms=10000), TOPIC_ERR,
        ((TOPIC, T, LITERAL, "DELETE"),)),
    Row("InitProducerId-txn", 3, kp.InitProducerIdResponse,
        lambda: kp.InitProducerIdRequest[3](transactional_id=X, transaction_timeout_ms=60000,
                                            producer_id=-1, producer_epoch=-1),
        TXN_ERR, (WRITE_X,)),
    Row("InitProducerId-idempotent", 3, kp.InitProducerIdResponse,
        lambda: kp.InitProducerIdRequest[3](transactional_id=None, transaction_timeout_ms=60000,
                                            producer_id=-1, producer_epoch=-1),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "IDEMPOTENT_WRITE"),), (READ_T,)),
    Row("InitProducerId-idempotent-by-write", 3, kp.InitProducerIdResponse,
        lambda: kp.InitProducerIdRequest[3](transactional_id=None, transaction_timeout_ms=60000,
                                            producer_id=-1, producer_epoch=-1),
        CLUSTER_ERR, (WRITE_T,)),
    Row("OffsetForLeaderEpoch", 3, kc.OffsetForLeaderEpochResponse,
        lambda: kc.OffsetForLeaderEpochRequest[3](replica_id=-1, topics=_topic_parts(
            kc.OffsetForLeaderEpochRequest[3], "topics", "topic", partition=0,
            current_leader_epoch=-1, leader_epoch=0)), TOPIC_ERR,
        ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("AddPartitionsToTxn", 3, kp.AddPartitionsToTxnResponse,
        lambda: kp.AddPartitionsToTxnRequest[3](
            v3_and_below_transactional_id=X, v3_and_below_producer_id=0,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[sub(
                kp.AddPartitionsToTxnRequest[3], "v3_and_below_topics")(name=T, partitions=[0])]),
        TOPIC_ERR, (WRITE_X, WRITE_T), (WRITE_X,)),
    Row("AddOffsetsToTxn", 3, kp.AddOffsetsToTxnResponse, lambda: kp.AddOffsetsToTxnRequest[3](
        transactional_id=X, producer_id=0, producer_epoch=0, group_id=G), GROUP_ERR,
        (WRITE_X, READ_G), (WRITE_X,)),
    Row("EndTxn", 3, kp.EndTxnResponse, lambda: kp.EndTxnRequest[3](
        transactional_id=X, producer_id=0, producer_epoch=0, committed=True), TXN_ERR,
        (WRITE_X,)),
    Row("TxnOffsetCommit", 3, kp.TxnOffsetCommitResponse, _txn_offset_commit, TXN_ERR,
        (WRITE_X, READ_G, READ_T), (READ_G, READ_T)),
    Row("WriteTxnMarkers", 1, kp.WriteTxnMarkersResponse, _markers, CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "CLUSTER_ACTION"),)),
    Row("WriteTxnMarkers-alter", 1, kp.WriteTxnMarkersResponse, _markers, CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("DescribeProducers", 0, ka.DescribeProducersResponse,
        lambda: ka.DescribeProducersRequest[0](topics=[sub(
            ka.DescribeProducersRequest[0], "topics")(name=T, partition_indexes=[0])]),
        TOPIC_ERR, (READ_T,), ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("DescribeTransactions", 0, ka.DescribeTransactionsResponse,
        lambda: ka.DescribeTransactionsRequest[0](transactional_ids=[X]), TXN_ERR,
        ((TXN, X, LITERAL, "DESCRIBE"),)),
    Row("DescribeTopicPartitions", 0, ka.DescribeTopicPartitionsResponse,
        lambda: ka.DescribeTopicPartitionsRequest[0](
            topics=[sub(ka.DescribeTopicPartitionsRequest[0], "topics")(name=T)],
            response_partition_limit=100, cursor=None),
        TOPIC_ERR, ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    Row("ElectLeaders", 2, ka.ElectLeadersResponse, lambda: ka.ElectLeadersRequest[2](
        election_type=0, timeout_ms=5000, topic_partitions=[sub(
            ka.ElectLeadersRequest[2], "topic_partitions")(topic=T, partitions=[0])]),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER"),)),
    # Validate-only: allowed, it checks the level and changes nothing.
    Row("UpdateFeatures", 1, ka.UpdateFeaturesResponse, lambda: ka.UpdateFeaturesRequest[1](
        timeout_ms=5000, validate_only=True, feature_updates=[sub(
            ka.UpdateFeaturesRequest[1], "feature_updates")(
                feature="transaction.version", max_version_level=1, upgrade_type=2)]),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("DescribeAcls", 2, ka.DescribeAclsResponse,
        lambda: ka.DescribeAclsRequest[2](**ACL_FILTER),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "DESCRIBE"),)),
    Row("CreateAcls", 2, ka.CreateAclsResponse, _create_acls, CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("DeleteAcls", 2, ka.DeleteAclsResponse, lambda: ka.DeleteAclsRequest[2](filters=[sub(
        ka.DeleteAclsRequest[2], "filters")(**ACL_FILTER)]),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("DescribeConfigs-topic", 4, ka.DescribeConfigsResponse,
        lambda: _configs(ka.DescribeConfigsRequest, 4, 2, T), TOPIC_ERR,
        ((TOPIC, T, LITERAL, "DESCRIBE_CONFIGS"),)),
    Row("DescribeConfigs-broker", 4, ka.DescribeConfigsResponse,
        lambda: _configs(ka.DescribeConfigsRequest, 4, 4, "1"), CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "DESCRIBE_CONFIGS"),)),
    Row("AlterConfigs", 1, ka.AlterConfigsResponse, lambda: _alter_config(1), TOPIC_ERR,
        ((TOPIC, T, LITERAL, "ALTER_CONFIGS"),)),
    Row("IncrementalAlterConfigs", 1, ka.IncrementalAlterConfigsResponse,
        _incremental_config, TOPIC_ERR, ((TOPIC, T, LITERAL, "ALTER_CONFIGS"),)),
    Row("IncrementalAlterConfigs-broker", 1, ka.IncrementalAlterConfigsResponse,
        lambda: _configs(ka.IncrementalAlterConfigsRequest, 1, 4, "", configs=[sub(
            ka.IncrementalAlterConfigsRequest[1], "resources", "configs")(
                name="log.retention.bytes", config_operation=0, value="1000000")]),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER_CONFIGS"),)),
    Row("DescribeLogDirs", 4, ka.DescribeLogDirsResponse,
        lambda: ka.DescribeLogDirsRequest[4](topics=None), CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "DESCRIBE"),)),
    Row("CreatePartitions", 2, ka.CreatePartitionsResponse,
        lambda: ka.CreatePartitionsRequest[2](topics=[sub(ka.CreatePartitionsRequest[2],
                                                          "topics")(name="acl-grow", count=2)],
                                              timeout_ms=10000, validate_only=True),
        TOPIC_ERR, ((TOPIC, "acl-grow", LITERAL, "ALTER"),)),
    Row("DeleteGroups", 2, ka.DeleteGroupsResponse,
        lambda: ka.DeleteGroupsRequest[2](groups_names=["acl-no-such-group"]), GROUP_ERR,
        ((GROUP, "acl-no-such-group", LITERAL, "DELETE"),)),
    Row("AlterPartitionReassignments", 0, ka.AlterPartitionReassignmentsResponse,
        lambda: ka.AlterPartitionReassignmentsRequest[0](timeout_ms=10000, topics=[]),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("ListPartitionReassignments", 0, ka.ListPartitionReassignmentsResponse,
        lambda: ka.ListPartitionReassignmentsRequest[0](timeout_ms=10000, topics=None),
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "DESCRIBE"),)),
    Row("OffsetDelete", 0, kc.OffsetDeleteResponse, lambda: kc.OffsetDeleteRequest[0](
        group_id="acl-no-such-group", topics=_topic_parts(kc.OffsetDeleteRequest[0], "topics",
                                                          partition_index=0)),
        GROUP_ERR, ((GROUP, "acl-no-such-group", LITERAL, "DELETE"), READ_T), (READ_T,)),
    Row("DescribeClientQuotas", 1, ka.DescribeClientQuotasResponse,
        lambda: ka.DescribeClientQuotasRequest[1](components=[], strict=False), CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "DESCRIBE_CONFIGS"),)),
    Row("AlterClientQuotas", 1, ka.AlterClientQuotasResponse, _client_quotas, CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "ALTER_CONFIGS"),)),
    Row("DescribeUserScramCredentials", 0, ka.DescribeUserScramCredentialsResponse,
        lambda: ka.DescribeUserScramCredentialsRequest[0](users=None), CLUSTER_ERR,
        ((CLUSTER, KC, LITERAL, "DESCRIBE"),)),
    Row("AlterUserScramCredentials", 0, ka.AlterUserScramCredentialsResponse, _scram,
        CLUSTER_ERR, ((CLUSTER, KC, LITERAL, "ALTER"),)),
    Row("DescribeTiering", 1, tierd_apis.DescribeTieringResponse,
        lambda: tierd_apis.DescribeTieringRequest[1](topics=[sub(
            tierd_apis.DescribeTieringRequest[1], "topics")(name=T, partition_indexes=[0])]),
        TOPIC_ERR, ((TOPIC, T, LITERAL, "DESCRIBE"),)),
    *(Row(req.__name__.removesuffix("Request"), lo, resp, req[lo], CLUSTER_ERR,
          ((CLUSTER, KC, LITERAL, "CLUSTER_ACTION"),))
      for req, resp, lo, _ in broker_apis.INTER_BROKER.values()),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_api_needs_its_acl(acl_broker: AclBroker, row: Row) -> None:
    acl_broker.revoke_all()
    if row.partial:
        acl_broker.grant(list(row.partial))
    conn = acl_broker.alice()
    try:
        refused = codes(conn.call(row.build(), row.version, row.response))
        assert row.code in refused, f"{row.id} without its ACL answered {refused}"
        acl_broker.grant(list(row.needs))
        allowed = codes(conn.call(row.build(), row.version, row.response))
        assert not allowed & AUTH_CODES, f"{row.id} with its ACL answered {allowed}"
    finally:
        conn.close()
        acl_broker.revoke_all()


def test_unauthorized_topics_are_hidden_and_groups_filtered(acl_broker: AclBroker) -> None:
    acl_broker.revoke_all()
    acl_broker.grant([(TOPIC, T, LITERAL, "READ")])
    denied_before = scrape(acl_broker.broker.metrics_url).total(
        "tierd_authorization_denied_total")
    conn = acl_broker.alice()
    try:
        listing = conn.call(metadata_request(None), 9, km.MetadataResponse)
        assert [t.name for t in listing.topics] == [T]
        named = conn.call(metadata_request(["acl-victim"]), 9, km.MetadataResponse)
        assert [(t.name, t.error_code, t.partitions) for t in named.topics] == [
            ("acl-victim", ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])]
        # DescribeCluster is open; ListGroups shows only describable groups.
        groups = conn.call(ka.ListGroupsRequest[4](states_filter=[]), 4, ka.ListGroupsResponse)
        assert G not in [g.group_id for g in groups.groups]
        acl_broker.grant([(GROUP, G, LITERAL, "DESCRIBE")])
        groups = conn.call(ka.ListGroupsRequest[4](states_filter=[]), 4, ka.ListGroupsResponse)
        assert G in [g.group_id for g in groups.groups]
        cluster = conn.call(ka.DescribeClusterRequest[0](include_cluster_authorized_operations=True),
                            0, ka.DescribeClusterResponse)
        assert cluster.error_code == 0 and cluster.authorized_operations == set()
    finally:
        conn.close()
        acl_broker.revoke_all()
    denied = scrape(acl_broker.broker.metrics_url).total("tierd_authorization_denied_total")
    assert denied >= denied_before + 2  # the hidden topics and the hidden group
    log = acl_broker.broker.log_text()
    assert "request not authorized" in log and "resource=acl-victim" in log


def test_list_transactions_shows_only_describable_ids(acl_broker: AclBroker) -> None:
    acl_broker.revoke_all()
    admin = acl_broker.admin_conn()
    try:
        made = admin.call(kp.InitProducerIdRequest[3](
            transactional_id=X, transaction_timeout_ms=60000, producer_id=-1,
            producer_epoch=-1), 3, kp.InitProducerIdResponse)
        assert made.error_code == 0
    finally:
        admin.close()
    conn = acl_broker.alice()

    def listed() -> list[str]:
        resp = conn.call(ka.ListTransactionsRequest[1](state_filters=[], producer_id_filters=[],
                                                       duration_filter=-1),
                         1, ka.ListTransactionsResponse)
        assert resp.error_code == 0
        return [t.transactional_id for t in resp.transaction_states]

    try:
        assert X not in listed()
        acl_broker.grant([(TXN, X, LITERAL, "DESCRIBE")])
        assert X in listed()
    finally:
        conn.close()
        acl_broker.revoke_all()


def test_describe_topic_partitions_shows_what_alice_may_describe(acl_broker: AclBroker) -> None:
    acl_broker.revoke_all()
    acl_broker.grant([(TOPIC, T, LITERAL, "READ")])  # READ implies DESCRIBE
    req_cls = ka.DescribeTopicPartitionsRequest[0]

    def describe(names: list[str]) -> Any:
        return conn.call(req_cls(topics=[sub(req_cls, "topics")(name=n) for n in names],
                                 response_partition_limit=100, cursor=None),
                         0, ka.DescribeTopicPartitionsResponse)

    conn = acl_broker.alice()
    try:
        listing = describe([])
        assert [t.name for t in listing.topics] == [T]
        # READ and DESCRIBE (bits 3 and 8) are what alice may do on it.
        assert listing.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8)
        named = describe(["acl-victim", T])
        assert [(t.name, t.error_code, t.topic_id, t.partitions) for t in named.topics][1:] == [
            ("acl-victim", ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, [])]
        assert (named.topics[0].name, named.topics[0].error_code) == (T, 0)
    finally:
        conn.close()
        acl_broker.revoke_all()


# -- real clients -------------------------------------------------------------------------


def _admin(acl_broker: AclBroker) -> AdminClient:
    security = ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN", username="admin",
                              password=ADMIN_PASSWORD)
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{acl_broker.ports['SASL_PLAINTEXT']}",
                        **librdkafka_options(security)})


def _produce_errors(bootstrap: str, options: dict[str, str], topic: str) -> list[str]:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, **options, "message.timeout.ms": 8000,
                         "log_level": "0"})
    producer.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(
        err.name() if err else ""))
    producer.flush(15)
    return errors


def test_clients_with_acls_managed_through_the_admin_api(acl_broker: AclBroker) -> None:
    acl_broker.revoke_all()
    topic = "acl-app-" + uuid.uuid4().hex[:6]
    create_topic(acl_broker.broker.bootstrap, topic, 2)
    sasl = f"127.0.0.1:{acl_broker.ports['SASL_PLAINTEXT']}"
    as_alice = librdkafka_options(_plain("SASL_PLAINTEXT"))
    assert _produce_errors(sasl, as_alice, topic) == ["TOPIC_AUTHORIZATION_FAILED"]

    admin = _admin(acl_broker)
    bindings = [AclBinding(ResourceType.TOPIC, "acl-app-", ResourcePatternType.PREFIXED,
                           "User:alice", "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ)]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    described = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=30)
    assert sorted(str(b) for b in described) == sorted(str(b) for b in bindings)

    messages = [OutMessage(n % 2, f"k{n}".encode(), f"v{n}".encode(), ()) for n in range(20)]
    assert len(DRIVERS["java"].produce(sasl, topic, messages,
                                       security=_plain("SASL_PLAINTEXT"))) == 20
    assert len(DRIVERS["confluent"].produce(sasl, topic, messages,
                                            security=_plain("SASL_PLAINTEXT"))) == 20
    got = DRIVERS["kafka-python"].consume(sasl, topic, {0: 0, 1: 0},
                                          security=_plain("SASL_PLAINTEXT"))
    assert len(got) == 40

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "acl-app-", ResourcePatternType.PREFIXED, None, None,
        AclOperation.WRITE, AclPermissionType.ANY)])
    (gone,) = [f.result(timeout=30) for f in deleted.values()]
    assert [str(b) for b in gone] == [str(bindings[0])]
    assert _produce_errors(sasl, as_alice, topic) == ["TOPIC_AUTHORIZATION_FAILED"]
    acl_broker.revoke_all()


def test_mutual_tls_principal_in_acls(acl_broker: AclBroker) -> None:
    assert ALICE_SUBJECT == "CN=alice,OU=eng,O=tierd-tests"  # what MTLS_PRINCIPAL is made of
    acl_broker.revoke_all()
    topic = "acl-mtls-" + uuid.uuid4().hex[:6]
    create_topic(acl_broker.broker.bootstrap, topic, 1)
    tls = f"127.0.0.1:{acl_broker.ports['SSL']}"
    pki = acl_broker.pki
    security = ClientSecurity("SSL", ca_file=pki.ca_pem, cert_file=pki.alice_cert_pem,
                              key_file=pki.alice_key_pem, keystore_pem=pki.alice_pem)
    options = librdkafka_options(security)
    assert _produce_errors(tls, options, topic) == ["TOPIC_AUTHORIZATION_FAILED"]
    # librdkafka's consumer looks its (unused) group's coordinator up: any group.
    acl_broker.grant([(TOPIC, topic, LITERAL, "WRITE"), (TOPIC, topic, LITERAL, "READ"),
                      (GROUP, "*", LITERAL, "DESCRIBE")], principal=MTLS_PRINCIPAL)
    messages = [OutMessage(0, b"k", f"v{n}".encode(), ()) for n in range(10)]
    assert len(DRIVERS["kafka-python"].produce(tls, topic, messages, security=security)) == 10
    assert len(DRIVERS["confluent"].consume(tls, topic, {0: 0}, security=security)) == 10
    # SASL alice is another principal: still refused.
    assert _produce_errors(f"127.0.0.1:{acl_broker.ports['SASL_PLAINTEXT']}",
                           librdkafka_options(_plain("SASL_PLAINTEXT")), topic) == [
        "TOPIC_AUTHORIZATION_FAILED"]
    acl_broker.revoke_all()


def test_acls_survive_a_restart(acl_broker: AclBroker) -> None:
    acl_broker.revoke_all()
    acl_broker.grant([(TOPIC, T, LITERAL, "DESCRIBE")])
    acl_broker.broker.restart()
    conn = acl_broker.alice()
    try:
        listing = conn.call(metadata_request(None), 9, km.MetadataResponse)
        assert [t.name for t in listing.topics] == [T]
    finally:
        conn.close()
    acl_broker.revoke_all()


def test_java_admin_client_manages_acls(acl_broker: AclBroker) -> None:
    """What ``kafka-acls --bootstrap-server`` does, through the Java admin client."""
    acl_broker.revoke_all()
    topic = "acl-java-" + uuid.uuid4().hex[:6]
    create_topic(acl_broker.broker.bootstrap, topic, 1)
    sasl = f"127.0.0.1:{acl_broker.ports['SASL_PLAINTEXT']}"
    admin = ["admin", "--bootstrap", sasl, *prop_args(ClientSecurity(
        "SASL_PLAINTEXT", mechanism="PLAIN", username="admin", password=ADMIN_PASSWORD))]
    acls = ["TOPIC|PREFIXED|acl-java-|User:alice|*|WRITE|ALLOW",
            "TRANSACTIONAL_ID|LITERAL|java-txn|User:alice|*|ALL|DENY"]
    assert javatool.run([*admin, "create-acls", *(a for acl in acls for a in ("--acl", acl))])[
        "created"] == 2
    assert javatool.run([*admin, "describe-acls"])["acls"] == sorted(acls)
    messages = [OutMessage(0, b"k", f"v{n}".encode(), ()) for n in range(5)]
    assert len(DRIVERS["java"].produce(sasl, topic, messages,
                                       security=_plain("SASL_PLAINTEXT"))) == 5
    assert javatool.run([*admin, "delete-acls", "--acl", acls[0]])["deleted"] == [acls[0]]
    assert javatool.run([*admin, "describe-acls"])["acls"] == [acls[1]]
    # alice may not manage ACLs: the Java client reports Kafka's error.
    as_alice = ["admin", "--bootstrap", sasl, *prop_args(_plain("SASL_PLAINTEXT"))]
    refused = javatool.run([*as_alice, "describe-acls"], check=False)
    assert refused["_exit"] != 0 and "ClusterAuthorization" in str(refused)
    acl_broker.revoke_all()
