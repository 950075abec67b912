"""The RemoteStorageManager contract over an object store reached through a
vendor SDK (Google Cloud Storage, Azure Blob Storage), written once.

A backend (``storage.remote.gcs``, ``storage.remote.azure``) supplies six
primitive calls on named objects (put bytes, upload a file, open a ranged
read, read a whole object, delete, list) and ``classify``, its one mapping
of SDK failures; ``ObjectStoreRSM`` turns them into the KIP-405 operations
with the S3 manager's rules:

- Names: ``<prefix><topic>-<topicId>/<partition>/<offset>-<uuid>.<suffix>``,
  the S3 key layout, so operator tools read every tier alike.
- Copies write every object of the segment, .log first; a copy that fails
  deletes what it wrote before raising.
- Reads are ranged GETs. A response must cover exactly the bytes asked for
  and the object must be as long as the metadata says, or the read raises
  rather than returning short or foreign data.
- Retries: each primitive call is retried here (the SDKs' own retries are
  off, so ``retry.max.attempts`` means the same for every store): a
  retriable failure (5xx, 429, timeouts, connection errors) waits an
  exponential backoff with full jitter and tries again, up to the attempts
  setting; what is left is raised as classified.

Concurrency: the SDK clients are thread-safe; every method blocks and runs in
the callers' worker threads (``storage.remote.api``).
"""

from __future__ import annotations

import functools
import io
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog

from config.defs import ConfigDef, ConfigType
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
from storage.remote.rsm import UUID_CHARS, check_log_size, parse_object_name, parse_uuid, resolve_range
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

T = TypeVar("T")

# The first retry waits up to 200 ms, doubling to at most 5 s: with the
# default 5 attempts a brief outage is ridden out while a copy against a
# store that is down still fails within ~10 s, as the S3 manager's does.
RETRY_BASE_S = 0.2
RETRY_MAX_S = 5.0


def common_defs(prefix: str) -> tuple[ConfigDef, ...]:
    """Settings every SDK-backed manager has, under ``rsm.config.<prefix>``."""
    return (
        ConfigDef(f"rsm.config.{prefix}key.prefix", ConfigType.STRING, "",
                  "Name prefix for every object, e.g. 'kafka/' (include the slash)."),
        ConfigDef(f"rsm.config.{prefix}retry.max.attempts", ConfigType.INT, 5,
                  "Attempts per request, the first included (exponential backoff with "
                  "jitter between them).", at_least=1),
        ConfigDef(f"rsm.config.{prefix}connect.timeout.ms", ConfigType.INT, 10_000,
                  "TCP connect timeout per attempt.", at_least=1),
        ConfigDef(f"rsm.config.{prefix}read.timeout.ms", ConfigType.INT, 60_000,
                  "Socket read timeout per attempt.", at_least=1),
    )


@dataclass(slots=True)
class RangeReply:
    """An opened ranged read: the object's total size and its body."""

    total: int | None
    body: RangeBody


class RangeBody(Protocol):
    def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class ObjectStoreRSM:
    """RemoteStorageManager over a backend's primitive object calls.

    Subclasses set ``store`` (for messages, e.g. ``gs://bucket``), ``prefix``
    and ``attempts``, and implement the primitives below; every primitive
    raises the SDK's own exceptions, which ``classify`` maps.
    """

    # A copy spends its CPU in Python (the SDK's HTTP client): by default it
    # runs in a worker process (tierd.remote.copy.processes).
    COPIES_RUN_PYTHON = True

    store: str
    prefix: str
    attempts: int

    # -- primitives (backend) -------------------------------------------------

    def _put(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def _upload(self, name: str, path: StrPath) -> None:
        raise NotImplementedError

    def _open_range(self, name: str, start: int, end: int) -> RangeReply:
        raise NotImplementedError

    def _get(self, name: str) -> bytes:
        raise NotImplementedError

    def _delete(self, name: str) -> None:
        """Delete one object; a missing one raises the SDK's not-found error."""
        raise NotImplementedError

    def _list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        """(full name, size, modified seconds) of every object under ``prefix``."""
        raise NotImplementedError

    def classify(self, operation: str, name: str, exc: Exception) -> RemoteStorageError | None:
        """The backend's one mapping of an SDK failure; None: not an SDK failure."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- retries ----------------------------------------------------------------

    def _call(self, operation: str, name: str, fn: Callable[[], T]) -> T:
        """``fn()`` with retries of retriable failures; raises RemoteStorageError."""
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except RemoteStorageError:
                raise
            except Exception as exc:
                error = self.classify(operation, name, exc)
                if error is None:
                    raise
                if not error.retriable or attempt == self.attempts:
                    raise error from exc
                delay = random.uniform(0, min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (attempt - 1)))
                log.debug("retrying remote storage call", operation=operation, name=name,
                          attempt=attempt, delay_s=round(delay, 3), error=str(error))
                time.sleep(delay)
        raise AssertionError("unreachable: attempts >= 1")

    # -- names --------------------------------------------------------------------

    def object_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """``<prefix><topic>-<topicId>/<partition>/<offset>-<uuid>.<suffix>``."""
        return f"{self.prefix}{self.partition_prefix(metadata.topic_id_partition)}" \
               f"{segment_stem(metadata)}.{suffix}"

    def partition_prefix(self, tip: TopicIdPartition) -> str:
        """See ListableRemoteStorage.partition_prefix (relative to the prefix setting)."""
        return f"{tip.topic}-{uuid_str(tip.topic_id)}/{tip.partition}/"

    # -- copy -----------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """See RemoteStorageManager.copy_log_segment_data. Returns the
        segment's manifest (``naming.segment_manifest``)."""
        started = time.monotonic()
        try:
            check_log_size(metadata, data.log_segment)
            for suffix, source in segment_sources(data):
                name = self.object_key(metadata, suffix)
                if isinstance(source, bytes):
                    self._call("put", name, functools.partial(self._put, name, source))
                else:
                    self._call("upload", name, functools.partial(self._upload, name, source))
        except BaseException:
            self._remove_failed_copy(metadata)
            raise
        log.debug("copied segment", store=self.store, segment=str(metadata.remote_log_segment_id),
                  bytes=metadata.segment_size_in_bytes,
                  duration_ms=round((time.monotonic() - started) * 1000, 1))
        return segment_manifest(data)

    def _remove_failed_copy(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Best effort: the copy's own error is what the caller must see."""
        try:
            self.delete_log_segment_data(metadata)
        except RemoteStorageError as exc:
            log.warning("objects of a failed copy may remain until it is deleted again",
                        store=self.store, segment=str(metadata.remote_log_segment_id),
                        error=str(exc))

    # -- fetch ----------------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """See RemoteStorageManager.fetch_log_segment."""
        stream = self.open_log_segment(metadata, start_position, end_position)
        try:
            return stream.read_all()
        finally:
            stream.close()

    def open_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                         end_position: int | None = None) -> RangeStream:
        """``fetch_log_segment``'s bytes as a stream (KIP-405's fetchLogSegment
        returns an InputStream), checked as it is read.

        Raises:
            RemoteStorageError: as ``fetch_log_segment`` (and from the stream's reads).
        """
        start, end = resolve_range(metadata, start_position, end_position)
        name = self.object_key(metadata, LOG_SUFFIX)
        reply = self._call("get", name, lambda: self._open_range(name, start, end))
        expected = metadata.segment_size_in_bytes
        if reply.total != expected:
            reply.body.close()
            size = "of unknown size" if reply.total is None else f"{reply.total} bytes"
            raise RemoteStorageError(
                f"{self.store}/{name} is {size}, its metadata says {expected}: "
                "corrupt or truncated")
        return RangeStream(self, reply.body, name, end - start + 1)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """See RemoteStorageManager.fetch_index."""
        name = self.object_key(metadata, INDEX_SUFFIXES[index_type])
        return self._call("get", name, lambda: self._get(name))

    def fetch_combined_indexes(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's ``indexes`` object (layout 2, ``naming.INDEXES_SUFFIX``).

        Raises:
            RemoteResourceNotFoundError: a segment copied without one.
        """
        name = self.object_key(metadata, INDEXES_SUFFIX)
        return self._call("get", name, lambda: self._get(name))

    def fetch_codec_manifest(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's codec manifest object (layout 3, ``codec_storage``)."""
        name = self.object_key(metadata, CODEC_MANIFEST_SUFFIX)
        return self._call("get", name, lambda: self._get(name))

    # -- delete ---------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See RemoteStorageManager.delete_log_segment_data: every object the
        segment may have; missing ones are not an error (idempotent)."""
        for suffix in ALL_SUFFIXES:
            name = self.object_key(metadata, suffix)
            try:
                self._call("delete", name, functools.partial(self._delete, name))
            except RemoteResourceNotFoundError:
                pass
        log.debug("deleted segment", store=self.store,
                  segment=str(metadata.remote_log_segment_id))

    # -- listing (operator tools; the broker never lists) ------------------------

    def list_objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object under ``<prefix setting><prefix>``, names relative to the
        prefix setting, in name order; see ListableRemoteStorage."""
        full = self.prefix + prefix
        listed = self._call("list", full, lambda: sorted(self._list(full)))
        for name, size, modified in listed:
            key = name[len(self.prefix):]
            yield StoredObject(key, size, modified, parse_key(key))


class RangeStream:
    """A ranged GET's body read piece by piece, never returning more or fewer
    bytes than the range; store errors as RemoteStorageErrors."""

    def __init__(self, rsm: ObjectStoreRSM, body: RangeBody, name: str, length: int) -> None:
        self._rsm = rsm
        self._body = body
        self._name = name
        self._left = length

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" once the range is done.

        Raises:
            RemoteStorageError: the connection failed, or the body ended early
                (retriable).
        """
        if self._left <= 0:
            return b""
        try:
            piece = self._body.read(min(size, self._left))
        except RemoteStorageError:
            raise
        except Exception as exc:
            error = self._rsm.classify("get", self._name, exc)
            if error is None:
                raise
            error.retriable = True
            raise error from exc
        if not piece:
            raise RemoteStorageError(f"short response for {self._rsm.store}/{self._name}: "
                                     f"{self._left} bytes missing", retriable=True)
        if len(piece) > self._left:
            raise RemoteStorageError(f"response for {self._rsm.store}/{self._name} is longer "
                                     "than the range asked for", retriable=True)
        self._left -= len(piece)
        return piece

    def read_all(self) -> bytes:
        out = io.BytesIO()
        while piece := self.read(1 << 20):
            out.write(piece)
        return out.getvalue()

    def close(self) -> None:
        self._body.close()


def parse_key(key: str) -> SegmentObjectName | None:
    """What ``<topic>-<topicId>/<partition>/<file>`` names; None for another layout."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or parts[0][-UUID_CHARS - 1:-UUID_CHARS] != "-":
        return None
    topic, topic_id = parts[0][:-UUID_CHARS - 1], parse_uuid(parts[0][-UUID_CHARS:])
    if not topic or topic_id is None:
        return None
    return parse_object_name(TopicIdPartition(topic_id, topic, int(parts[1])), parts[2])


def http_retriable(status: int) -> bool:
    """Statuses worth another attempt: server errors, throttling, request timeout."""
    return status >= 500 or status in (408, 429)
