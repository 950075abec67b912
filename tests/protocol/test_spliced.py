"""Fetch responses encoded around holes equal the plain encoding once filled."""

from __future__ import annotations

import random
import uuid

import pytest
from kafka.protocol.consumer import FetchResponse

from protocol import api, spliced

FETCH_KEY = 1


def _response(version: int, records: list[bytes | None]) -> object:
    resp = FetchResponse[version]
    topic_cls = resp.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    parts = [part_cls(partition_index=i, error_code=0, high_watermark=100, last_stable_offset=100,
                      log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
                      records=r) for i, r in enumerate(records)]
    topics = [topic_cls(topic="t", topic_id=uuid.UUID(int=7), partitions=parts)]
    return resp(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def _fill(parts: list[bytes | int], values: list[bytes]) -> bytes:
    return b"".join(values[p] if isinstance(p, int) else p for p in parts)


@pytest.mark.parametrize("version", range(4, 18))
def test_filled_holes_give_the_plain_encoding(version: int) -> None:
    rng = random.Random(version)
    # Sizes around the varint length boundaries (127/128, 16383/16384) and empty.
    sizes = [0, 126, 127, 128, 16382, 16383, 16384, 300_000]
    values = [rng.randbytes(n) for n in sizes]
    header = api.RequestHeader(api_key=FETCH_KEY, api_version=version, correlation_id=42,
                               client_id="c", size=0)
    plain = api.encode_response(header, _response(version, [*values, b"tail"]))
    markers = [spliced.new_marker() for _ in values]
    holes = [(m, len(v)) for m, v in zip(markers, values, strict=True)]
    flexible = api.SUPPORTED[FETCH_KEY].is_flexible(version)
    parts = spliced.encode_spliced(header, _response(version, [*markers, b"tail"]), flexible,
                                   holes)
    assert [p for p in parts if isinstance(p, int)] == list(range(len(values)))
    assert _fill(parts, values) == plain


def test_a_marker_missing_from_the_response_is_an_error() -> None:
    header = api.RequestHeader(api_key=FETCH_KEY, api_version=12, correlation_id=1,
                               client_id="c", size=0)
    with pytest.raises(ValueError):
        spliced.encode_spliced(header, _response(12, [b"not a marker"]), True,
                               [(spliced.new_marker(), 5)])


def test_a_marker_not_after_its_length_prefix_is_an_error() -> None:
    header = api.RequestHeader(api_key=FETCH_KEY, api_version=11, correlation_id=1,
                               client_id="c", size=0)
    marker = spliced.new_marker()
    # The marker is inside a longer value: its prefix is not the marker's length.
    with pytest.raises(ValueError):
        spliced.encode_spliced(header, _response(11, [b"x" + marker]), False, [(marker, 5)])
