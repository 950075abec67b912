"""A remote tier in a local (or mounted) directory: the embedded default RSM.

Layout, as Kafka's LocalTieredStorage test plugin lays it out::

    <dir>/<topic>-<partition>-<topicId>/<20-digit start offset>-<segment uuid>.log
                                                                            .index
                                                                            .timeindex
                                                                            .txnindex
                                                                            .snapshot
                                                                            .leader_epoch_checkpoint

Every file is written to ``<name>.tmp``, fsynced, and renamed into place, so
a reader never sees half a file; a copy that fails removes the files it had
renamed into place, so half a segment is never left behind either. Reads are
``pread`` calls on the stored file. Deleting the last segment of a partition
removes its directory; a copy racing that removal recreates it.

Settings (``rsm.config.`` prefix stripped): ``dir``, the root directory.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Mapping

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

CONFIG_DEFS = (
    ConfigDef("rsm.config.dir", ConfigType.STRING, None,
              "Root directory of the filesystem remote tier."),
)

TMP_SUFFIX = ".tmp"

# A concurrent delete may remove the partition directory between our makedirs
# and the open of a temp file in it; a handful of retries always wins that race.
_CREATE_ATTEMPTS = 5


class FileSystemRemoteStorageManager:
    """RemoteStorageManager over a directory tree. Thread-safe: no shared state."""

    def __init__(self, config: Mapping[str, str]) -> None:
        """Args: config: ``dir`` (required), the root directory; created if missing.

        Raises:
            ConfigError: ``dir`` missing or not creatable.
        """
        root = os.path.abspath(parse_rsm_config(CONFIG_DEFS, config, required=("dir",))["dir"])
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise ConfigError("rsm.config.dir", root, f"cannot create directory: {exc}") from exc
        self.root = root

    def partition_dir(self, tp: TopicIdPartition) -> str:
        """``<root>/<topic>-<partition>-<topicId>``."""
        return os.path.join(self.root, f"{tp.topic}-{tp.partition}-{uuid_str(tp.topic_id)}")

    def object_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """Where the segment's file with ``suffix`` is stored."""
        directory = self.partition_dir(metadata.topic_id_partition)
        return os.path.join(directory, f"{segment_stem(metadata)}.{suffix}")

    # -- copy ---------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """See RemoteStorageManager.copy_log_segment_data. Returns the
        segment's manifest (``naming.segment_manifest``)."""
        started = time.monotonic()
        directory = self.partition_dir(metadata.topic_id_partition)
        try:
            check_log_size(metadata, data.log_segment)
            for suffix, source in segment_sources(data):
                _write_atomically(directory, self.object_path(metadata, suffix), source)
            _fsync_dir(directory)
        except OSError as exc:
            self._remove_objects(metadata, missing_ok=True)
            raise RemoteStorageError(f"cannot sync {directory}: {exc}", retriable=True) from exc
        except BaseException:
            self._remove_objects(metadata, missing_ok=True)
            raise
        log.debug("copied segment to filesystem tier", segment=str(metadata.remote_log_segment_id),
                  bytes=metadata.segment_size_in_bytes,
                  duration_ms=round((time.monotonic() - started) * 1000, 1))
        return segment_manifest(data)

    # -- fetch --------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """See RemoteStorageManager.fetch_log_segment."""
        start, end = resolve_range(metadata, start_position, end_position)
        path = self.object_path(metadata, LOG_SUFFIX)
        fd = _open_stored(path, metadata)
        try:
            size = os.fstat(fd).st_size
            if size != metadata.segment_size_in_bytes:
                raise RemoteStorageError(
                    f"remote segment {path} is {size} bytes, its metadata says "
                    f"{metadata.segment_size_in_bytes}: corrupt or truncated")
            return _pread_exactly(fd, path, start, end - start + 1)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path}: {exc}", retriable=True) from exc
        finally:
            os.close(fd)

    def open_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                         end_position: int | None = None) -> FileRange:
        """``fetch_log_segment``'s bytes as a stream (KIP-405's fetchLogSegment
        returns an InputStream), which the chunk cache reads straight into its
        chunk buffers (``FileRange.readinto``): no copy of its own per byte.

        Raises:
            RemoteStorageError: as ``fetch_log_segment`` (and from the stream's reads).
        """
        start, end = resolve_range(metadata, start_position, end_position)
        path = self.object_path(metadata, LOG_SUFFIX)
        fd = _open_stored(path, metadata)
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise RemoteStorageError(f"cannot read {path}: {exc}", retriable=True) from exc
        if size != metadata.segment_size_in_bytes:
            os.close(fd)
            raise RemoteStorageError(
                f"remote segment {path} is {size} bytes, its metadata says "
                f"{metadata.segment_size_in_bytes}: corrupt or truncated")
        return FileRange(fd, path, start, end - start + 1)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """See RemoteStorageManager.fetch_index."""
        return self._read_whole(self.object_path(metadata, INDEX_SUFFIXES[index_type]),
                                metadata)

    def fetch_combined_indexes(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's ``indexes`` object (layout 2): both indexes in one read.

        Raises:
            RemoteResourceNotFoundError: a segment copied without one.
        """
        return self._read_whole(self.object_path(metadata, INDEXES_SUFFIX), metadata)

    def fetch_codec_manifest(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The segment's codec manifest object (layout 3, ``codec_storage``)."""
        return self._read_whole(self.object_path(metadata, CODEC_MANIFEST_SUFFIX), metadata)

    def _read_whole(self, path: str, metadata: RemoteLogSegmentMetadata) -> bytes:
        fd = _open_stored(path, metadata)
        try:
            return _pread_exactly(fd, path, 0, os.fstat(fd).st_size)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path}: {exc}", retriable=True) from exc
        finally:
            os.close(fd)

    # -- delete -------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See RemoteStorageManager.delete_log_segment_data."""
        self._remove_objects(metadata, missing_ok=False)
        try:
            os.rmdir(self.partition_dir(metadata.topic_id_partition))
        except OSError:
            pass  # other segments remain, or it is already gone
        log.debug("deleted segment from filesystem tier",
                  segment=str(metadata.remote_log_segment_id))

    def _remove_objects(self, metadata: RemoteLogSegmentMetadata, missing_ok: bool) -> None:
        """Unlink every file of the segment, temp files included.

        Args:
            missing_ok: True when cleaning up after a failed copy: errors are
                logged, not raised, so the copy's own error surfaces.
        """
        for suffix in ALL_SUFFIXES:
            path = self.object_path(metadata, suffix)
            for victim in (path, path + TMP_SUFFIX):
                try:
                    os.unlink(victim)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if not missing_ok:
                        raise RemoteStorageError(f"cannot delete {victim}: {exc}",
                                                 retriable=True) from exc
                    log.warning("cannot remove file of a failed copy", path=victim,
                                error=str(exc))

    # -- listing (operator tools; the broker never lists) ---------------------

    def partition_prefix(self, tip: TopicIdPartition) -> str:
        """See ListableRemoteStorage.partition_prefix: the partition's directory."""
        return os.path.basename(self.partition_dir(tip)) + "/"

    def list_objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """The files of the layout (in the root and in partition directories)
        whose relative path starts with ``prefix``, in name order; see
        ListableRemoteStorage. Files that vanish while listing are skipped.

        Raises:
            RemoteStorageError: the root cannot be read.
        """
        try:
            directories = sorted(os.listdir(self.root))
        except OSError as exc:
            raise RemoteStorageError(f"cannot list {self.root}: {exc}", retriable=True) from exc
        for directory in directories:
            path = os.path.join(self.root, directory)
            if not os.path.isdir(path):
                if directory.startswith(prefix):
                    yield from _listed(self.root, directory, None)
                continue
            if not ((directory + "/").startswith(prefix) or prefix.startswith(directory + "/")):
                continue
            tip = _parse_partition_dir(directory)
            try:
                names = sorted(os.listdir(path))
            except OSError:
                continue  # removed with its last segment meanwhile
            for name in names:
                key = f"{directory}/{name}"
                if key.startswith(prefix):
                    parsed = parse_object_name(tip, name) if tip is not None else None
                    yield from _listed(self.root, key, parsed)

    def close(self) -> None:
        """Nothing to release."""


def _parse_partition_dir(name: str) -> TopicIdPartition | None:
    """``<topic>-<partition>-<topicId>`` (the topic id may hold '-'); None if not one."""
    topic_partition, dash = name[:-UUID_CHARS - 1], name[-UUID_CHARS - 1:-UUID_CHARS]
    topic, _, partition = topic_partition.rpartition("-")
    topic_id = parse_uuid(name[-UUID_CHARS:])
    if dash != "-" or topic_id is None or not topic or not partition.isdigit():
        return None
    return TopicIdPartition(topic_id, topic, int(partition))


def _listed(root: str, key: str, name: SegmentObjectName | None) -> Iterator[StoredObject]:
    """The StoredObject of ``root/key`` if it is (still) a file."""
    try:
        info = os.stat(os.path.join(root, key))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RemoteStorageError(f"cannot stat {key} in {root}: {exc}", retriable=True) from exc
    if stat.S_ISREG(info.st_mode):
        yield StoredObject(key, info.st_size, info.st_mtime, name)


def _write_atomically(directory: str, dest: str, source: StrPath | bytes) -> None:
    """Write ``source`` (a local file or bytes) to ``dest`` via a fsynced temp file.

    Raises:
        RemoteStorageError: the local source is unreadable (not retriable) or
            the remote directory is not writable (retriable).
    """
    src_fd = None
    if not isinstance(source, bytes):
        try:
            src_fd = os.open(source, os.O_RDONLY)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read local file {source}: {exc}") from exc
    tmp = dest + TMP_SUFFIX
    try:
        out_fd = _create_temp(directory, tmp)
        try:
            if isinstance(source, bytes):
                _write_all(out_fd, source)
            elif src_fd is not None:
                _copy_fd(src_fd, out_fd, source)
            os.fsync(out_fd)
        finally:
            os.close(out_fd)
        os.replace(tmp, dest)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise RemoteStorageError(f"cannot write {dest}: {exc}", retriable=True) from exc
    except BaseException:
        _unlink_quietly(tmp)
        raise
    finally:
        if src_fd is not None:
            os.close(src_fd)


def _create_temp(directory: str, tmp: str) -> int:
    attempts = 0
    while True:
        os.makedirs(directory, exist_ok=True)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except FileNotFoundError:
            attempts += 1
            if attempts == _CREATE_ATTEMPTS:
                raise


def _copy_fd(src_fd: int, out_fd: int, source: StrPath) -> None:
    """Copy the whole source file (kernel-side) into ``out_fd``."""
    size = os.fstat(src_fd).st_size
    offset = 0
    while offset < size:
        sent = os.sendfile(out_fd, src_fd, offset, size - offset)
        if sent == 0:
            raise RemoteStorageError(f"local file {source!r} shrank while being copied")
        offset += sent


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _open_stored(path: str, metadata: RemoteLogSegmentMetadata) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise RemoteResourceNotFoundError(
            f"{os.path.basename(path)} of remote segment {metadata.remote_log_segment_id} "
            f"not found in {os.path.dirname(path)}") from None
    except OSError as exc:
        raise RemoteStorageError(f"cannot open {path}: {exc}", retriable=True) from exc


class FileRange:
    """A byte range of a stored file, read in order (it owns ``fd``). Reads
    past the file's end give nothing, which the reader reports as short."""

    # The chunk cache may hand ``readinto`` its own buffer.
    readinto_direct = True

    def __init__(self, fd: int, path: str, position: int, length: int) -> None:
        self._fd = fd
        self._path = path
        self._position = position
        self._left = length

    def readinto(self, buf: memoryview) -> int:
        """Up to ``len(buf)`` bytes into ``buf``; 0 once the range is done.

        Raises:
            RemoteStorageError: the read failed.
        """
        with buf[:min(len(buf), self._left)] as into:
            if not into:
                return 0
            try:
                got = os.preadv(self._fd, [into], self._position)
            except OSError as exc:
                raise RemoteStorageError(f"cannot read {self._path}: {exc}",
                                         retriable=True) from exc
        self._position += got
        self._left -= got
        return got

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" once the range is done."""
        buf = bytearray(min(size, self._left))
        got = self.readinto(memoryview(buf))
        return bytes(buf[:got])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _pread_exactly(fd: int, path: str, position: int, length: int) -> bytes:
    """Read ``length`` bytes at ``position`` or raise: never a short result."""
    chunks: list[bytes] = []
    remaining = length
    while remaining > 0:
        chunk = os.pread(fd, remaining, position)
        if not chunk:
            raise RemoteStorageError(
                f"{path} ended {remaining} bytes short of position {position + remaining}")
        chunks.append(chunk)
        position += len(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
