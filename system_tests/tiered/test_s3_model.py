"""The S3 model proxy (system_tests/s3_model.py) under real boto3, in front of moto.

* Bytes pass through exactly: whole-object and ranged GETs, HEAD, a
  multipart upload, and a chunked request body.
* The first byte of a response waits for the configured latency, and a body
  arrives no faster than the configured bandwidth (lower bounds only: the
  machine may be loaded, so nothing here bounds a time from above).
* ``slow_down(n)`` fails exactly the next n requests with 503 SlowDown, as
  boto3 reports it; ``slow_down_for(s)`` fails every request for s seconds.
* ``stats()`` counts requests, GETs, body bytes and connections (boto3 keeps
  one alive).
"""

from __future__ import annotations

import http.client
import io
import os
import time
import urllib.parse
from typing import Any

import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from system_tests.s3_fixtures import MotoServer, s3_client
from system_tests.s3_model import (
    SLOW_DOWN_STATUS,
    S3ModelProxy,
    s3_model_process,
    s3_model_proxy,
)

MIB = 1 << 20
# Crosses many of the proxy's 64 KiB body slices, at an odd length.
OBJECT_BYTES = 3 * MIB + 12_345
# Each attempt of a boto3 call is one request: what the proxy does is what
# the test sees. (botocore's ``max_attempts`` counts retries, not attempts.)
NO_RETRIES = {"total_max_attempts": 1, "mode": "standard"}
# For timing tests: far above loopback moto's own milliseconds.
LATENCY_MS = 150.0
BANDWIDTH = 20e6
PACED_BYTES = 4 * MIB
# PACED_BYTES at BANDWIDTH is 0.21 s; allow one 64 KiB slice and clock slack.
MIN_PACED_SECONDS = 0.19
SLOW_DOWN_WINDOW_S = 1.0

pytestmark = pytest.mark.usefixtures("aws_test_env")


def client(proxy: S3ModelProxy, **config: Any) -> Any:
    """A fresh boto3 client (its own connection pool) through ``proxy``."""
    return s3_client(proxy.endpoint_url, **config)


def slow_down_error(call: Any) -> dict[str, Any]:
    """Run ``call``, which must fail with a ClientError; the error's response."""
    with pytest.raises(botocore.exceptions.ClientError) as info:
        call()
    return dict(info.value.response)


def test_put_then_whole_and_ranged_gets_return_exact_bytes(moto_server: MotoServer,
                                                            s3_bucket: str) -> None:
    data = os.urandom(OBJECT_BYTES)
    with s3_model_proxy(moto_server.port) as proxy:
        s3 = client(proxy)
        s3.put_object(Bucket=s3_bucket, Key="obj", Body=data)
        assert s3.get_object(Bucket=s3_bucket, Key="obj")["Body"].read() == data
        for first, last in ((0, 0), (65_535, 65_536), (1_000_000, 2_500_000),
                            (OBJECT_BYTES - 10, OBJECT_BYTES - 1)):
            reply = s3.get_object(Bucket=s3_bucket, Key="obj", Range=f"bytes={first}-{last}")
            assert reply["ContentRange"] == f"bytes {first}-{last}/{OBJECT_BYTES}"
            assert reply["Body"].read() == data[first:last + 1]
        suffix = s3.get_object(Bucket=s3_bucket, Key="obj", Range="bytes=-100")
        assert suffix["Body"].read() == data[-100:]
        assert s3.head_object(Bucket=s3_bucket, Key="obj")["ContentLength"] == OBJECT_BYTES


def test_multipart_upload_through_the_proxy(moto_server: MotoServer, s3_bucket: str) -> None:
    data = os.urandom(11 * MIB)
    parts = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB,
                           max_concurrency=2)
    with s3_model_proxy(moto_server.port) as proxy:
        s3 = client(proxy)
        s3.upload_fileobj(io.BytesIO(data), s3_bucket, "multi", Config=parts)
        stats = proxy.stats()
        assert s3.get_object(Bucket=s3_bucket, Key="multi")["Body"].read() == data
    assert stats.requests["PUT"] == 3  # UploadPart x3
    assert stats.requests["POST"] == 2  # CreateMultipartUpload, CompleteMultipartUpload


def test_chunked_request_body_is_forwarded(moto_server: MotoServer, s3_bucket: str) -> None:
    pieces = [os.urandom(size) for size in (1, 100_000, 7, 300_000)]
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        port = urllib.parse.urlsplit(proxy.endpoint_url).port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("PUT", f"/{s3_bucket}/chunked", body=iter(pieces),
                     encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
        assert conn.getresponse().status == 200
        conn.close()
    stored = moto_server.client().get_object(Bucket=s3_bucket, Key="chunked")["Body"].read()
    assert stored == b"".join(pieces)


def test_first_byte_waits_for_the_configured_latency(moto_server: MotoServer,
                                                     s3_bucket: str) -> None:
    moto_server.client().put_object(Bucket=s3_bucket, Key="small", Body=b"x" * 1000)
    with s3_model_proxy(moto_server.port, first_byte_ms=LATENCY_MS) as proxy:
        s3 = client(proxy)
        for _ in range(3):
            started = time.monotonic()
            reply = s3.get_object(Bucket=s3_bucket, Key="small")  # returns at the headers
            assert time.monotonic() - started >= LATENCY_MS / 1000
            reply["Body"].read()
        started = time.monotonic()
        s3.head_object(Bucket=s3_bucket, Key="small")
        assert time.monotonic() - started >= LATENCY_MS / 1000


def test_body_arrives_no_faster_than_the_bandwidth(moto_server: MotoServer,
                                                   s3_bucket: str) -> None:
    data = os.urandom(PACED_BYTES)
    moto_server.client().put_object(Bucket=s3_bucket, Key="big", Body=data)
    with s3_model_proxy(moto_server.port, first_byte_ms=0,
                        bandwidth_bytes_per_s=BANDWIDTH) as proxy:
        s3 = client(proxy)
        started = time.monotonic()
        body = s3.get_object(Bucket=s3_bucket, Key="big")["Body"].read()
        elapsed = time.monotonic() - started
    assert body == data
    assert elapsed >= MIN_PACED_SECONDS


def test_slow_down_fails_exactly_the_next_requests(moto_server: MotoServer,
                                                   s3_bucket: str) -> None:
    moto_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"value")
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        s3 = client(proxy, retries=NO_RETRIES)
        s3.get_object(Bucket=s3_bucket, Key="k")["Body"].read()  # connected
        proxy.slow_down(2)
        for _ in range(2):
            response = slow_down_error(lambda: s3.get_object(Bucket=s3_bucket, Key="k"))
            assert response["Error"]["Code"] == "SlowDown"
            assert response["Error"]["Message"] == "Please reduce your request rate."
            assert response["ResponseMetadata"]["HTTPStatusCode"] == SLOW_DOWN_STATUS
        assert s3.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"value"
        s3.put_object(Bucket=s3_bucket, Key="k2", Body=b"after")
        stats = proxy.stats()
    assert stats.slow_downs == 2
    assert stats.requests == {"GET": 4, "PUT": 1}
    assert stats.connections == 1  # a 503 keeps the connection alive


def test_slow_down_is_retried_by_boto3_standard_mode(moto_server: MotoServer,
                                                     s3_bucket: str) -> None:
    moto_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"value")
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        s3 = client(proxy, retries={"max_attempts": 1, "mode": "standard"})  # one retry
        proxy.slow_down(2)
        response = slow_down_error(lambda: s3.get_object(Bucket=s3_bucket, Key="k"))
        assert response["Error"]["Code"] == "SlowDown"
        assert response["ResponseMetadata"]["RetryAttempts"] == 1
        assert s3.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"value"
        assert proxy.stats().slow_downs == 2


def test_slow_down_for_fails_every_request_for_a_while(moto_server: MotoServer,
                                                       s3_bucket: str) -> None:
    moto_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"value")
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        s3 = client(proxy, retries=NO_RETRIES)
        window_end = time.monotonic() + SLOW_DOWN_WINDOW_S
        proxy.slow_down_for(SLOW_DOWN_WINDOW_S)
        for _ in range(3):
            response = slow_down_error(lambda: s3.head_object(Bucket=s3_bucket, Key="k"))
            # HEAD answers carry no body: boto3 can only report the status.
            assert response["ResponseMetadata"]["HTTPStatusCode"] == SLOW_DOWN_STATUS
        time.sleep(max(0.0, window_end - time.monotonic()) + 0.05)
        assert s3.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"value"
        assert proxy.stats().slow_downs == 3


def test_stats_count_gets_bytes_and_connections(moto_server: MotoServer, s3_bucket: str) -> None:
    sizes = (10, 100_000, 1_000_000)
    for size in sizes:
        moto_server.client().put_object(Bucket=s3_bucket, Key=f"o{size}", Body=b"b" * size)
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        s3 = client(proxy)
        s3.head_bucket(Bucket=s3_bucket)
        proxy.reset_stats()
        for size in sizes:
            assert len(s3.get_object(Bucket=s3_bucket, Key=f"o{size}")["Body"].read()) == size
        s3.head_object(Bucket=s3_bucket, Key="o10")
        stats = proxy.stats()
    assert stats.gets == len(sizes)
    assert stats.requests == {"GET": len(sizes), "HEAD": 1}
    assert stats.total_requests == len(sizes) + 1
    assert stats.bytes_sent == sum(sizes)
    assert stats.slow_downs == 0
    assert stats.connections == 0  # reset after connecting; the one connection was kept


def test_fresh_client_makes_one_connection(moto_server: MotoServer, s3_bucket: str) -> None:
    with s3_model_proxy(moto_server.port, first_byte_ms=0) as proxy:
        s3 = client(proxy)
        for i in range(5):
            s3.put_object(Bucket=s3_bucket, Key=f"k{i}", Body=b"v")
            s3.get_object(Bucket=s3_bucket, Key=f"k{i}")["Body"].read()
        assert proxy.stats().connections == 1


@pytest.mark.parametrize(("latency", "bandwidth"), [(-1.0, 1e6), (0.0, 0.0), (0.0, -5.0)])
def test_rejects_impossible_settings(latency: float, bandwidth: float) -> None:
    with pytest.raises(ValueError):
        S3ModelProxy(1, first_byte_ms=latency, bandwidth_bytes_per_s=bandwidth)


def test_the_model_in_a_process_of_its_own(moto_server: MotoServer, s3_bucket: str) -> None:
    # What the benchmarks run: the same proxy, driven through a pipe.
    data = os.urandom(MIB)
    with s3_model_process(moto_server.port, first_byte_ms=LATENCY_MS) as model:
        s3 = s3_client(model.endpoint_url, retries=NO_RETRIES)
        s3.put_object(Bucket=s3_bucket, Key="obj", Body=data)
        model.reset_stats()
        started = time.monotonic()
        assert s3.get_object(Bucket=s3_bucket, Key="obj", Range="bytes=10-99")["Body"].read() \
            == data[10:100]
        assert time.monotonic() - started >= LATENCY_MS / 1000
        # The proxy counts a body once written, which may be after the client
        # has read it: wait for the count, with a deadline.
        deadline = time.monotonic() + 10
        while (stats := model.stats()).bytes_sent < 90 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (stats.gets, stats.bytes_sent, stats.total_requests) == (1, 90, 1)
        model.slow_down(1)
        assert slow_down_error(lambda: s3.head_object(Bucket=s3_bucket, Key="obj"))[
            "ResponseMetadata"]["HTTPStatusCode"] == SLOW_DOWN_STATUS
        assert model.stats().slow_downs == 1
        process = model._process  # noqa: SLF001 - checking it is gone afterwards
    assert not process.is_alive()
