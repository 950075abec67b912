"""S3 RSM behaviour beyond the shared contract: key layout, multipart uploads,
failure handling behind a fault-injecting proxy, short and corrupt responses,
error classification, settings, and credentials staying out of the logs."""

from __future__ import annotations

import pytest
import structlog

from config.defs import ConfigError
from storage.remote.naming import uuid_str
from storage.remote.s3 import S3RemoteStorageManager
from storage.remote.types import IndexType, RemoteResourceNotFoundError, RemoteStorageError
from system_tests.s3_fixtures import Fault, FaultProxy, MotoServer, free_port, list_keys
from tests.storage.remote.conftest import Backend, s3_backend, s3_settings
from tests.storage.remote.segments import SegmentFactory

pytestmark = pytest.mark.usefixtures("aws_test_env")

MIB = 1024 * 1024
PART = 5 * MIB  # S3's minimum part size
BIG = 12 * MIB  # three parts: 5 + 5 + 2 MiB


@pytest.fixture
def direct(moto_server: MotoServer, s3_bucket: str) -> Backend:
    """The S3 RSM straight to moto, with the minimum part size."""
    return s3_backend(moto_server, s3_bucket, **{"upload.part.size": str(PART)})


@pytest.fixture
def proxied(moto_server: MotoServer, s3_bucket: str, fault_proxy: FaultProxy) -> Backend:
    """The S3 RSM talking to moto through the fault proxy."""
    return s3_backend(moto_server, s3_bucket, fault_proxy.endpoint_url,
                      **{"upload.part.size": str(PART)})


def test_key_layout(direct: Backend, segments: SegmentFactory, moto_server: MotoServer,
                    s3_bucket: str) -> None:
    seg = segments.make(100, start_offset=42)
    direct.rsm.copy_log_segment_data(seg.metadata, seg.data)
    tip = seg.metadata.topic_id_partition
    stem = (f"tiered/orders-{uuid_str(tip.topic_id)}/0/{42:020d}-"
            f"{uuid_str(seg.metadata.remote_log_segment_id.id)}")
    assert sorted(list_keys(moto_server.client(), s3_bucket)) == sorted(
        f"{stem}.{s}" for s in
        ["log", "index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint",
         "indexes"])


def test_large_segment_goes_up_in_parts(proxied: Backend, segments: SegmentFactory,
                                        fault_proxy: FaultProxy, moto_server: MotoServer,
                                        s3_bucket: str) -> None:
    seg = segments.make(BIG)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert fault_proxy.count("PUT", "partNumber=") == 3
    assert fault_proxy.count("POST", "uploadId=") == 1  # CompleteMultipartUpload
    head = moto_server.client().head_object(
        Bucket=s3_bucket, Key=proxied.rsm.object_key(seg.metadata, "log"))  # type: ignore[attr-defined]
    assert head["ContentLength"] == BIG and head["ETag"].endswith('-3"')
    assert proxied.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    # A range across the first part boundary.
    assert proxied.rsm.fetch_log_segment(seg.metadata, PART - 10, PART + 9) == \
        seg.log[PART - 10:PART + 10]


def test_segment_at_part_size_is_one_put(proxied: Backend, segments: SegmentFactory,
                                         fault_proxy: FaultProxy) -> None:
    seg = segments.make(PART)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert fault_proxy.count("PUT", "partNumber=") == 0
    assert proxied.rsm.fetch_log_segment(seg.metadata, PART - 1) == seg.log[-1:]


@pytest.mark.parametrize(("fault", "method", "key_suffix", "query", "size"), [
    (Fault.ERROR_500, "PUT", ".log", None, 1000),  # PutObject of the log
    (Fault.ERROR_500, "PUT", ".timeindex", None, 1000),  # after log and index are up
    (Fault.RESET, "PUT", ".log", None, 2 * MIB),  # reset mid-body of a single PUT
    (Fault.ERROR_500, "PUT", ".log", "partNumber=2", BIG),  # UploadPart
    (Fault.RESET, "PUT", ".log", "partNumber=3", BIG),  # reset mid-part
    (Fault.ERROR_500, "POST", ".log", "uploadId=", BIG),  # CompleteMultipartUpload
])
def test_failed_copy_raises_and_leaves_nothing(
        proxied: Backend, segments: SegmentFactory, fault_proxy: FaultProxy,
        moto_server: MotoServer, s3_bucket: str, fault: Fault, method: str, key_suffix: str,
        query: str | None, size: int) -> None:
    seg = segments.make(size)
    rule = fault_proxy.inject(fault, method=method, key_suffix=key_suffix, query=query)
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert info.value.retriable
    assert rule.hits == 2  # botocore retried once (retry.max.attempts=2), then gave up
    assert proxied.stored(seg.metadata) == []  # objects and open multipart uploads
    assert list_keys(moto_server.client(), s3_bucket) == []


def test_transient_fault_is_retried_by_botocore(proxied: Backend, segments: SegmentFactory,
                                                fault_proxy: FaultProxy) -> None:
    seg = segments.make(BIG)
    fault_proxy.inject(Fault.ERROR_500, method="PUT", query="partNumber=2", times=1)
    fault_proxy.inject(Fault.RESET, method="GET", key_suffix=".log", times=1)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert proxied.rsm.fetch_log_segment(seg.metadata, 0) == seg.log


def test_store_down_copy_fails_retriable_and_cleanup_happens_later(
        proxied: Backend, segments: SegmentFactory, fault_proxy: FaultProxy) -> None:
    seg = segments.make(1000)
    fault_proxy.inject(Fault.ERROR_500, key_suffix=".timeindex")  # fail midway...
    fault_proxy.inject(Fault.RESET, method="POST")  # ...and the cleanup too
    fault_proxy.inject(Fault.RESET, query="uploads")
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert info.value.retriable and "PutObject" in str(info.value)
    assert proxied.stored(seg.metadata) != []  # the store was down for the cleanup
    fault_proxy.clear()
    proxied.rsm.delete_log_segment_data(seg.metadata)  # the expirer's later delete
    assert proxied.stored(seg.metadata) == []


@pytest.mark.parametrize("fault", [Fault.SHORT_BODY, Fault.CUT_BODY])
def test_short_log_response_is_an_error(proxied: Backend, segments: SegmentFactory,
                                        fault_proxy: FaultProxy, fault: Fault) -> None:
    seg = segments.make(100_000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    fault_proxy.inject(fault, method="GET", key_suffix=".log")
    for start, end in [(0, None), (1000, 50_000)]:
        with pytest.raises(RemoteStorageError) as info:
            proxied.rsm.fetch_log_segment(seg.metadata, start, end)
        assert info.value.retriable
    fault_proxy.clear()
    assert proxied.rsm.fetch_log_segment(seg.metadata, 1000, 50_000) == seg.log[1000:50_001]


@pytest.mark.parametrize("fault", [Fault.SHORT_BODY, Fault.CUT_BODY, Fault.CORRUPT_BODY])
def test_short_or_corrupt_index_response_is_an_error(proxied: Backend, segments: SegmentFactory,
                                                     fault_proxy: FaultProxy,
                                                     fault: Fault) -> None:
    seg = segments.make(1000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    fault_proxy.inject(fault, method="GET", key_suffix=".timeindex")
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.fetch_index(seg.metadata, IndexType.TIMESTAMP)
    assert info.value.retriable


def test_corrupt_whole_log_read_is_an_error(proxied: Backend, segments: SegmentFactory,
                                            fault_proxy: FaultProxy) -> None:
    """A whole-object GET of a single-PUT log is checked against its CRC32."""
    seg = segments.make(1000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    fault_proxy.inject(Fault.CORRUPT_BODY, method="GET", key_suffix=".log")
    with pytest.raises(RemoteStorageError):
        proxied.rsm.fetch_log_segment(seg.metadata, 0)


def test_store_unreachable_is_retriable(moto_server: MotoServer, s3_bucket: str,
                                        segments: SegmentFactory) -> None:
    backend = s3_backend(moto_server, s3_bucket, f"http://127.0.0.1:{free_port()}",
                         **{"connect.timeout.ms": "500"})
    seg = segments.make(1000)
    for call in (lambda: backend.rsm.copy_log_segment_data(seg.metadata, seg.data),
                 lambda: backend.rsm.fetch_log_segment(seg.metadata, 0),
                 lambda: backend.rsm.delete_log_segment_data(seg.metadata)):
        with pytest.raises(RemoteStorageError) as info:
            call()
        assert info.value.retriable


def test_missing_bucket_is_fatal_not_not_found(moto_server: MotoServer,
                                               segments: SegmentFactory) -> None:
    backend = s3_backend(moto_server, "no-such-bucket-tierd")
    seg = segments.make(1000)
    for call in (lambda: backend.rsm.copy_log_segment_data(seg.metadata, seg.data),
                 lambda: backend.rsm.fetch_log_segment(seg.metadata, 0)):
        with pytest.raises(RemoteStorageError) as info:
            call()
        assert not info.value.retriable
        assert not isinstance(info.value, RemoteResourceNotFoundError)
        assert "NoSuchBucket" in str(info.value)


def test_delete_aborts_multipart_upload_left_by_a_crash(direct: Backend, segments: SegmentFactory,
                                                        moto_server: MotoServer,
                                                        s3_bucket: str) -> None:
    seg = segments.make(1000)
    key = direct.rsm.object_key(seg.metadata, "log")  # type: ignore[attr-defined]
    moto_server.client().create_multipart_upload(Bucket=s3_bucket, Key=key)
    assert direct.stored(seg.metadata) == [key]
    direct.rsm.delete_log_segment_data(seg.metadata)
    assert direct.stored(seg.metadata) == []


@pytest.mark.parametrize(("settings", "key"), [
    ({}, "rsm.config.bucket"),
    ({"bucket": "b", "upload.part.size": str(5 * MIB - 1)}, "rsm.config.upload.part.size"),
    ({"bucket": "b", "upload.part.size": "lots"}, "rsm.config.upload.part.size"),
    ({"bucket": "b", "retry.max.attempts": "0"}, "rsm.config.retry.max.attempts"),
    ({"bucket": "b", "path.style.access": "maybe"}, "rsm.config.path.style.access"),
])
def test_invalid_settings(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        S3RemoteStorageManager(settings)
    assert info.value.key == key


def test_credentials_never_logged(monkeypatch: pytest.MonkeyPatch, moto_server: MotoServer,
                                  s3_bucket: str, fault_proxy: FaultProxy,
                                  segments: SegmentFactory) -> None:
    secret = "tierd-test-secret-0123456789"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", secret + "-token")
    seg = segments.make(1000)
    with structlog.testing.capture_logs() as logs:
        rsm = S3RemoteStorageManager(s3_settings(fault_proxy.endpoint_url, s3_bucket,
                                                 unknown="setting"))
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        fault_proxy.inject(Fault.ERROR_500, key_suffix=".index")
        fault_proxy.inject(Fault.RESET, method="POST")
        with pytest.raises(RemoteStorageError) as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        rsm.close()
        S3RemoteStorageManager(s3_settings(f"http://user:{secret}@127.0.0.1:9", s3_bucket)).close()
    assert logs, "expected log lines to check"
    text = repr(logs) + str(info.value) + repr(info.value.__cause__) + repr(vars(rsm))
    assert secret not in text

