"""A remote tier in an S3 bucket (AWS S3, MinIO, moto, any S3-compatible store).

Keys::

    <prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segment uuid>.<suffix>

with the suffixes of the local files (log, index, timeindex, txnindex,
snapshot, leader_epoch_checkpoint). The partition-level prefix sorts a
partition's segments by offset in a listing, for operators; tierd itself
never lists (the metadata manager knows what exists); operator tools do
(``list_objects``, e.g. ``tierd admin reconcile``).

Writes: a .log larger than ``upload.part.size`` goes up as a multipart
upload, everything else as one PUT. A copy that fails aborts its multipart
upload and deletes every object of the segment before raising, so a failed
copy leaves nothing behind (if the store is down, the cleanup may fail too;
then the expirer's later delete of the attempt removes the rest).

Reads: ranged GETs (``Range: bytes=a-b``). The response must cover exactly
the bytes asked for, and the object must be as long as the metadata says;
anything else raises rather than returning short or foreign data. Whole
objects are checked by the CRC32 that botocore adds on upload and validates
on download (its default ``when_supported`` checksum settings).

Retries: botocore's ``standard`` mode retries 5xx, throttling and connection
errors with exponential backoff and jitter, up to ``retry.max.attempts``
attempts. What is left after that is classified once, in ``_classify``, into
RemoteStorageError(retriable=...) or RemoteResourceNotFoundError.

Credentials come only from boto3's standard chain (environment, shared
files, container/instance roles); they are never read, stored or logged here.

Settings (``rsm.config.`` prefix stripped): see CONFIG_DEFS.

Why one module over ~450 lines: it is one backend, the S3 client's whole
contract in one place (key layout, ranged GETs, multipart copies, listing,
retries and their error mapping); each half alone would hide how a failure of
one call shows up in another.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import structlog

from config.defs import ConfigDef, ConfigError, ConfigType
from storage.remote.api import SegmentObjectName, StoredObject
from storage.remote.naming import (
    ALL_SUFFIXES,
    CODEC_MANIFEST_SUFFIX,
    INDEX_SUFFIXES,
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    segment_manifest,
    segment_sources,
    segment_stem,
    uuid_str,
)
from storage.remote.rsm import (
    UUID_CHARS,
    check_log_size,
    parse_object_name,
    parse_rsm_config,
    parse_uuid,
    resolve_range,
)
from storage.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    StrPath,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)

MIB = 1024 * 1024
# S3's limits on multipart uploads: every part but the last is at least
# 5 MiB and at most 5 GiB, and an upload has at most 10,000 parts.
S3_MIN_PART_SIZE = 5 * MIB
S3_MAX_PART_SIZE = 5 * 1024 * MIB
S3_MAX_PARTS = 10_000

CONFIG_DEFS = (
    ConfigDef("rsm.config.bucket", ConfigType.STRING, None, "Bucket holding the remote tier."),
    ConfigDef("rsm.config.prefix", ConfigType.STRING, "",
              "Key prefix for every object, e.g. 'kafka/' (include the slash)."),
    ConfigDef("rsm.config.region", ConfigType.STRING, None,
              "AWS region; unset means boto3's chain (AWS_REGION, config file)."),
    ConfigDef("rsm.config.endpoint.url", ConfigType.STRING, None,
              "Endpoint of an S3-compatible store (MinIO, moto); unset means AWS."),
    ConfigDef("rsm.config.path.style.access", ConfigType.BOOLEAN, None,
              "Path-style addressing; default: on when endpoint.url is set, as MinIO needs."),
    # 16 MiB: big enough that a 1 GiB segment is 64 parts, small enough that a
    # failed part costs little to resend and a part buffer little memory.
    ConfigDef("rsm.config.upload.part.size", ConfigType.LONG, 16 * MIB,
              "Multipart part size; a .log above it is uploaded in parts.",
              at_least=S3_MIN_PART_SIZE, at_most=S3_MAX_PART_SIZE),
    # 5 attempts with botocore's backoff (up to 1, 2, 4, 8 s) ride out a
    # brief outage while a copy still fails within ~15 s if the store is down.
    ConfigDef("rsm.config.retry.max.attempts", ConfigType.INT, 5,
              "Attempts per request, the first included (botocore standard retry mode).",
              at_least=1),
    ConfigDef("rsm.config.connect.timeout.ms", ConfigType.INT, 10_000,
              "TCP connect timeout per attempt.", at_least=1),
    ConfigDef("rsm.config.read.timeout.ms", ConfigType.INT, 60_000,
              "Socket read timeout per attempt.", at_least=1),
    # Kafka's default pools: 10 copier + 10 expiration + 10 reader threads.
    ConfigDef("rsm.config.max.connections", ConfigType.INT, 32,
              "HTTP connection pool size; at least the threads that call the RSM.",
              at_least=1),
)

# Error codes worth retrying besides any 5xx (botocore's own lists, plus S3's).
_THROTTLING_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
    "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    "RequestLimitExceeded", "BandwidthLimitExceeded",
})
_TRANSIENT_CODES = frozenset({
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "InternalError",
    "ServiceUnavailable", "RequestTimeTooSkewed",
})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
# Transport failures: the request may not have reached the store or its
# answer was lost; the same call can succeed later.
_RETRIABLE_TRANSPORT = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.IncompleteReadError,
    botocore.exceptions.FlexibleChecksumError,
)


class S3RemoteStorageManager:
    """RemoteStorageManager over S3. Thread-safe: one boto3 client, shared."""

    # A copy spends its CPU in Python (signing, checksums, the HTTP client):
    # by default it runs in a worker process (tierd.remote.copy.processes).
    COPIES_RUN_PYTHON = True

    def __init__(self, config: Mapping[str, str]) -> None:
        """Args: config: the settings in CONFIG_DEFS (``bucket`` required).

        Raises:
            ConfigError: a missing or invalid setting.
        """
        values = parse_rsm_config(CONFIG_DEFS, config, required=("bucket",))
        self.bucket: str = values["bucket"]
        self.prefix: str = values["prefix"] or ""
        self.part_size: int = values["upload.part.size"]
        endpoint = values["endpoint.url"]
        path_style = values["path.style.access"]
        if path_style is None:
            path_style = endpoint is not None
        client_config = botocore.config.Config(
            region_name=values["region"],
            connect_timeout=values["connect.timeout.ms"] / 1000,
            read_timeout=values["read.timeout.ms"] / 1000,
            max_pool_connections=values["max.connections"],
            retries={"mode": "standard", "total_max_attempts": values["retry.max.attempts"]},
            s3={"addressing_style": "path" if path_style else "auto"},
        )
        try:
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, config=client_config)
        except ValueError as exc:
            raise ConfigError("rsm.config.endpoint.url", endpoint, str(exc)) from exc
        # Follow botocore's checksum setting (AWS_REQUEST_CHECKSUM_CALCULATION)
        # for multipart uploads too, where it does not apply by itself.
        self._part_checksums = getattr(
            self._client.meta.config, "request_checksum_calculation", None) == "when_supported"
        log.info("s3 remote storage configured", bucket=self.bucket, prefix=self.prefix,
                 region=self._client.meta.region_name, endpoint=_without_userinfo(endpoint),
                 part_size=self.part_size)

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """``<prefix><topic>-<topicId>/<partition>/<offset>-<uuid>.<suffix>``."""
        tp = metadata.topic_id_partition
        return (f"{self.prefix}{tp.topic}-{uuid_str(tp.topic_id)}/{tp.partition}/"
                f"{segment_stem(metadata)}.{suffix}")

    # -- copy ---------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """See RemoteStorageManager.copy_log_segment_data. Returns the
        segment's manifest (``naming.segment_manifest``)."""
        started = time.monotonic()
        try:
            check_log_size(metadata, data.log_segment)
            for suffix, source in segment_sources(data):
                key = self.object_key(metadata, suffix)
                if isinstance(source, bytes):
                    self._put(key, source)
                else:
                    self._upload_file(key, source)
        except BaseException:
            self._remove_failed_copy(metadata)
            raise
        log.debug("copied segment to s3", segment=str(metadata.remote_log_segment_id),
                  bytes=metadata.segment_size_in_bytes,
                  duration_ms=round((time.monotonic() - started) * 1000, 1))
        return segment_manifest(data)

    def _upload_file(self, key: str, path: StrPath) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read local file {path}: {exc}") from exc
        try:
            size = os.fstat(fd).st_size
            if size > self.part_size:
                self._upload_multipart(key, fd, path, size)
            else:
                self._put(key, _read_local(fd, path, 0, size))
        finally:
            os.close(fd)

    def _put(self, key: str, body: bytes) -> None:
        with _translated("PutObject", key):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=body)

    def _upload_multipart(self, key: str, fd: int, path: StrPath, size: int) -> None:
        # Grow the part size if the file would need more parts than S3 allows.
        part_size = max(self.part_size, -(-size // S3_MAX_PARTS))
        checksum: dict[str, Any] = {"ChecksumAlgorithm": "CRC32"} if self._part_checksums else {}
        with _translated("CreateMultipartUpload", key):
            upload_id = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=key, **checksum)["UploadId"]
        try:
            parts = []
            for number, offset in enumerate(range(0, size, part_size), start=1):
                body = _read_local(fd, path, offset, min(part_size, size - offset))
                with _translated("UploadPart", key):
                    reply = self._client.upload_part(
                        Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                        Body=body, **checksum)
                part = {"PartNumber": number, "ETag": reply["ETag"]}
                if "ChecksumCRC32" in reply:
                    part["ChecksumCRC32"] = reply["ChecksumCRC32"]
                parts.append(part)
            with _translated("CompleteMultipartUpload", key):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": parts})
        except BaseException:
            self._abort_upload(key, upload_id)
            raise

    def _remove_failed_copy(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Best effort: the copy's own error is what the caller must see."""
        try:
            self.delete_log_segment_data(metadata)
        except RemoteStorageError as exc:
            log.warning("objects of a failed copy may remain until it is deleted again",
                        segment=str(metadata.remote_log_segment_id), error=str(exc))

    def _abort_upload(self, key: str, upload_id: str) -> None:
        try:
            with _translated("AbortMultipartUpload", key):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key,
                                                    UploadId=upload_id)
        except RemoteResourceNotFoundError:
            pass
        except RemoteStorageError as exc:
            log.warning("cannot abort multipart upload", key=key, error=str(exc))

    # -- fetch --------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """See RemoteStorageManager.fetch_log_segment."""
        start, end = resolve_range(metadata, start_position, end_position)
        key = self.object_key(metadata, LOG_SUFFIX)
        with _translated("GetObject", key):
            reply = self._client.get_object(Bucket=self.bucket, Key=key,
                                            Range=f"bytes={start}-{end}")
            with contextlib.closing(reply["Body"]) as stream:
                body: bytes = stream.read()
        expected = metadata.segment_size_in_bytes
        content_range = reply.get("ContentRange")
        if content_range is None:
            # A store that ignored Range sent the whole object.
            if len(body) != expected:
                raise RemoteStorageError(
                    f"s3://{self.bucket}/{key} is {len(body)} bytes, its metadata says "
                    f"{expected}: corrupt or truncated")
            return body[start:end + 1]
        total = _range_total(content_range)
        if total != expected:
            raise RemoteStorageError(
                f"s3://{self.bucket}/{key} is {total} bytes (Content-Range {content_range!r}), "
                f"its metadata says {expected}: corrupt or truncated")
        if len(body) != end - start + 1:
            raise RemoteStorageError(
                f"short response for s3://{self.bucket}/{key} bytes {start}-{end}: "
                f"got {len(body)} bytes", retriable=True)
        return body

    def open_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                         end_position: int | None = None) -> _RangeStream:
        """``fetch_log_segment``'s bytes as a stream (KIP-405's fetchLogSegment
        returns an InputStream): the chunk cache hands out a chunk's first
        bytes while the rest is still on its way.

        Raises:
            RemoteStorageError: as ``fetch_log_segment`` (and from the stream's reads).
        """
        start, end = resolve_range(metadata, start_position, end_position)
        key = self.object_key(metadata, LOG_SUFFIX)
        with _translated("GetObject", key):
            reply = self._client.get_object(Bucket=self.bucket, Key=key,
                                            Range=f"bytes={start}-{end}")
        content_range = reply.get("ContentRange")
        total = None if content_range is None else _range_total(content_range)
        if total != metadata.segment_size_in_bytes:
            reply["Body"].close()
            # A store that ignored Range, or an object of the wrong size: the
            # whole-range read says which, with its error.
            return _RangeStream(io.BytesIO(self.fetch_log_segment(metadata, start, end)), key,
                                end - start + 1)
        return _RangeStream(reply["Body"], key, end - start + 1)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """See RemoteStorageManager.fetch_index."""
        return self._get_whole(self.object_key(metadata, INDEX_SUFFIXES[index_type]))

    def fetch_combined_indexes(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's ``indexes`` object (layout 2, ``naming.INDEXES_SUFFIX``):
        both indexes a seek needs in one GET.

        Raises:
            RemoteResourceNotFoundError: a segment copied without one.
        """
        return self._get_whole(self.object_key(metadata, INDEXES_SUFFIX))

    def fetch_codec_manifest(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's codec manifest object (layout 3, ``codec_storage``)."""
        return self._get_whole(self.object_key(metadata, CODEC_MANIFEST_SUFFIX))

    def _get_whole(self, key: str) -> bytes:
        with _translated("GetObject", key):
            reply = self._client.get_object(Bucket=self.bucket, Key=key)
            with contextlib.closing(reply["Body"]) as stream:
                body: bytes = stream.read()
        if len(body) != reply.get("ContentLength", len(body)):
            raise RemoteStorageError(
                f"short response for s3://{self.bucket}/{key}: got {len(body)} of "
                f"{reply['ContentLength']} bytes", retriable=True)
        return body

    # -- delete -------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See RemoteStorageManager.delete_log_segment_data.

        Also aborts multipart uploads of the segment's .log that a crashed
        copy left open (they are invisible to GET but still billed).
        """
        keys = [self.object_key(metadata, suffix) for suffix in ALL_SUFFIXES]
        self._abort_stale_uploads(keys[0])
        with _translated("DeleteObjects", keys[0]):
            reply = self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True})
        errors = reply.get("Errors") or []
        if errors:
            first = errors[0]
            raise RemoteStorageError(
                f"{len(errors)} objects of remote segment {metadata.remote_log_segment_id} "
                f"not deleted, e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}",
                retriable=any(_code_retriable(e.get("Code", ""), 0) for e in errors))
        log.debug("deleted segment from s3", segment=str(metadata.remote_log_segment_id))

    def _abort_stale_uploads(self, key: str) -> None:
        """Best effort: a store that forbids listing uploads must still delete."""
        try:
            with _translated("ListMultipartUploads", key):
                reply = self._client.list_multipart_uploads(Bucket=self.bucket, Prefix=key)
        except RemoteStorageError as exc:
            log.warning("cannot list multipart uploads; a crashed copy's upload may remain "
                        "(a bucket lifecycle rule can abort it)", key=key, error=str(exc))
            return
        for upload in reply.get("Uploads") or []:
            if upload.get("Key") == key:
                self._abort_upload(key, upload["UploadId"])

    # -- listing (operator tools; the broker never lists) ---------------------

    def partition_prefix(self, tip: TopicIdPartition) -> str:
        """See ListableRemoteStorage.partition_prefix (relative to the prefix setting)."""
        return f"{tip.topic}-{uuid_str(tip.topic_id)}/{tip.partition}/"

    def list_objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object under ``<prefix setting><prefix>``, keys relative to the
        prefix setting, in key order (ListObjectsV2, all pages); see
        ListableRemoteStorage."""
        paginator = self._client.get_paginator("list_objects_v2")
        with _translated("ListObjectsV2", self.prefix + prefix):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                for entry in page.get("Contents") or []:
                    key = entry["Key"][len(self.prefix):]
                    yield StoredObject(key, int(entry["Size"]),
                                       entry["LastModified"].timestamp(), _parse_key(key))

    def close(self) -> None:
        """Close the client's connection pool. Idempotent."""
        self._client.close()


def _parse_key(key: str) -> SegmentObjectName | None:
    """What ``<topic>-<topicId>/<partition>/<file>`` names; None for another layout."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or parts[0][-UUID_CHARS - 1:-UUID_CHARS] != "-":
        return None
    topic, topic_id = parts[0][:-UUID_CHARS - 1], parse_uuid(parts[0][-UUID_CHARS:])
    if not topic or topic_id is None:
        return None
    return parse_object_name(TopicIdPartition(topic_id, topic, int(parts[1])), parts[2])


def _read_local(fd: int, path: StrPath, position: int, length: int) -> bytes:
    """``length`` bytes of a local file; a short read means the file changed.

    Raises:
        RemoteStorageError: not retriable: the local segment is unreadable.
    """
    try:
        data = os.pread(fd, length, position)
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local file {path}: {exc}") from exc
    if len(data) != length:
        raise RemoteStorageError(f"local file {path} shrank while being copied")
    return data


def _without_userinfo(url: str | None) -> str | None:
    """``url`` minus any ``user:password@``, for logging."""
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


class _RangeStream:
    """A GET's body read piece by piece; store errors as RemoteStorageErrors."""

    def __init__(self, body: Any, key: str, length: int) -> None:
        self._body = body
        self._key = key
        self._left = length

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" once the range is done.

        Raises:
            RemoteStorageError: the connection failed, or the body ended early.
        """
        if self._left <= 0:
            return b""
        try:
            with _translated("GetObject", self._key):
                piece: bytes = self._body.read(min(size, self._left))
        except OSError as exc:
            raise RemoteStorageError(f"reading s3 object {self._key}: {exc}",
                                     retriable=True) from exc
        if not piece:
            raise RemoteStorageError(f"short response for {self._key}: {self._left} bytes "
                                     f"missing", retriable=True)
        self._left -= len(piece)
        return piece

    def close(self) -> None:
        self._body.close()


def _range_total(content_range: str) -> int | None:
    """The total size in ``bytes a-b/total``; None if unknown (``*``) or malformed."""
    total = content_range.rpartition("/")[2].strip()
    return int(total) if total.isdigit() else None


def _code_retriable(code: str, status: int) -> bool:
    return status >= 500 or status == 429 or code in _THROTTLING_CODES or code in _TRANSIENT_CODES


def _classify(operation: str, key: str, exc: Exception) -> RemoteStorageError:
    """The one place where S3 failures become RemoteStorageErrors."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket"):
            return RemoteResourceNotFoundError(f"{operation} {key}: not found ({code or status})")
        return RemoteStorageError(
            f"{operation} {key} failed: {code or status} {error.get('Message', '')}".rstrip(),
            retriable=_code_retriable(code, status))
    retriable = isinstance(exc, _RETRIABLE_TRANSPORT)
    return RemoteStorageError(f"{operation} {key} failed: {type(exc).__name__}: {exc}",
                              retriable=retriable)


@contextlib.contextmanager
def _translated(operation: str, key: str) -> Iterator[None]:
    """Turn botocore's exceptions inside the block into RemoteStorageErrors."""
    try:
        yield
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise _classify(operation, key, exc) from exc
