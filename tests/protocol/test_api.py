"""Request headers and bodies, response encoding, the ApiVersions table; a decoding fuzz."""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol import consumer, metadata, producer

from protocol import api, records
from protocol.errors import ErrorCode

# -- golden request frames -------------------------------------------------------

API_VERSIONS_V3_REQUEST = bytes.fromhex(
    "0012"      # api_key 18 (ApiVersions)
    "0003"      # api_version 3 -> request header v2 (flexible)
    "00000007"  # correlation_id 7
    "0003" "636c69"  # client_id: int16 length 3 (not compact, even in v2), "cli"
    "00"        # header tagged fields: none
    "0d" "6b61666b612d707974686f6e"  # client_software_name: compact string (12+1), "kafka-python"
    "04" "332e30"  # client_software_version: compact string (3+1), "3.0"
    "00"        # body tagged fields: none
)


def test_golden_api_versions_v3_request():
    header = api.parse_header(API_VERSIONS_V3_REQUEST)
    assert header == api.RequestHeader(api_key=18, api_version=3, correlation_id=7,
                                       client_id="cli", size=14)
    body = api.decode_body(header, API_VERSIONS_V3_REQUEST)
    assert body.client_software_name == "kafka-python"
    assert body.client_software_version == "3.0"
    expected = metadata.ApiVersionsRequest[3](client_software_name="kafka-python",
                                              client_software_version="3.0")
    expected.with_header(correlation_id=7, client_id="cli")
    assert bytes(expected.encode(version=3, header=True)) == API_VERSIONS_V3_REQUEST


def test_golden_request_header_v1_with_null_client_id():
    frame = bytes.fromhex(
        "0012"      # api_key 18
        "0000"      # api_version 0 -> request header v1
        "00000009"  # correlation_id 9
        "ffff"      # client_id: null
    )                # ApiVersions v0 has an empty body
    header = api.parse_header(frame)
    assert header == api.RequestHeader(18, 0, 9, None, 10)
    assert api.decode_body(header, frame) == metadata.ApiVersionsRequest[0]()


def test_header_tagged_fields_are_skipped():
    frame = bytes.fromhex(
        "0012" "0003" "00000001" "0000"  # ApiVersions v3, correlation 1, client id ""
        "02"            # two header tagged fields
        "00" "03" "aabbcc"  # tag 0, size 3, data
        "05" "00"       # tag 5, size 0
        "01" "01" "00"  # body: empty software name and version, no tags
    )
    header = api.parse_header(frame)
    assert header.client_id == "" and header.size == 18
    body = api.decode_body(header, frame)
    assert (body.client_software_name, body.client_software_version) == ("", "")


@pytest.mark.parametrize("key, version", [(18, 5), (0, 2), (1, 3), (9999, 0), (-1, 0), (18, -1)])
def test_unsupported_key_or_version_keeps_the_header(key, version):
    frame = struct.pack(">hhih", key, version, 1234, 1) + b"x"
    with pytest.raises(api.UnsupportedVersion) as info:
        api.parse_header(frame)
    h = info.value.header
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (key, version, 1234, "x")


@pytest.mark.parametrize("frame", [
    b"",
    bytes.fromhex("00120003000000"),           # shorter than the fixed header
    bytes.fromhex("001200030000000100056162"),  # client id announces 5 bytes, has 2
    bytes.fromhex("0012000300000001ffff"),      # flexible header without its tagged fields
    bytes.fromhex("0012000300000001ffff01"),    # one tagged field, nothing of it
    bytes.fromhex("0012000300000001ffff010005aa"),  # tagged field announces 5 bytes, has 1
    bytes.fromhex("0012000300000001ffff" + "ff" * 6),  # tag count varint never ends
])
def test_malformed_headers_are_invalid_requests(frame):
    with pytest.raises(api.InvalidRequest):
        api.parse_header(frame)


def test_undecodable_body_is_invalid_request():
    # Metadata v1 announcing 5 topics and carrying none.
    frame = bytes.fromhex("0003" "0001" "00000001" "ffff" "00000005")
    header = api.parse_header(frame)
    with pytest.raises(api.InvalidRequest):
        api.decode_body(header, frame)


# -- responses ------------------------------------------------------------------------


def _resp_header(body_len: int, correlation_id: int) -> bytes:
    return struct.pack(">ii", body_len + 4, correlation_id)


def test_api_versions_v3_response_uses_header_v0_and_omits_default_tags():
    header = api.RequestHeader(18, 3, 0x01020304, "c", 10)
    resp = metadata.ApiVersionsResponse[3](
        error_code=0,
        api_keys=[metadata.ApiVersionsResponse[3].ApiVersion(api_key=0, min_version=3,
                                                             max_version=11)],
        throttle_time_ms=0,
    )
    body = bytes.fromhex(
        "0000"          # error_code
        "02"            # api_keys: compact array of 1
        "0000" "0003" "000b" "00"  # Produce 3..11, entry tagged fields: none
        "00000000"      # throttle_time_ms
        "00"            # tagged fields: none (SupportedFeatures, FinalizedFeaturesEpoch=-1,
                        # FinalizedFeatures, ZkMigrationReady=false are all defaults)
    )
    assert api.encode_response(header, resp) == bytes.fromhex(
        "00000013"  # size: 4 (correlation id) + 15 (body); no header tagged fields
        "01020304"  # correlation_id
    ) + body


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_full_table(version):
    header = api.RequestHeader(18, version, 77, None, 10)
    entries = api.api_version_entries(version)
    resp = metadata.ApiVersionsResponse[version](error_code=0, api_keys=entries,
                                                 throttle_time_ms=0)
    table = sorted(api.SUPPORTED.values(), key=lambda s: s.key)
    flexible = version >= 3
    body = b"\x00\x00"  # error_code
    if flexible:
        assert len(table) < 127
        body += bytes([len(table) + 1])  # compact array length
    else:
        body += struct.pack(">i", len(table))
    for s in table:
        body += struct.pack(">hhh", s.key, s.min_version, s.max_version)
        if flexible:
            body += b"\x00"
    if version >= 1:
        body += b"\x00\x00\x00\x00"  # throttle_time_ms
    if flexible:
        body += b"\x00"
    assert api.encode_response(header, resp) == _resp_header(len(body), 77) + body


def test_flexible_response_gets_header_v1():
    header = api.RequestHeader(3, 9, 5, "c", 11)  # Metadata v9 is flexible
    resp = metadata.MetadataResponse[9](throttle_time_ms=0, brokers=[], cluster_id=None,
                                        controller_id=-1, topics=[])
    body = bytes(resp.encode(version=9))
    out = api.encode_response(header, resp)
    assert out == struct.pack(">ii", len(body) + 5, 5) + b"\x00" + body
    assert metadata.MetadataResponse.decode(out[9:], version=9) == resp


def test_non_flexible_response_gets_header_v0():
    header = api.RequestHeader(3, 1, 6, "c", 10)
    resp = metadata.MetadataResponse[1](brokers=[], controller_id=1, topics=[])
    body = bytes(resp.encode(version=1))
    assert api.encode_response(header, resp) == _resp_header(len(body), 6) + body


def test_api_versions_fallback_is_v0_with_error_and_table():
    out = api.encode_api_versions_fallback(42, ErrorCode.UNSUPPORTED_VERSION)
    table = sorted(api.SUPPORTED.values(), key=lambda s: s.key)
    body = (b"\x00\x23"                         # error_code 35 UNSUPPORTED_VERSION
            + struct.pack(">i", len(table))    # api_keys: int32 array length (v0)
            + b"".join(struct.pack(">hhh", s.key, s.min_version, s.max_version) for s in table))
    assert out == _resp_header(len(body), 42) + body   # no throttle time, no tags in v0


def test_supported_table_is_consistent_with_the_schemas():
    for key, spec in api.SUPPORTED.items():
        assert key == spec.key == spec.request.API_KEY == spec.response.API_KEY
        assert 0 <= spec.min_version <= spec.max_version <= spec.request.max_version
        assert spec.max_version <= spec.response.max_version
    assert [e.api_key for e in api.api_version_entries(3)] == sorted(api.SUPPORTED)
    assert api.SUPPORTED[api.API_VERSIONS_KEY].is_flexible(3)
    assert not api.SUPPORTED[api.API_VERSIONS_KEY].is_flexible(2)


# -- request round trips (kafka-python encodes, we decode) -----------------------------


def _make(cls, version, **values):
    """Construct ``cls`` with only the fields that exist at ``version``."""
    fields = cls._struct.fields
    return cls(**{k: v for k, v in values.items() if fields[k].for_version_q(version)})


def _round_trip(request, version, correlation_id, client_id):
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    frame = bytes(request.encode(version=version, header=True))
    header = api.parse_header(frame)
    assert (header.api_key, header.api_version) == (request.API_KEY, version)
    assert (header.correlation_id, header.client_id) == (correlation_id, client_id)
    decoded = api.decode_body(header, frame)
    assert decoded == request
    assert bytes(request.encode(version=version)) == frame[header.size:]  # header.size exact
    return decoded


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-0123456789", min_size=1, max_size=20)
_client_ids = st.one_of(st.none(), st.text(max_size=20))
_corr = st.integers(-(2**31), 2**31 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_rt_settings = settings(max_examples=25, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])


@_rt_settings
@given(st.sampled_from([3, 5, 7, 8, 9, 10, 11]), _corr, _client_ids, st.data())
def test_produce_request_round_trip(version, corr, client_id, data):
    P = producer.ProduceRequest
    topics = []
    for name in data.draw(st.lists(_names, min_size=1, max_size=3, unique=True)):
        parts = []
        for index in data.draw(st.lists(st.integers(0, 1000), max_size=3, unique=True)):
            values = data.draw(st.lists(st.binary(max_size=20), min_size=1, max_size=3))
            recs = data.draw(st.one_of(st.none(), st.just(
                records.build_batch([(None, v) for v in values]))))
            parts.append(_make(P.TopicProduceData.PartitionProduceData, version, index=index,
                               records=recs))
        topics.append(_make(P.TopicProduceData, version, name=name, partition_data=parts))
    req = _make(P[version], version, transactional_id=data.draw(st.one_of(st.none(), _names)),
                acks=data.draw(st.sampled_from([-1, 0, 1])), timeout_ms=data.draw(_int32),
                topic_data=topics)
    _round_trip(req, version, corr, client_id)


@_rt_settings
@given(st.sampled_from([4, 5, 7, 9, 11, 12, 13, 15, 17]), _corr, _client_ids, st.data())
def test_fetch_request_round_trip(version, corr, client_id, data):
    F = consumer.FetchRequest
    topics = []
    for name in data.draw(st.lists(_names, max_size=3, unique=True)):
        parts = [
            _make(F.FetchTopic.FetchPartition, version, partition=p,
                  current_leader_epoch=data.draw(_int32), fetch_offset=data.draw(_int64),
                  last_fetched_epoch=data.draw(_int32), log_start_offset=data.draw(_int64),
                  partition_max_bytes=data.draw(_int32))
            for p in data.draw(st.lists(st.integers(0, 2**31 - 1), max_size=3, unique=True))
        ]
        topics.append(_make(F.FetchTopic, version, topic=name,
                            topic_id=uuid.UUID(int=data.draw(st.integers(1, 2**128 - 1))),
                            partitions=parts))
    forgotten = [_make(F.ForgottenTopic, version, topic=name, topic_id=uuid.uuid4(),
                       partitions=data.draw(st.lists(_int32, max_size=3)))
                 for name in data.draw(st.lists(_names, max_size=2))]
    req = _make(F[version], version, replica_id=-1, max_wait_ms=data.draw(_int32),
                min_bytes=data.draw(_int32), max_bytes=data.draw(_int32),
                isolation_level=data.draw(st.sampled_from([0, 1])),
                session_id=data.draw(_int32), session_epoch=data.draw(_int32), topics=topics,
                forgotten_topics_data=forgotten, rack_id=data.draw(st.text(max_size=10)))
    _round_trip(req, version, corr, client_id)


@_rt_settings
@given(st.sampled_from([1, 4, 8, 9, 10, 11, 12]), _corr, _client_ids, st.data())
def test_metadata_request_round_trip(version, corr, client_id, data):
    M = metadata.MetadataRequest
    topics = data.draw(st.one_of(st.none(), st.lists(_names, max_size=4)))
    topic_objs = None if topics is None else [
        _make(M.MetadataRequestTopic, version, name=t, topic_id=None) for t in topics]
    req = _make(M[version], version, topics=topic_objs,
                allow_auto_topic_creation=data.draw(st.booleans()),
                include_cluster_authorized_operations=data.draw(st.booleans()),
                include_topic_authorized_operations=data.draw(st.booleans()))
    decoded = _round_trip(req, version, corr, client_id)
    assert (None if decoded.topics is None else [t.name for t in decoded.topics]) == topics


# -- fuzz -------------------------------------------------------------------------------


def _seed_frames() -> list[bytes]:
    """Valid request frames (without size) for every supported API and version."""
    seeds = []
    for spec in api.SUPPORTED.values():
        for version in range(spec.min_version, spec.max_version + 1):
            req = spec.request[version]()
            req.with_header(correlation_id=1, client_id="fuzz")
            seeds.append(bytes(req.encode(version=version, header=True)))
    P = producer.ProduceRequest
    batch = records.build_batch([(b"k", b"v" * 30)] * 3)
    for version in (3, 9, 11):
        req = P[version](acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name="topic", partition_data=[P.TopicProduceData.PartitionProduceData(
                index=0, records=batch)])])
        req.with_header(correlation_id=2, client_id="fuzz")
        seeds.append(bytes(req.encode(version=version, header=True)))
    return seeds


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    f = bytearray(frame)
    op = rng.randrange(6)
    if op == 0 and f:
        for _ in range(rng.randrange(1, 5)):
            f[rng.randrange(len(f))] = rng.randrange(256)
    elif op == 1:
        del f[rng.randrange(len(f) + 1):]
    elif op == 2:
        at = rng.randrange(len(f) + 1)
        f[at:at] = rng.randbytes(rng.randrange(1, 9))
    elif op == 3:
        f = f[: rng.randrange(8, 12)] + bytearray(rng.randbytes(rng.randrange(0, 64)))
    elif op == 4 and len(f) > 10:  # huge array/string lengths
        at = rng.randrange(8, len(f) - 1)
        f[at : at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff",
                                     b"\xff\xff\xff\x7f", b"\x80\x80\x80\x80"])
    else:
        f = bytearray(rng.randbytes(rng.randrange(0, 40)))
    return bytes(f)


def test_fuzzed_frames_only_raise_protocol_errors():
    rng = random.Random(0x7E7D)
    seeds = _seed_frames()
    decoded = 0
    for _ in range(20_000):
        frame = _mutate(rng, rng.choice(seeds))
        try:
            header = api.parse_header(frame)
            assert 0 <= header.size <= len(frame)
            api.decode_body(header, frame)
            decoded += 1
        except (api.InvalidRequest, api.UnsupportedVersion):
            pass
    assert decoded > 1000  # the mutations still reach the body decoders
