"""The API table tierd advertises, and request/response (de)serialisation.

``SUPPORTED`` lists exactly the API keys and version ranges the broker
implements; ApiVersions is answered from it. Request bodies are decoded and
responses encoded with kafka-python's schema-generated classes; headers are
parsed here because we need the api key and version before choosing a class.

Request header v1 (non-flexible) and v2 (flexible)::

    api_key int16, api_version int16, correlation_id int32,
    client_id nullable string (int16 length, even in v2),
    [v2] tagged fields
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol import admin, consumer, metadata, producer, sasl

from protocol import broker_apis, consumer_group_apis, telemetry_apis, tierd_apis

_HDR = struct.Struct(">hhih")
_RESP_HDR = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    request: Any
    response: Any

    def is_flexible(self, version: int) -> bool:
        return bool(self.request.flexible_version_q(version))


def _spec(request: Any, response: Any, lo: int, hi: int) -> ApiSpec:
    return ApiSpec(request.API_KEY, request.name.removesuffix("Request"), lo, hi, request, response)


# Version ranges: what the Java 4.x client, librdkafka 2.x, kafka-python and
# aiokafka negotiate, and no more than the handlers implement.
SUPPORTED: dict[int, ApiSpec] = {
    s.key: s
    for s in (
        # v12: a transactions-v2 client's batches add their partitions (KIP-890).
        _spec(producer.ProduceRequest, producer.ProduceResponse, 3, 12),
        _spec(consumer.FetchRequest, consumer.FetchResponse, 4, 17),
        _spec(consumer.ListOffsetsRequest, consumer.ListOffsetsResponse, 1, 11),
        _spec(metadata.MetadataRequest, metadata.MetadataResponse, 1, 12),
        _spec(consumer.OffsetForLeaderEpochRequest, consumer.OffsetForLeaderEpochResponse, 2, 4),
        _spec(metadata.ApiVersionsRequest, metadata.ApiVersionsResponse, 0, 4),
        _spec(admin.CreateTopicsRequest, admin.CreateTopicsResponse, 2, 7),
        _spec(admin.DeleteTopicsRequest, admin.DeleteTopicsResponse, 1, 6),
        _spec(admin.DeleteRecordsRequest, admin.DeleteRecordsResponse, 0, 2),
        _spec(admin.DescribeConfigsRequest, admin.DescribeConfigsResponse, 1, 4),
        _spec(admin.AlterConfigsRequest, admin.AlterConfigsResponse, 0, 2),
        _spec(admin.CreatePartitionsRequest, admin.CreatePartitionsResponse, 0, 3),
        _spec(admin.DescribeLogDirsRequest, admin.DescribeLogDirsResponse, 1, 4),
        _spec(admin.IncrementalAlterConfigsRequest, admin.IncrementalAlterConfigsResponse, 0, 1),
        _spec(admin.DescribeClusterRequest, admin.DescribeClusterResponse, 0, 1),
        # KIP-584 finalized features (broker/handlers/features.py).
        _spec(admin.UpdateFeaturesRequest, admin.UpdateFeaturesResponse, 0, 2),
        # KIP-966 paged topic descriptions (broker/topic_partitions_page.py).
        _spec(admin.DescribeTopicPartitionsRequest, admin.DescribeTopicPartitionsResponse, 0, 0),
        # Preferred and unclean elections on demand (cluster mode: the controller).
        _spec(admin.ElectLeadersRequest, admin.ElectLeadersResponse, 0, 2),
        # KIP-455 partition reassignment (cluster mode: the controller takes them).
        _spec(admin.AlterPartitionReassignmentsRequest,
              admin.AlterPartitionReassignmentsResponse, 0, 0),
        _spec(admin.ListPartitionReassignmentsRequest,
              admin.ListPartitionReassignmentsResponse, 0, 0),
        _spec(producer.InitProducerIdRequest, producer.InitProducerIdResponse, 0, 5),
        # Classic consumer groups (broker/handlers/groups.py, offsets.py).
        _spec(metadata.FindCoordinatorRequest, metadata.FindCoordinatorResponse, 1, 6),
        _spec(consumer.JoinGroupRequest, consumer.JoinGroupResponse, 2, 9),
        _spec(consumer.SyncGroupRequest, consumer.SyncGroupResponse, 1, 5),
        _spec(consumer.HeartbeatRequest, consumer.HeartbeatResponse, 1, 4),
        _spec(consumer.LeaveGroupRequest, consumer.LeaveGroupResponse, 1, 5),
        _spec(consumer.OffsetCommitRequest, consumer.OffsetCommitResponse, 2, 9),
        _spec(consumer.OffsetFetchRequest, consumer.OffsetFetchResponse, 1, 9),
        _spec(consumer.OffsetDeleteRequest, consumer.OffsetDeleteResponse, 0, 0),
        _spec(admin.ListGroupsRequest, admin.ListGroupsResponse, 1, 5),
        _spec(admin.DescribeGroupsRequest, admin.DescribeGroupsResponse, 1, 5),
        _spec(admin.DeleteGroupsRequest, admin.DeleteGroupsResponse, 0, 2),
        # KIP-848 consumer groups (broker/handlers/consumer_groups.py).
        _spec(consumer_group_apis.ConsumerGroupHeartbeatRequest,
              consumer_group_apis.ConsumerGroupHeartbeatResponse, 0, 1),
        _spec(consumer_group_apis.ConsumerGroupDescribeRequest,
              consumer_group_apis.ConsumerGroupDescribeResponse, 0, 1),
        # Transactions (broker/handlers/transactions.py); EndTxn v5 and
        # TxnOffsetCommit v5 are transactions v2 (KIP-890 part 2).
        _spec(producer.AddPartitionsToTxnRequest, producer.AddPartitionsToTxnResponse, 0, 5),
        _spec(producer.AddOffsetsToTxnRequest, producer.AddOffsetsToTxnResponse, 0, 4),
        _spec(producer.EndTxnRequest, producer.EndTxnResponse, 0, 5),
        _spec(producer.TxnOffsetCommitRequest, producer.TxnOffsetCommitResponse, 0, 5),
        # Markers from a transaction coordinator to partition leaders, or an
        # operator's abort of a hanging transaction (Admin.abortTransaction).
        _spec(producer.WriteTxnMarkersRequest, producer.WriteTxnMarkersResponse, 1, 1),
        # KIP-664 tooling (broker/handlers/txn_admin.py); ListTransactions v2's
        # regular-expression filter (Java syntax) is not offered.
        _spec(admin.DescribeProducersRequest, admin.DescribeProducersResponse, 0, 0),
        _spec(admin.DescribeTransactionsRequest, admin.DescribeTransactionsResponse, 0, 0),
        _spec(admin.ListTransactionsRequest, admin.ListTransactionsResponse, 0, 1),
        # Inter-broker (ZooKeeper-mode controller; broker/handlers/inter_broker.py).
        *(_spec(req, resp, lo, hi) for req, resp, lo, hi in broker_apis.INTER_BROKER.values()),
        # Security (broker/security, broker/handlers/security.py).
        _spec(sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse, 0, 1),
        _spec(sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse, 0, 2),
        _spec(admin.DescribeUserScramCredentialsRequest,
              admin.DescribeUserScramCredentialsResponse, 0, 0),
        _spec(admin.AlterUserScramCredentialsRequest,
              admin.AlterUserScramCredentialsResponse, 0, 0),
        _spec(admin.DescribeAclsRequest, admin.DescribeAclsResponse, 0, 3),
        _spec(admin.CreateAclsRequest, admin.CreateAclsResponse, 0, 3),
        _spec(admin.DeleteAclsRequest, admin.DeleteAclsResponse, 0, 3),
        _spec(admin.DescribeClientQuotasRequest, admin.DescribeClientQuotasResponse, 0, 1),
        _spec(admin.AlterClientQuotasRequest, admin.AlterClientQuotasResponse, 0, 1),
        # KIP-714 client metrics (broker/handlers/telemetry.py).
        _spec(telemetry_apis.GetTelemetrySubscriptionsRequest,
              telemetry_apis.GetTelemetrySubscriptionsResponse, 0, 0),
        _spec(telemetry_apis.PushTelemetryRequest, telemetry_apis.PushTelemetryResponse, 0, 0),
        # tierd's own: where each partition's data lives (broker/handlers/tiering.py).
        _spec(tierd_apis.DescribeTieringRequest, tierd_apis.DescribeTieringResponse, 0, 1),
    )
}

API_VERSIONS_KEY = metadata.ApiVersionsRequest.API_KEY
SASL_HANDSHAKE_KEY = sasl.SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE_KEY = sasl.SaslAuthenticateRequest.API_KEY


class InvalidRequest(Exception):
    """The frame cannot be understood; the connection is closed."""


class UnsupportedVersion(Exception):
    """The api key or version is not in ``SUPPORTED``."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"api {header.api_key} v{header.api_version} not supported")
        self.header = header


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise InvalidRequest("bad varint in header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def parse_header(frame: bytes) -> RequestHeader:
    """Parse the request header of ``frame``.

    Raises:
        InvalidRequest: truncated or malformed header.
        UnsupportedVersion: api key or version not supported (the header is
            attached so ApiVersions can still be answered).
    """
    if len(frame) < _HDR.size:
        raise InvalidRequest("truncated request header")
    api_key, api_version, correlation_id, client_len = _HDR.unpack_from(frame, 0)
    pos = _HDR.size
    client_id: str | None = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise InvalidRequest("truncated client id")
        client_id = frame[pos : pos + client_len].decode("utf-8", "replace")
        pos += client_len
    header = RequestHeader(api_key, api_version, correlation_id, client_id, pos)
    spec = SUPPORTED.get(api_key)
    if spec is None or not spec.min_version <= api_version <= spec.max_version:
        raise UnsupportedVersion(header)
    if spec.is_flexible(api_version):
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise InvalidRequest("truncated header tagged fields")
        header.size = pos
    return header


def decode_body(header: RequestHeader, frame: bytes) -> Any:
    """Decode the request body that follows the header.

    Raises:
        InvalidRequest: the body does not match the schema.
    """
    spec = SUPPORTED[header.api_key]
    try:
        request = spec.request.decode(memoryview(frame)[header.size :], version=header.api_version)
    except Exception as exc:  # the generated decoders raise assorted types
        raise InvalidRequest(f"undecodable {spec.name} v{header.api_version}: {exc}") from exc
    _check_nulls(spec.request._struct.fields, request, header.api_version, spec.name)
    return request


def _check_nulls(fields: Any, obj: Any, version: int, path: str) -> None:
    """Refuse nulls in fields the schema says may not be null (Kafka does too).

    The generated decoders turn a length of -1 into None whatever the schema
    says; without this check a handler would iterate None. What to check in
    a struct at a version is worked out once (``_null_plan``): this runs on
    every request.

    Raises:
        InvalidRequest: naming the first such field.
    """
    for name, nullable, kind, sub in _null_plan(fields, version):
        value = getattr(obj, name, None)
        if value is None:
            if nullable:
                continue
            raise InvalidRequest(f"non-nullable field {path}.{name} is null")
        if kind == _STRUCT_ARRAY:
            for item in value:
                _check_nulls(sub, item, version, f"{path}.{name}")
        elif kind == _STRUCT:
            _check_nulls(sub, value, version, f"{path}.{name}")
        elif kind == _ARRAY and any(item is None for item in value):
            raise InvalidRequest(f"null element in non-nullable array {path}.{name}")


_PLAIN, _STRUCT, _STRUCT_ARRAY, _ARRAY = range(4)
_NullPlan = tuple[tuple[str, bool, int, Any], ...]
_null_plans: dict[tuple[int, int], _NullPlan] = {}


def _null_plan(fields: Any, version: int) -> _NullPlan:
    """(name, may be None, kind, its fields) of each untagged field of
    ``fields`` present at ``version``. A uuid decodes to None when it is all
    zeros, its legal "unset", so it may be None too."""
    key = (id(fields), version)
    plan = _null_plans.get(key)
    if plan is None:
        entries = []
        for field in fields.values():
            if not field.for_version_q(version) or field.tagged_field_q(version):
                continue
            nullable = field.nullable_for_version_q(version) or field.type_str == "uuid"
            kind = (_STRUCT_ARRAY if field.is_struct_array() else _STRUCT if field.is_struct()
                    else _ARRAY if field.is_array() else _PLAIN)
            entries.append((field.name, nullable, kind,
                            field.fields if kind in (_STRUCT, _STRUCT_ARRAY) else None))
        plan = _null_plans[key] = tuple(entries)
    return plan


class WrappedResponse:
    """A response message with parts encoded beside it (a Fetch answer's record
    bytes sent from files, a Metadata answer's topics kept encoded).
    ``response`` is the message (throttle_time_ms and the like are set there);
    ``encode`` gives the frame, as bytes or as parts to send in order."""

    response: Any

    def encode(self, header: RequestHeader, flexible_body: bool) -> Any:
        raise NotImplementedError


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Encode ``response`` for ``header``'s version, framed, with the response header.

    ApiVersions responses always use header v0 (clients parse them before
    they know whether the broker speaks flexible headers).
    """
    spec = SUPPORTED[header.api_key]
    body = response.encode(version=header.api_version)
    flexible = spec.is_flexible(header.api_version) and header.api_key != API_VERSIONS_KEY
    head_len = 5 if flexible else 4
    out = _RESP_HDR.pack(len(body) + head_len, header.correlation_id)
    if flexible:
        out += b"\x00"
    return b"".join((out, body))  # one copy of the body, whatever its type


def encode_api_versions_fallback(correlation_id: int, error_code: int) -> bytes:
    """ApiVersions v0 response, for a client asking with a version we lack.

    Kafka answers an unsupported ApiVersions version with a v0 response that
    carries UNSUPPORTED_VERSION and the full table, so the client can retry
    with a version both sides know.
    """
    resp = metadata.ApiVersionsResponse[0](
        error_code=error_code,
        api_keys=api_version_entries(0),
    )
    body = resp.encode(version=0)
    return _RESP_HDR.pack(len(body) + 4, correlation_id) + bytes(body)


def api_version_entries(version: int) -> list[Any]:
    """The ApiKeys array of an ApiVersions response at ``version``."""
    entry = metadata.ApiVersionsResponse[version].ApiVersion
    return [
        entry(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(SUPPORTED.values(), key=lambda s: s.key)
    ]
